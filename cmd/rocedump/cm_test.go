package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestCMAgreesWithTshark: every CM MAD of the traces that tshark decoded,
// rocedump decodes too (through package cm) with tshark's message name, and the
// same transaction ID, communication IDs, service ID, QPN, starting PSN, reject
// reason and rdma_cm addresses; rocedump finds no CM MAD tshark did not.
func TestCMAgreesWithTshark(t *testing.T) {
	files, _ := filepath.Glob(filepath.Join(traceDir, "*.cm.txt"))
	own, _ := filepath.Glob(filepath.Join(cmDir, "*.cm.txt"))
	files = append(files, own...)
	if len(files) < 3 {
		t.Fatalf("want the rping, ucmatose and udaddy CM decodes, have %q", files)
	}
	idx := map[string]int{}
	for i, c := range columns {
		idx[c] = i
	}
	seen := map[string]int{}
	for _, path := range files {
		t.Run(filepath.Base(path), func(t *testing.T) {
			data, err := os.ReadFile(strings.TrimSuffix(path, ".cm.txt") + ".pcap")
			if err != nil {
				t.Fatal(err)
			}
			lines, err := runDump(t, data, true)
			if err != nil {
				t.Fatal(err)
			}
			ours := map[string][]string{}
			for _, l := range lines[1:] {
				f := strings.Split(l, "\t")
				if f[idx["cm_msg"]] != "" {
					ours[f[0]] = f
				}
			}
			want := table(t, path)
			if len(ours) != len(want) {
				t.Errorf("rocedump decoded %d CM MADs, tshark %d", len(ours), len(want))
			}
			for _, w := range want {
				f := ours[w["no"]]
				if f == nil {
					t.Errorf("frame %s (%s): no CM decode", w["no"], w["info"])
					continue
				}
				msg := f[idx["cm_msg"]]
				seen[msg]++
				check := func(col, tsharkCol string) {
					if got, exp := f[idx[col]], w[tsharkCol]; !equalField(got, exp) {
						t.Errorf("frame %s %s: %s = %q, tshark %s = %q", w["no"], msg, col, got, tsharkCol, exp)
					}
				}
				if "CM: "+msg != w["info"] {
					t.Errorf("frame %s: %q, tshark %q", w["no"], msg, w["info"])
				}
				check("cm_tid", "tid")
				switch msg {
				case "ConnectRequest":
					check("cm_comm_id", "req_comm_id")
					check("cm_service_id", "req_service_id")
					check("cm_qpn", "req_qpn")
					check("cm_psn", "req_psn")
					src, port, _ := strings.Cut(f[idx["cm_cma_src"]], ":")
					if src != w["req_cma_src"] || !equalField(port, w["req_cma_sport"]) || f[idx["cm_cma_dst"]] != w["req_cma_dst"] {
						t.Errorf("frame %s: rdma_cm %s > %s, tshark %s:%s > %s", w["no"], f[idx["cm_cma_src"]], f[idx["cm_cma_dst"]],
							w["req_cma_src"], w["req_cma_sport"], w["req_cma_dst"])
					}
				case "ConnectReply":
					check("cm_comm_id", "rep_comm_id")
					check("cm_remote_comm_id", "rep_remote_comm_id")
					check("cm_qpn", "rep_qpn")
					check("cm_psn", "rep_psn")
				case "ReadyToUse":
					check("cm_comm_id", "rtu_comm_id")
					check("cm_remote_comm_id", "rtu_remote_comm_id")
				case "ConnectReject":
					check("cm_comm_id", "rej_comm_id")
					check("cm_remote_comm_id", "rej_remote_comm_id")
					check("cm_status", "rej_reason")
				case "DisconnectRequest":
					check("cm_comm_id", "dreq_comm_id")
					check("cm_remote_comm_id", "dreq_remote_comm_id")
					check("cm_qpn", "dreq_remote_qpn")
				case "DisconnectReply":
					check("cm_comm_id", "drep_comm_id")
					check("cm_remote_comm_id", "drep_remote_comm_id")
				}
			}
		})
	}
	for _, msg := range []string{"ConnectRequest", "ConnectReply", "ReadyToUse", "DisconnectRequest", "DisconnectReply", "ServiceIDResReq", "ServiceIDResReqResp"} {
		if seen[msg] == 0 {
			t.Errorf("no %s in the traces checked", msg)
		}
	}
}

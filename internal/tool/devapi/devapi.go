// Package devapi is the JSON form of a goroce device that roced serves at
// /debug/devices and cmd/roce-devinfo prints: what ibv_devinfo, show_gids,
// rdma res show qp and rdma statistic show of an RDMA device. One package
// holds the schema, so the daemon and the tool cannot drift apart.
package devapi

import (
	"encoding/binary"
	"fmt"
	"maps"
	"slices"
	"strings"

	"github.com/goroce/goroce/internal/core/transport"
	"github.com/goroce/goroce/roce"
)

// Path is where roced serves the devices, as a JSON array of Device.
const Path = "/debug/devices"

// Device is one device roced serves (ibv_query_device and more).
type Device struct {
	Name         string    `json:"name"` // hca_id, e.g. goroce(127.0.0.1)
	Addr         string    `json:"addr"` // the IP address the device binds
	Transport    string    `json:"transport"`
	FWVer        string    `json:"fw_ver"`
	NodeGUID     string    `json:"node_guid"` // as ibv_devinfo prints it: 0255:aaaa:bbbb:cccc
	SysImageGUID string    `json:"sys_image_guid"`
	VendorID     uint32    `json:"vendor_id"`
	VendorPartID uint32    `json:"vendor_part_id"`
	HWVer        uint32    `json:"hw_ver"`
	PhysPortCnt  int       `json:"phys_port_cnt"`
	MaxMRSize    uint64    `json:"max_mr_size"`
	MaxQP        int       `json:"max_qp"`
	MaxQPWR      int       `json:"max_qp_wr"`
	MaxSGE       int       `json:"max_sge"`
	MaxCQ        int       `json:"max_cq"`
	MaxCQE       int       `json:"max_cqe"`
	MaxMR        int       `json:"max_mr"`
	MaxPD        int       `json:"max_pd"`
	MaxAH        int       `json:"max_ah"`
	MaxSRQ       int       `json:"max_srq"`
	MaxSRQWR     int       `json:"max_srq_wr"`
	MaxQPRdAtom  int       `json:"max_qp_rd_atom"`
	MaxQPInitRd  int       `json:"max_qp_init_rd_atom"`
	AtomicCap    string    `json:"atomic_cap"`
	Ports        []Port    `json:"ports"`
	QPs          []QP      `json:"qps"`
	Counters     []Counter `json:"counters"`
	// Processes are the programs attached through roced to the address,
	// sharing the device; their QPs are in QPs with their pid and command,
	// and Counters include them (as rdma statistic counts every process).
	Processes []Process `json:"processes,omitempty"`
}

// Process is a program attached to a shared device, with what it holds (as
// it last reported).
type Process struct {
	PID       int    `json:"pid"`
	UID       uint32 `json:"uid"`
	Comm      string `json:"comm"`
	FirstQPN  uint32 `json:"first_qpn"` // its block of QPNs
	LastQPN   uint32 `json:"last_qpn"`
	QPs       int    `json:"qps"`
	CQs       int    `json:"cqs"`
	SRQs      int    `json:"srqs"`
	MRs       int    `json:"mrs"`
	PDs       int    `json:"pds"`
	Listeners int    `json:"listeners"`
	// Omitted counts QPs the process did not list one by one (it reports
	// at most a bounded number).
	Omitted int `json:"qps_omitted,omitempty"`
}

// Port is one port (ibv_query_port) with its GID table.
type Port struct {
	Port         int    `json:"port"`
	State        string `json:"state"` // PORT_ACTIVE, PORT_DOWN
	StateNum     int    `json:"state_num"`
	MaxMTU       int    `json:"max_mtu"` // bytes
	ActiveMTU    int    `json:"active_mtu"`
	LinkLayer    string `json:"link_layer"`
	LID          int    `json:"port_lid"`
	GIDTblLen    int    `json:"gid_tbl_len"`
	PKeyTblLen   int    `json:"pkey_tbl_len"`
	MaxMsgSz     uint32 `json:"max_msg_sz"`
	PortCapFlags uint32 `json:"port_cap_flags"`
	GIDs         []GID  `json:"gids"`
}

// GID is one entry of a port's GID table.
type GID struct {
	Index int    `json:"index"`
	GID   string `json:"gid"`            // eight groups of four hex digits, as show_gids prints
	IPv4  string `json:"ipv4,omitempty"` // the address of an IPv4-mapped GID
	Type  string `json:"type"`           // RoCE v2
	// Bound is false for an entry the device lists but does not send from: a
	// QP or AH that names it as its source GID is refused.
	Bound bool `json:"bound"`
}

// QP is one QP of a device, with what rdma res show qp shows of it. It is
// the one JSON form of a QP: a Device's QPs, and roced's /debug/qps.
type QP struct {
	Device      string `json:"device"` // the address of the device that holds it
	QPN         uint32 `json:"lqpn"`
	DestQPN     uint32 `json:"rqpn"`
	Type        string `json:"type"`
	State       string `json:"state"`
	Peer        string `json:"peer,omitempty"`
	SrcPort     uint16 `json:"src_port"`
	SQPSN       uint32 `json:"sq_psn"` // the next PSN the QP sends
	RQPSN       uint32 `json:"rq_psn"` // the PSN it expects next
	AckedPSN    uint32 `json:"acked_psn"`
	MSN         uint32 `json:"msn"`
	SendQueued  int    `json:"send_queued"`
	TxPackets   uint64 `json:"tx_packets"`
	RxPackets   uint64 `json:"rx_packets"`
	Retransmits uint64 `json:"retransmits"`
	Timeouts    uint64 `json:"timeouts"`
	PID         int    `json:"pid,omitempty"`  // the attached process that owns it; 0: roced's own
	Comm        string `json:"comm,omitempty"` // its command name
	// Congestion control (absent when off): the DCQCN rate the QP is paced
	// at and its target, in Mb/s, α (0..1), and the rate cuts so far.
	CCRateMbps   *float64 `json:"cc_rate_mbps,omitempty"`
	CCTargetMbps *float64 `json:"cc_target_rate_mbps,omitempty"`
	CCAlpha      *float64 `json:"cc_alpha,omitempty"`
	CCCuts       *uint64  `json:"cc_rate_cuts,omitempty"`
}

// QPs lists the QPs of dev, never nil.
func QPs(dev *roce.Device) []QP {
	out := []QP{}
	for _, q := range dev.QPs() {
		out = append(out, QPOf(dev.Addr().String(), q))
	}
	return out
}

// QPOf is q, a QP of the device at addr, with names instead of enum numbers.
func QPOf(addr string, q roce.QPInfo) QP {
	r := QP{Device: addr, QPN: q.QPN, DestQPN: q.DestQPN, Type: q.Type.String(), State: q.State.String(),
		SrcPort: q.SrcPort, SQPSN: uint32(q.NextPSN), RQPSN: uint32(q.ExpectedPSN), AckedPSN: uint32(q.AckedPSN),
		MSN: q.MSN, SendQueued: q.SendQueued, TxPackets: q.TxPackets, RxPackets: q.RxPackets,
		Retransmits: q.Retransmits, Timeouts: q.Timeouts}
	if q.Peer.IsValid() {
		r.Peer = q.Peer.String()
	}
	if q.CCRate != 0 {
		rate, target, alpha, cuts := float64(q.CCRate)/1e6, float64(q.CCTargetRate)/1e6, float64(q.CCAlpha)/1024, q.CCCuts
		r.CCRateMbps, r.CCTargetMbps, r.CCAlpha, r.CCCuts = &rate, &target, &alpha, &cuts
	}
	return r
}

// AddProcess lists an attached process and its QPs on d.
func (d *Device) AddProcess(p Process, qps []roce.QPInfo) {
	d.Processes = append(d.Processes, p)
	d.QPs = append(d.QPs, ProcessQPs(d.Addr, p.PID, p.Comm, qps)...)
}

// ProcessQPs is qps, the QPs of the attached process pid (comm) on the
// device at addr.
func ProcessQPs(addr string, pid int, comm string, qps []roce.QPInfo) []QP {
	out := make([]QP, 0, len(qps))
	for _, q := range qps {
		r := QPOf(addr, q)
		r.PID, r.Comm = pid, comm
		out = append(out, r)
	}
	return out
}

// Counter is one value of the device's counters: a series of the engine's
// counter table (the Prometheus name without roce_) and its labels.
type Counter struct {
	Name   string            `json:"name"`
	Labels map[string]string `json:"labels,omitempty"`
	Value  uint64            `json:"value"`
}

// Key is the counter's name in one word, as rdma statistic prints hardware
// counters: the series without its _total suffix, then the label values.
func (c Counter) Key() string {
	parts := []string{strings.TrimSuffix(c.Name, "_total")}
	keys := slices.Collect(maps.Keys(c.Labels))
	// direction first reads naturally: packets_tx_send.
	slices.SortFunc(keys, func(a, b string) int {
		if (a == "direction") != (b == "direction") {
			if a == "direction" {
				return -1
			}
			return 1
		}
		return strings.Compare(a, b)
	})
	for _, k := range keys {
		parts = append(parts, c.Labels[k])
	}
	return strings.Join(parts, "_")
}

// guid formats a GUID as ibv_devinfo does: four groups of four hex digits.
func guid(g uint64) string {
	var b [8]byte
	binary.BigEndian.PutUint64(b[:], g)
	return fmt.Sprintf("%02x%02x:%02x%02x:%02x%02x:%02x%02x", b[0], b[1], b[2], b[3], b[4], b[5], b[6], b[7])
}

// gidString formats a GID as show_gids does.
func gidString(g roce.GID) string {
	var parts []string
	for i := 0; i < 16; i += 2 {
		parts = append(parts, fmt.Sprintf("%02x%02x", g[i], g[i+1]))
	}
	return strings.Join(parts, ":")
}

var atomicCaps = map[roce.AtomicCap]string{roce.AtomicNone: "ATOMIC_NONE", roce.AtomicHCA: "ATOMIC_HCA", roce.AtomicGlob: "ATOMIC_GLOB"}

// Describe reads everything Device shows of dev.
func Describe(dev *roce.Device) (Device, error) {
	a, err := dev.Query()
	if err != nil {
		return Device{}, err
	}
	d := Device{Name: dev.Name(), Addr: dev.Addr().String(), Transport: "InfiniBand", FWVer: a.FWVer,
		NodeGUID: guid(a.NodeGUID), SysImageGUID: guid(a.SysImageGUID), VendorID: a.VendorID, VendorPartID: a.VendorPartID,
		HWVer: a.HWVer, PhysPortCnt: int(a.PhysPortCnt), MaxMRSize: a.MaxMRSize, MaxQP: a.MaxQP, MaxQPWR: a.MaxQPWR,
		MaxSGE: a.MaxSGE, MaxCQ: a.MaxCQ, MaxCQE: a.MaxCQE, MaxMR: a.MaxMR, MaxPD: a.MaxPD, MaxAH: a.MaxAH,
		MaxSRQ: a.MaxSRQ, MaxSRQWR: a.MaxSRQWR, MaxQPRdAtom: a.MaxQPRdAtom, MaxQPInitRd: a.MaxQPInitRdAtom,
		AtomicCap: atomicCaps[a.AtomicCap]}
	for port := 1; port <= int(a.PhysPortCnt); port++ {
		pa, err := dev.QueryPort(port)
		if err != nil {
			return Device{}, err
		}
		p := Port{Port: port, State: pa.State.String(), StateNum: int(pa.State), MaxMTU: pa.MaxMTU.Bytes(),
			ActiveMTU: pa.ActiveMTU.Bytes(), LinkLayer: "Ethernet", LID: int(pa.LID), GIDTblLen: pa.GIDTblLen,
			PKeyTblLen: pa.PKeyTblLen, MaxMsgSz: pa.MaxMsgSz, PortCapFlags: pa.PortCapFlags}
		for i := range pa.GIDTblLen {
			g, err := dev.QueryGID(i)
			if err != nil || g.IsZero() {
				continue
			}
			e := GID{Index: i, GID: gidString(g), Type: "RoCE v2", Bound: i == dev.GIDIndex()}
			if ip := g.Addr(); ip.Is4() {
				e.IPv4 = ip.String()
			}
			p.GIDs = append(p.GIDs, e)
		}
		d.Ports = append(d.Ports, p)
	}
	d.QPs = QPs(dev)
	d.Counters = Counters(dev.Stats())
	return d, nil
}

// Counters lists every counter and gauge of s (histograms as their count),
// in the engine's table order.
func Counters(s roce.Stats) []Counter {
	var out []Counter
	for _, row := range transport.CounterTable() {
		name := strings.TrimPrefix(row.Metric, "roce_")
		if row.Kind == transport.KindHistogram {
			var n uint64
			for j := range row.Len {
				n += row.Value(&s, j)
			}
			out = append(out, Counter{Name: name + "_count", Value: n})
			continue
		}
		for j := range row.Len {
			c := Counter{Name: name, Value: row.Value(&s, j)}
			if len(row.LabelNames) > 0 {
				c.Labels = map[string]string{}
				for k, v := range row.LabelValues(j) {
					c.Labels[row.LabelNames[k]] = v
				}
			}
			out = append(out, c)
		}
	}
	return out
}

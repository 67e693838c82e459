// Command roce-devinfo shows the devices a roced serves the way the RDMA tools
// show a kernel device: ibv_devinfo (devices, ports, with -v the attributes and
// the GID table), show_gids (gids), rdma res show qp (qp) and rdma statistic
// (stat). It reads roced's /debug/devices over HTTP.
//
// Usage:
//
//	roce-devinfo [-a URL] [-d DEV] [-v] [--json] [devices|gids|qp|stat]
//
// -a is roced's -metrics address (http://127.0.0.1:9464, roced's default);
// roced serves /debug/* only on a loopback -metrics address or on its -debug
// address. -d keeps one device, by name (goroce(127.0.0.1)) or address.
// --json (or -json) prints the JSON instead, for scripts: the devices, the QPs
// with their device, or the counters by device.
package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"slices"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/goroce/goroce/internal/tool/cli"
	"github.com/goroce/goroce/internal/tool/devapi"
	"github.com/goroce/goroce/internal/tool/version"
)

func main() {
	os.Exit(run(context.Background(), os.Args[1:], os.Stdout, os.Stderr))
}

// defaultAddr is roced's default -metrics address.
const defaultAddr = "http://127.0.0.1:9464"

type options struct {
	addr    string
	dev     string
	verbose bool
	json    bool
	what    string
}

func parseArgs(args []string) (*options, *cli.Options, error) {
	o := &options{addr: defaultAddr}
	set := cli.NewOptions("roce-devinfo")
	set.FlagLong(&o.addr, "addr", 'a', "roced's -metrics (or -debug) address", "URL")
	set.FlagLong(&o.dev, "device", 'd', "only this device, by name or address", "DEV")
	set.FlagLong(&o.verbose, "verbose", 'v', "devices: the attributes and the GID table too (ibv_devinfo -v)")
	set.FlagLong(&o.json, "json", 0, "print JSON, for scripts")
	for i, a := range args {
		if a == "-json" {
			args = slices.Clone(args)
			args[i] = "--json"
		}
	}
	ops, err := set.Parse(args)
	if err != nil {
		return nil, set, err
	}
	switch len(ops) {
	case 0:
		o.what = "devices"
	case 1:
		o.what = ops[0]
	default:
		return nil, set, fmt.Errorf("too many arguments: %q", ops)
	}
	switch o.what {
	case "devices", "gids", "qp", "stat":
	case "statistic", "stats":
		o.what = "stat"
	case "qps", "res":
		o.what = "qp"
	default:
		return nil, set, fmt.Errorf("unknown %q: devices, gids, qp or stat", o.what)
	}
	if !strings.Contains(o.addr, "://") {
		o.addr = "http://" + o.addr
	}
	return o, set, nil
}

func run(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	if version.Requested(args) {
		version.Print(stdout, "roce-devinfo")
		return 0
	}
	o, set, err := parseArgs(args)
	if errors.Is(err, cli.ErrHelp) {
		set.PrintUsage(stdout, "[OPTIONS] [devices|gids|qp|stat]",
			"The devices a roced serves, as ibv_devinfo (devices), show_gids (gids), rdma res show qp (qp) and",
			"rdma statistic (stat) show an RDMA device; read from roced's "+devapi.Path+".")
		return 0
	}
	if err != nil {
		fmt.Fprintf(stderr, "roce-devinfo: %v (see --help)\n", err)
		return 2
	}
	devs, err := fetch(ctx, o.addr)
	if err != nil {
		fmt.Fprintf(stderr, "roce-devinfo: %v\n", err)
		return 1
	}
	if o.dev != "" {
		devs = slices.DeleteFunc(devs, func(d devapi.Device) bool { return d.Name != o.dev && d.Addr != o.dev })
		if len(devs) == 0 {
			fmt.Fprintf(stderr, "roce-devinfo: -d %s: roced at %s serves no such device\n", o.dev, o.addr)
			return 1
		}
	}
	if o.json {
		err = printJSON(stdout, o.what, devs)
	} else {
		err = printText(stdout, o, devs)
	}
	if err != nil {
		fmt.Fprintf(stderr, "roce-devinfo: %v\n", err)
		return 1
	}
	return 0
}

// fetch reads roced's devices.
func fetch(ctx context.Context, addr string) ([]devapi.Device, error) {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	url := strings.TrimRight(addr, "/") + devapi.Path
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return nil, err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return nil, fmt.Errorf("no roced at %s (is it running? -a names its -metrics address): %v", addr, err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, 64<<20))
	if err != nil {
		return nil, err
	}
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("%s: %s: %s", url, resp.Status, strings.TrimSpace(string(body)))
	}
	var devs []devapi.Device
	if err := json.Unmarshal(body, &devs); err != nil {
		return nil, fmt.Errorf("%s: %v", url, err)
	}
	return devs, nil
}

// qpRow is a QP with its device, for --json qp.
type qpRow struct {
	Link string `json:"link"`
	devapi.QP
}

// statRow is a device's counters, for --json stat.
type statRow struct {
	Link     string            `json:"link"`
	Counters map[string]uint64 `json:"counters"`
}

func link(d devapi.Device) string { return d.Name + "/1" }

func printJSON(w io.Writer, what string, devs []devapi.Device) error {
	var v any = devs
	switch what {
	case "qp":
		rows := []qpRow{}
		for _, d := range devs {
			for _, q := range d.QPs {
				rows = append(rows, qpRow{link(d), q})
			}
		}
		v = rows
	case "stat":
		rows := []statRow{}
		for _, d := range devs {
			r := statRow{Link: link(d), Counters: map[string]uint64{}}
			for _, c := range d.Counters {
				r.Counters[c.Key()] = c.Value
			}
			rows = append(rows, r)
		}
		v = rows
	case "gids":
		type gidRow struct {
			Dev  string `json:"dev"`
			Port int    `json:"port"`
			devapi.GID
		}
		rows := []gidRow{}
		for _, d := range devs {
			for _, p := range d.Ports {
				for _, g := range p.GIDs {
					rows = append(rows, gidRow{d.Name, p.Port, g})
				}
			}
		}
		v = rows
	}
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(v)
}

var mtuEnum = map[int]int{256: 1, 512: 2, 1024: 3, 2048: 4, 4096: 5}

func printText(w io.Writer, o *options, devs []devapi.Device) error {
	var b strings.Builder
	switch o.what {
	case "devices":
		for _, d := range devs {
			devinfo(&b, d, o.verbose)
		}
	case "gids":
		tw := tabwriter.NewWriter(&b, 0, 8, 1, '\t', 0)
		fmt.Fprintln(tw, "DEV\tPORT\tINDEX\tGID\tIPv4\tVER\tBOUND")
		fmt.Fprintln(tw, "---\t----\t-----\t---\t------------\t---\t-----")
		for _, d := range devs {
			for _, p := range d.Ports {
				for _, g := range p.GIDs {
					bound := "yes"
					if !g.Bound {
						bound = "no"
					}
					fmt.Fprintf(tw, "%s\t%d\t%d\t%s\t%s\tv2\t%s\n", d.Name, p.Port, g.Index, g.GID, g.IPv4, bound)
				}
			}
		}
		tw.Flush()
	case "qp":
		for _, d := range devs {
			for _, q := range d.QPs {
				fmt.Fprintf(&b, "link %s lqpn %d", link(d), q.QPN)
				if q.Type == "RC" || q.Type == "UC" {
					fmt.Fprintf(&b, " rqpn %d", q.DestQPN)
				}
				fmt.Fprintf(&b, " type %s state %s", q.Type, q.State)
				if q.Type == "RC" || q.Type == "UC" {
					fmt.Fprintf(&b, " rq-psn %d", q.RQPSN)
				}
				fmt.Fprintf(&b, " sq-psn %d", q.SQPSN)
				if q.Peer != "" {
					fmt.Fprintf(&b, " peer %s", q.Peer)
				}
				if o.verbose {
					fmt.Fprintf(&b, " src-port %d acked-psn %d send-queued %d tx-pkts %d rx-pkts %d retransmits %d timeouts %d",
						q.SrcPort, q.AckedPSN, q.SendQueued, q.TxPackets, q.RxPackets, q.Retransmits, q.Timeouts)
				}
				b.WriteByte('\n')
			}
		}
	case "stat":
		for _, d := range devs {
			fmt.Fprintf(&b, "link %s", link(d))
			for _, c := range d.Counters {
				fmt.Fprintf(&b, " %s %d", c.Key(), c.Value)
			}
			b.WriteByte('\n')
		}
	}
	_, err := io.WriteString(w, b.String())
	return err
}

// devinfo writes one device as ibv_devinfo does (with -v, ibv_devinfo -v).
func devinfo(b *strings.Builder, d devapi.Device, verbose bool) {
	fmt.Fprintf(b, "hca_id:\t%s\n", d.Name)
	fmt.Fprintf(b, "\ttransport:\t\t\t%s (0)\n", d.Transport)
	fmt.Fprintf(b, "\tfw_ver:\t\t\t\t%s\n", d.FWVer)
	fmt.Fprintf(b, "\tnode_guid:\t\t\t%s\n", d.NodeGUID)
	fmt.Fprintf(b, "\tsys_image_guid:\t\t\t%s\n", d.SysImageGUID)
	fmt.Fprintf(b, "\tvendor_id:\t\t\t%#x\n", d.VendorID)
	fmt.Fprintf(b, "\tvendor_part_id:\t\t\t%d\n", d.VendorPartID)
	fmt.Fprintf(b, "\thw_ver:\t\t\t\t%#x\n", d.HWVer)
	fmt.Fprintf(b, "\tphys_port_cnt:\t\t\t%d\n", d.PhysPortCnt)
	if verbose {
		for _, f := range []struct {
			name string
			v    any
		}{{"max_mr_size", fmt.Sprintf("%#x", d.MaxMRSize)}, {"max_qp", d.MaxQP}, {"max_qp_wr", d.MaxQPWR}, {"max_sge", d.MaxSGE},
			{"max_cq", d.MaxCQ}, {"max_cqe", d.MaxCQE}, {"max_mr", d.MaxMR}, {"max_pd", d.MaxPD},
			{"max_qp_rd_atom", d.MaxQPRdAtom}, {"max_qp_init_rd_atom", d.MaxQPInitRd}, {"atomic_cap", d.AtomicCap},
			{"max_ah", d.MaxAH}, {"max_srq", d.MaxSRQ}, {"max_srq_wr", d.MaxSRQWR}} {
			// Values start at column 40, as in ibv_devinfo.
			fmt.Fprintf(b, "\t%s:%s%v\n", f.name, strings.Repeat("\t", max(1, (40-(9+len(f.name))/8*8)/8)), f.v)
		}
	}
	for _, p := range d.Ports {
		fmt.Fprintf(b, "\t\tport:\t%d\n", p.Port)
		fmt.Fprintf(b, "\t\t\tstate:\t\t\t%s (%d)\n", p.State, p.StateNum)
		fmt.Fprintf(b, "\t\t\tmax_mtu:\t\t%d (%d)\n", p.MaxMTU, mtuEnum[p.MaxMTU])
		fmt.Fprintf(b, "\t\t\tactive_mtu:\t\t%d (%d)\n", p.ActiveMTU, mtuEnum[p.ActiveMTU])
		fmt.Fprintf(b, "\t\t\tsm_lid:\t\t\t0\n")
		fmt.Fprintf(b, "\t\t\tport_lid:\t\t%d\n", p.LID)
		fmt.Fprintf(b, "\t\t\tport_lmc:\t\t0x00\n")
		fmt.Fprintf(b, "\t\t\tlink_layer:\t\t%s\n", p.LinkLayer)
		if verbose {
			fmt.Fprintf(b, "\t\t\tmax_msg_sz:\t\t%#x\n", p.MaxMsgSz)
			fmt.Fprintf(b, "\t\t\tport_cap_flags:\t\t%#08x\n", p.PortCapFlags)
			fmt.Fprintf(b, "\t\t\tgid_tbl_len:\t\t%d\n", p.GIDTblLen)
			fmt.Fprintf(b, "\t\t\tpkey_tbl_len:\t\t%d\n", p.PKeyTblLen)
			for _, g := range p.GIDs {
				note := ""
				if !g.Bound {
					note = " (not bound: no QP may send from it)"
				}
				fmt.Fprintf(b, "\t\t\tGID[%3d]:\t\t%s, %s%s\n", g.Index, g.GID, g.Type, note)
			}
		}
		b.WriteByte('\n')
	}
}

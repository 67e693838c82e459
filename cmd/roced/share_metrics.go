package main

import (
	"slices"
	"strconv"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/goroce/goroce/internal/tool/attachd"
	"github.com/goroce/goroce/metrics"
)

// perProcessSeries bounds the processes of one address that get series of
// their own: the ones attached longest; the rest are summed under
// comm="other", pid="". So each per-process family has at most
// perProcessSeries+1 series per address, however many processes come and go.
const perProcessSeries = 16

// shareCollector exports what sharing adds: the processes attached to each
// address, their own counters (bounded, see perProcessSeries), what the
// kernel steered to no process, and the CM relay's counters. The device-wide
// families (roce_packets_total and the rest) already include every process
// (sharedMetricsDevice).
type shareCollector struct {
	d    *daemon
	addr []string // label names: address, when several

	procs, procQPs, procPkts, procRetx, steerDrops, misrouted, relay, relayDrops *prometheus.Desc
}

func newShareCollector(d *daemon, opt metrics.Options) *shareCollector {
	var addr []string
	if opt.PerAddress {
		addr = []string{"address"}
	}
	lbl := func(l ...string) []string { return append(l, addr...) }
	return &shareCollector{d: d, addr: addr,
		procs:      prometheus.NewDesc("roce_attached_processes", "Processes attached through roced's socket, sharing the address.", addr, nil),
		procQPs:    prometheus.NewDesc("roce_process_queue_pairs", "QPs of an attached process (the longest-attached processes by pid and command; the rest summed as comm=\"other\").", lbl("pid", "comm"), nil),
		procPkts:   prometheus.NewDesc("roce_process_packets_total", "RoCEv2 packets an attached process sent (tx) and received (rx), as it last reported.", lbl("pid", "comm", "direction"), nil),
		procRetx:   prometheus.NewDesc("roce_process_retransmits_total", "Request packets an attached process sent again.", lbl("pid", "comm"), nil),
		steerDrops: prometheus.NewDesc("roce_steer_drops_total", "Datagrams the kernel steered to a QPN block no process held (never delivered to another process), by reason.", lbl("reason"), nil),
		misrouted:  prometheus.NewDesc("roce_steer_misrouted_total", "Segments of a GRO train steered by its first segment to a process whose block does not hold their QPN, dropped by that process.", addr, nil),
		relay:      prometheus.NewDesc("roce_cm_relay_mads_total", "CM MADs roced's QP1 routed to attached processes (rx) and sent for them (tx).", lbl("direction"), nil),
		relayDrops: prometheus.NewDesc("roce_cm_relay_drops_total", "CM MADs the relay dropped, by reason: no_owner (no live process holds the communication ID or service), refused (a process sent a MAD not its own), overflow (a process read too slowly).", lbl("reason"), nil),
	}
}

func (c *shareCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{c.procs, c.procQPs, c.procPkts, c.procRetx, c.steerDrops, c.misrouted, c.relay, c.relayDrops} {
		ch <- d
	}
}

// procRow is one per-process series set.
type procRow struct {
	pid, comm    string
	qps          int
	tx, rx, retx uint64
}

func (c *shareCollector) Collect(ch chan<- prometheus.Metric) {
	type acc struct {
		n                        int
		rows                     []procRow
		drops, misrouted         uint64
		rin, rout, none, ref, ov uint64
	}
	byAddr := map[string]*acc{}
	get := func(a string) *acc {
		if len(c.addr) == 0 {
			a = ""
		}
		if byAddr[a] == nil {
			byAddr[a] = &acc{}
		}
		return byAddr[a]
	}
	for _, s := range c.d.devs {
		if s.shared == nil {
			continue
		}
		a := get(s.dev.Addr().String())
		clients := s.shared.refresh(c.d.share)
		slices.SortFunc(clients, func(x, y *attachd.Client) int { return x.Since.Compare(y.Since) })
		a.n += len(clients)
		other := procRow{comm: "other"}
		for i, cl := range clients {
			r, _ := cl.Report()
			row := procRow{pid: strconv.Itoa(cl.PID), comm: cl.Comm, retx: r.Stats.Retransmits}
			for _, n := range r.QPStates {
				row.qps += n
			}
			for k := range r.Stats.SentPackets {
				row.tx += r.Stats.SentPackets[k]
				row.rx += r.Stats.RcvdPackets[k]
			}
			a.misrouted += r.Misrouted
			if i < perProcessSeries {
				a.rows = append(a.rows, row)
				continue
			}
			other.qps += row.qps
			other.tx, other.rx, other.retx = other.tx+row.tx, other.rx+row.rx, other.retx+row.retx
		}
		if len(clients) > perProcessSeries {
			a.rows = append(a.rows, other)
		}
		_, mis, _ := s.shared.sd.Departed()
		a.misrouted += mis
		a.drops += s.shared.sd.Drops()
		if r := s.shared.sd.Router(); r != nil {
			st := r.Stats()
			a.rin, a.rout, a.none, a.ref, a.ov = a.rin+st.In, a.rout+st.Out, a.none+st.NoOwner, a.ref+st.Refused, a.ov+st.Overflow
		}
	}
	for addr, a := range byAddr {
		var al []string
		if addr != "" {
			al = []string{addr}
		}
		l := func(v ...string) []string { return append(v, al...) }
		ch <- prometheus.MustNewConstMetric(c.procs, prometheus.GaugeValue, float64(a.n), al...)
		for _, r := range a.rows {
			ch <- prometheus.MustNewConstMetric(c.procQPs, prometheus.GaugeValue, float64(r.qps), l(r.pid, r.comm)...)
			ch <- prometheus.MustNewConstMetric(c.procPkts, prometheus.CounterValue, float64(r.tx), l(r.pid, r.comm, "tx")...)
			ch <- prometheus.MustNewConstMetric(c.procPkts, prometheus.CounterValue, float64(r.rx), l(r.pid, r.comm, "rx")...)
			ch <- prometheus.MustNewConstMetric(c.procRetx, prometheus.CounterValue, float64(r.retx), l(r.pid, r.comm)...)
		}
		ch <- prometheus.MustNewConstMetric(c.steerDrops, prometheus.CounterValue, float64(a.drops), l("no_owner")...)
		ch <- prometheus.MustNewConstMetric(c.misrouted, prometheus.CounterValue, float64(a.misrouted), al...)
		ch <- prometheus.MustNewConstMetric(c.relay, prometheus.CounterValue, float64(a.rin), l("rx")...)
		ch <- prometheus.MustNewConstMetric(c.relay, prometheus.CounterValue, float64(a.rout), l("tx")...)
		ch <- prometheus.MustNewConstMetric(c.relayDrops, prometheus.CounterValue, float64(a.none), l("no_owner")...)
		ch <- prometheus.MustNewConstMetric(c.relayDrops, prometheus.CounterValue, float64(a.ref), l("refused")...)
		ch <- prometheus.MustNewConstMetric(c.relayDrops, prometheus.CounterValue, float64(a.ov), l("overflow")...)
	}
}

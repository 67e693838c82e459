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
// comm="other", pid="", block="". So each per-process family has at most
// perProcessSeries+1 series per address, however many processes come and go.
// The block label (the process's QPN block) keeps two processes apart when
// their pids are not known: a client in another pid namespace reads as pid 0
// through SO_PEERCRED.
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
		procQPs:    prometheus.NewDesc("roce_process_queue_pairs", "QPs of an attached process (the longest-attached processes by pid and command; the rest summed as comm=\"other\").", lbl("pid", "comm", "block"), nil),
		procPkts:   prometheus.NewDesc("roce_process_packets_total", "RoCEv2 packets an attached process sent (tx) and received (rx), as it last reported.", lbl("pid", "comm", "block", "direction"), nil),
		procRetx:   prometheus.NewDesc("roce_process_retransmits_total", "Request packets an attached process sent again.", lbl("pid", "comm", "block"), nil),
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

// procKey names one per-process series set.
type procKey struct{ pid, comm, block string }

// procRow is one per-process series set.
type procRow struct {
	procKey
	qps          int
	tx, rx, retx uint64
}

// add sums r into p: rows that meet under one key (one process attached to
// two addresses whose series are not labelled by address) are one series.
func (p *procRow) add(r procRow) {
	p.qps += r.qps
	p.tx, p.rx, p.retx = p.tx+r.tx, p.rx+r.rx, p.retx+r.retx
}

// shareAcc sums one address's series (or every address's, when the series
// are not labelled by address).
type shareAcc struct {
	n                        int
	rows                     map[procKey]*procRow
	order                    []procKey
	drops, misrouted         uint64
	rin, rout, none, ref, ov uint64
}

func (a *shareAcc) addRow(r procRow) {
	if p := a.rows[r.procKey]; p != nil {
		p.add(r)
		return
	}
	a.rows[r.procKey] = &r
	a.order = append(a.order, r.procKey)
}

func (c *shareCollector) Collect(ch chan<- prometheus.Metric) {
	byAddr := map[string]*shareAcc{}
	get := func(a string) *shareAcc {
		if len(c.addr) == 0 {
			a = ""
		}
		if byAddr[a] == nil {
			byAddr[a] = &shareAcc{rows: map[procKey]*procRow{}}
		}
		return byAddr[a]
	}
	for _, s := range c.d.devs {
		if s.shared == nil {
			continue
		}
		a := get(s.dev.Addr().String())
		tally := s.shared.tally(c.d.share)
		clients := tally.Live
		slices.SortFunc(clients, func(x, y *attachd.Client) int { return x.Since.Compare(y.Since) })
		a.n += len(clients)
		other := procRow{procKey: procKey{comm: "other"}}
		for i, cl := range clients {
			r, _ := cl.Report()
			row := procRow{procKey: procKey{strconv.Itoa(cl.PID), cl.Comm, strconv.Itoa(cl.Block)}, retx: r.Stats.Retransmits}
			for _, n := range r.QPStates {
				row.qps += n
			}
			for k := range r.Stats.SentPackets {
				row.tx += r.Stats.SentPackets[k]
				row.rx += r.Stats.RcvdPackets[k]
			}
			a.misrouted += r.Misrouted
			if i < perProcessSeries {
				a.addRow(row)
				continue
			}
			other.add(row)
		}
		if len(clients) > perProcessSeries {
			a.addRow(other)
		}
		a.misrouted += tally.Misrouted
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
		for _, k := range a.order {
			r := a.rows[k]
			ch <- prometheus.MustNewConstMetric(c.procQPs, prometheus.GaugeValue, float64(r.qps), l(r.pid, r.comm, r.block)...)
			ch <- prometheus.MustNewConstMetric(c.procPkts, prometheus.CounterValue, float64(r.tx), l(r.pid, r.comm, r.block, "tx")...)
			ch <- prometheus.MustNewConstMetric(c.procPkts, prometheus.CounterValue, float64(r.rx), l(r.pid, r.comm, r.block, "rx")...)
			ch <- prometheus.MustNewConstMetric(c.procRetx, prometheus.CounterValue, float64(r.retx), l(r.pid, r.comm, r.block)...)
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

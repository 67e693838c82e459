// Package metrics exports a goroce program's engine counters to Prometheus:
// every row of the transport counter table (transport.Counters), queue pairs
// by state, and how full the CQs and SRQs are. roced registers it, and a
// program that embeds goroce registers the same Collector to export the same
// series:
//
//	reg := prometheus.NewRegistry()
//	reg.MustRegister(metrics.NewCollector(metrics.Options{}, dev))
//	http.Handle("/metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{}))
//
// The Collector builds const metrics from one snapshot per device per scrape,
// so the data path never calls into Prometheus, and the core packages
// (bth, transport, roce, cq, srq, cm) do not import it.
package metrics

import (
	"net/netip"
	"strings"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/goroce/goroce/internal/core/transport"
	"github.com/goroce/goroce/roce"
)

// Device is what the Collector reads at scrape time; *roce.Device implements
// it. Every method must be safe to call while the engine runs.
type Device interface {
	// Addr is the device's IP address: the address label's value.
	Addr() netip.Addr
	// Stats returns the engine counters.
	Stats() roce.Stats
	// QPs lists the queue pairs; the Collector counts them by state.
	QPs() []roce.QPInfo
	// QueueOccupancy sums how full the CQs and SRQs are.
	QueueOccupancy() roce.QueueOccupancy
}

// StateCounter is implemented by a Device that counts its QPs by state
// itself (roced's view of an address shared with other processes, which
// report counts rather than every QP); the Collector then uses the counts
// (keys: QPStateNames) instead of QPs.
type StateCounter interface {
	QPStates() map[string]int
}

// Options tunes a Collector.
type Options struct {
	// PerAddress exports each device's series with an address label (its IP
	// address) instead of one sum over all devices.
	PerAddress bool
}

// QPStateNames are the state label values of roce_queue_pairs, in verbs order. Every
// state is exported, zero or not, so a query for one state never sees a gap.
var QPStateNames = []string{"reset", "init", "rtr", "rts", "sqd", "sqe", "err"}

// Collector is a prometheus.Collector over devices.
type Collector struct {
	devs []Device
	opt  Options

	table   []series // one per row of transport.CounterTable, in its order
	qps     *prometheus.Desc
	queues  []queueGauge
	buckets []float64 // finite histogram bounds, seconds
}

// series is one row of the counter table and its descriptor (shared by the
// rows of one series).
type series struct {
	row  *transport.CounterDesc
	desc *prometheus.Desc
	typ  prometheus.ValueType
}

// queueGauge is one field of roce.QueueOccupancy.
type queueGauge struct {
	desc *prometheus.Desc
	get  func(*roce.QueueOccupancy) int
}

// NewCollector returns a Collector over devs.
func NewCollector(opt Options, devs ...Device) *Collector {
	c := &Collector{devs: devs, opt: opt}
	var addr []string
	if opt.PerAddress {
		addr = []string{"address"}
	}
	descs := map[string]*prometheus.Desc{}
	rows := transport.CounterTable()
	for i := range rows {
		r := &rows[i]
		d := descs[r.Metric]
		if d == nil {
			d = prometheus.NewDesc(r.Metric, r.Help, append(append([]string(nil), r.LabelNames...), addr...), nil)
			descs[r.Metric] = d
		}
		typ := prometheus.CounterValue
		if r.Kind == transport.KindGauge {
			typ = prometheus.GaugeValue
		}
		c.table = append(c.table, series{row: r, desc: d, typ: typ})
		if r.Kind == transport.KindHistogram && c.buckets == nil {
			// The last bucket also takes everything above: it is the +Inf
			// bucket and has no finite bound here.
			for b := 0; b < r.Len-1; b++ {
				c.buckets = append(c.buckets, r.Bound(b).Seconds())
			}
		}
	}
	c.qps = prometheus.NewDesc("roce_queue_pairs", "Queue pairs by state.", append([]string{"state"}, addr...), nil)
	g := func(name, help string, get func(*roce.QueueOccupancy) int) {
		c.queues = append(c.queues, queueGauge{prometheus.NewDesc(name, help, addr, nil), get})
	}
	g("roce_completion_queues", "Completion queues open.", func(o *roce.QueueOccupancy) int { return o.CQs })
	g("roce_completion_queue_entries", "Completions held in CQs and not yet polled.", func(o *roce.QueueOccupancy) int { return o.CQEntries })
	g("roce_completion_queue_capacity", "Summed capacity (cqe) of the open CQs.", func(o *roce.QueueOccupancy) int { return o.CQCapacity })
	g("roce_shared_receive_queues", "Shared receive queues open.", func(o *roce.QueueOccupancy) int { return o.SRQs })
	g("roce_shared_receive_queue_wrs", "Receive WRs posted to SRQs and not yet consumed.", func(o *roce.QueueOccupancy) int { return o.SRQWRs })
	g("roce_shared_receive_queue_capacity", "Summed max_wr of the open SRQs.", func(o *roce.QueueOccupancy) int { return o.SRQCapacity })
	return c
}

// Describe implements prometheus.Collector.
func (c *Collector) Describe(ch chan<- *prometheus.Desc) {
	seen := map[*prometheus.Desc]bool{}
	for _, s := range c.table {
		if !seen[s.desc] {
			seen[s.desc] = true
			ch <- s.desc
		}
	}
	ch <- c.qps
	for _, q := range c.queues {
		ch <- q.desc
	}
}

// reading is what one scrape read from a device, or the sum over all of them.
type reading struct {
	addr   []string // the address label value, or none
	stats  transport.StatsSnapshot
	states map[string]int
	queues roce.QueueOccupancy
}

// Collect implements prometheus.Collector: one snapshot per device, then
// const metrics from it.
func (c *Collector) Collect(ch chan<- prometheus.Metric) {
	var sum reading
	sum.states = map[string]int{}
	for _, d := range c.devs {
		r := reading{stats: d.Stats(), states: map[string]int{}, queues: d.QueueOccupancy()}
		if sc, ok := d.(StateCounter); ok {
			r.states = sc.QPStates()
		} else {
			for _, q := range d.QPs() {
				r.states[strings.ToLower(q.State.String())]++
			}
		}
		if c.opt.PerAddress {
			r.addr = []string{d.Addr().String()}
			c.collect(ch, &r)
			continue
		}
		sum.stats.Add(&r.stats)
		for k, v := range r.states {
			sum.states[k] += v
		}
		addQueues(&sum.queues, &r.queues)
	}
	if !c.opt.PerAddress {
		c.collect(ch, &sum)
	}
}

func (c *Collector) collect(ch chan<- prometheus.Metric, r *reading) {
	for _, s := range c.table {
		if s.row.Kind == transport.KindHistogram {
			ch <- c.histogram(s, r)
			continue
		}
		for i := range s.row.Len {
			lv := append(s.row.LabelValues(i), r.addr...)
			ch <- prometheus.MustNewConstMetric(s.desc, s.typ, float64(s.row.Value(&r.stats, i)), lv...)
		}
	}
	for _, st := range QPStateNames {
		ch <- prometheus.MustNewConstMetric(c.qps, prometheus.GaugeValue, float64(r.states[st]), append([]string{st}, r.addr...)...)
	}
	for _, q := range c.queues {
		ch <- prometheus.MustNewConstMetric(q.desc, prometheus.GaugeValue, float64(q.get(&r.queues)), r.addr...)
	}
}

// histogram converts the engine's per-bucket counts into Prometheus's
// cumulative buckets.
func (c *Collector) histogram(s series, r *reading) prometheus.Metric {
	buckets := make(map[float64]uint64, len(c.buckets))
	var cum uint64
	for i, le := range c.buckets {
		cum += s.row.Value(&r.stats, i)
		buckets[le] = cum
	}
	count := cum + s.row.Value(&r.stats, s.row.Len-1)
	return prometheus.MustNewConstHistogram(s.desc, count, s.row.Sum(&r.stats).Seconds(), buckets, r.addr...)
}

func addQueues(a, b *roce.QueueOccupancy) {
	a.CQs += b.CQs
	a.CQEntries += b.CQEntries
	a.CQCapacity += b.CQCapacity
	a.SRQs += b.SRQs
	a.SRQWRs += b.SRQWRs
	a.SRQCapacity += b.SRQCapacity
}

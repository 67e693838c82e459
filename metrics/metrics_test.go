package metrics

import (
	"net/netip"
	"reflect"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/goroce/goroce/internal/core/transport"
	"github.com/goroce/goroce/roce"
)

// fakeDevice is a Device over a Stats, a QP list and an occupancy.
type fakeDevice struct {
	addr   netip.Addr
	stats  *transport.Stats
	qps    []roce.QPInfo
	queues roce.QueueOccupancy
}

func (f *fakeDevice) Addr() netip.Addr                    { return f.addr }
func (f *fakeDevice) Stats() transport.StatsSnapshot      { return f.stats.Snapshot() }
func (f *fakeDevice) QPs() []roce.QPInfo                  { return f.qps }
func (f *fakeDevice) QueueOccupancy() roce.QueueOccupancy { return f.queues }

// fakeSource is one device at 192.0.2.1 with states QPs in each state.
func fakeSource(s *transport.Stats, states map[roce.QPState]int) *fakeDevice {
	f := &fakeDevice{addr: netip.MustParseAddr("192.0.2.1"), stats: s}
	for st, n := range states {
		for range n {
			f.qps = append(f.qps, roce.QPInfo{State: st})
		}
	}
	return f
}

func newCollector(d ...Device) *Collector { return NewCollector(Options{}, d...) }

func TestCollectorValues(t *testing.T) {
	var st transport.Stats
	st.SentPackets[transport.ClassSend].Add(3)
	st.SentBytes[transport.ClassSend].Add(300)
	st.RcvdPackets[transport.ClassAck].Add(2)
	st.RcvdBytes[transport.ClassAck].Add(40)
	st.NAKsSent[transport.NAKRNR].Add(1)
	st.NAKsRcvd[transport.NAKPSNSeqErr].Add(4)
	st.ICRCErrors.Add(5)
	st.Malformed.Add(6)
	st.UnknownQP.Add(7)
	st.SRQLimitEvents.Add(8)
	c := newCollector(fakeSource(&st, map[roce.QPState]int{roce.QPSRTS: 2, roce.QPSErr: 1}))

	want := `
# HELP roce_icrc_errors_total Received packets dropped for a bad ICRC.
# TYPE roce_icrc_errors_total counter
roce_icrc_errors_total 5
# HELP roce_malformed_packets_total Received datagrams dropped because their headers did not parse.
# TYPE roce_malformed_packets_total counter
roce_malformed_packets_total 6
# HELP roce_unknown_qp_total Received packets dropped because no QP has their destination QPN.
# TYPE roce_unknown_qp_total counter
roce_unknown_qp_total 7
# HELP roce_srq_limit_events_total IBV_EVENT_SRQ_LIMIT_REACHED events raised.
# TYPE roce_srq_limit_events_total counter
roce_srq_limit_events_total 8
# HELP roce_queue_pairs Queue pairs by state.
# TYPE roce_queue_pairs gauge
roce_queue_pairs{state="err"} 1
roce_queue_pairs{state="init"} 0
roce_queue_pairs{state="reset"} 0
roce_queue_pairs{state="rtr"} 0
roce_queue_pairs{state="rts"} 2
roce_queue_pairs{state="sqd"} 0
roce_queue_pairs{state="sqe"} 0
`
	if err := testutil.CollectAndCompare(c, strings.NewReader(want),
		"roce_icrc_errors_total", "roce_malformed_packets_total", "roce_unknown_qp_total",
		"roce_srq_limit_events_total", "roce_queue_pairs"); err != nil {
		t.Error(err)
	}

	got := gather(t, c)
	wantValues(t, got, map[string]float64{
		"roce_packets_total,direction=tx,op_class=send":         3,
		"roce_bytes_total,direction=tx,op_class=send":           300,
		"roce_packets_total,direction=rx,op_class=ack":          2,
		"roce_bytes_total,direction=rx,op_class=ack":            40,
		"roce_packets_total,direction=rx,op_class=send":         0,
		"roce_naks_total,direction=tx,kind=rnr":                 1,
		"roce_naks_total,direction=rx,kind=psn_sequence_error":  4,
		"roce_naks_total,direction=rx,kind=remote_access_error": 0,
	})
	// Every series exists from the first scrape, so rate() works from the start.
	if n := testutil.CollectAndCount(c, "roce_packets_total"); n != 2*int(transport.NumOpClasses) {
		t.Errorf("roce_packets_total has %d series, want %d", n, 2*transport.NumOpClasses)
	}
	if n := testutil.CollectAndCount(c, "roce_naks_total"); n != 2*int(transport.NumNAKKinds) {
		t.Errorf("roce_naks_total has %d series, want %d", n, 2*transport.NumNAKKinds)
	}
}

func TestCollectorLatencyHistogram(t *testing.T) {
	var st transport.Stats
	st.ObserveLatency(500 * time.Nanosecond)  // bucket 0: < 1 µs
	st.ObserveLatency(3 * time.Microsecond)   // bucket 2: < 4 µs
	st.ObserveLatency(3 * time.Microsecond)   // bucket 2
	st.ObserveLatency(100 * time.Microsecond) // bucket 7: < 128 µs
	st.ObserveLatency(time.Hour)              // last bucket: +Inf
	c := newCollector(fakeSource(&st, nil))

	reg := prometheus.NewPedanticRegistry()
	reg.MustRegister(c)
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != "roce_ack_latency_seconds" {
			continue
		}
		hist := mf.GetMetric()[0].GetHistogram()
		if hist.GetSampleCount() != 5 {
			t.Errorf("count = %d, want 5", hist.GetSampleCount())
		}
		wantSum := (500*time.Nanosecond + 6*time.Microsecond + 100*time.Microsecond + time.Hour).Seconds()
		if d := hist.GetSampleSum() - wantSum; d > 1e-9 || d < -1e-9 {
			t.Errorf("sum = %v, want %v", hist.GetSampleSum(), wantSum)
		}
		b := hist.GetBucket()
		if len(b) != transport.NumLatencyBuckets-1 {
			t.Fatalf("%d finite buckets, want %d", len(b), transport.NumLatencyBuckets-1)
		}
		wantCum := map[float64]uint64{1e-6: 1, 2e-6: 1, 4e-6: 3, 64e-6: 3, 128e-6: 4, b[len(b)-1].GetUpperBound(): 4}
		for _, bk := range b {
			if w, ok := wantCum[bk.GetUpperBound()]; ok && bk.GetCumulativeCount() != w {
				t.Errorf("bucket le=%g: %d, want %d", bk.GetUpperBound(), bk.GetCumulativeCount(), w)
			}
		}
		if top := b[len(b)-1].GetUpperBound(); top != transport.LatencyBucketBound(transport.NumLatencyBuckets-2).Seconds() {
			t.Errorf("top finite bound = %g", top)
		}
		return
	}
	t.Fatal("roce_ack_latency_seconds not exported")
}

// TestCollectorLint runs the same checks as `promtool check metrics` over everything
// the collector exports.
func TestCollectorLint(t *testing.T) {
	var st transport.Stats
	reg := prometheus.NewPedanticRegistry()
	reg.MustRegister(newCollector(fakeSource(&st, nil)), NewCMCollector(Options{}, CMSource{}))
	problems, err := testutil.GatherAndLint(reg)
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range problems {
		t.Errorf("%s: %s", p.Metric, p.Text)
	}
}

// TestCollectorQueueOccupancy exports the CQ and SRQ occupancy the source reports as
// gauges, exactly.
func TestCollectorQueueOccupancy(t *testing.T) {
	var st transport.Stats
	src := fakeSource(&st, nil)
	src.queues = roce.QueueOccupancy{CQs: 3, CQEntries: 7, CQCapacity: 768, SRQs: 1, SRQWRs: 9, SRQCapacity: 16}
	want := `
# HELP roce_completion_queue_entries Completions held in CQs and not yet polled.
# TYPE roce_completion_queue_entries gauge
roce_completion_queue_entries 7
# HELP roce_completion_queue_capacity Summed capacity (cqe) of the open CQs.
# TYPE roce_completion_queue_capacity gauge
roce_completion_queue_capacity 768
# HELP roce_completion_queues Completion queues open.
# TYPE roce_completion_queues gauge
roce_completion_queues 3
# HELP roce_shared_receive_queue_wrs Receive WRs posted to SRQs and not yet consumed.
# TYPE roce_shared_receive_queue_wrs gauge
roce_shared_receive_queue_wrs 9
# HELP roce_shared_receive_queue_capacity Summed max_wr of the open SRQs.
# TYPE roce_shared_receive_queue_capacity gauge
roce_shared_receive_queue_capacity 16
# HELP roce_shared_receive_queues Shared receive queues open.
# TYPE roce_shared_receive_queues gauge
roce_shared_receive_queues 1
`
	if err := testutil.CollectAndCompare(newCollector(src), strings.NewReader(want),
		"roce_completion_queues", "roce_completion_queue_entries", "roce_completion_queue_capacity", "roce_shared_receive_queues", "roce_shared_receive_queue_wrs", "roce_shared_receive_queue_capacity"); err != nil {
		t.Fatal(err)
	}
}

// TestCollectorSumsOrLabelsDevices: by default the series are sums over every
// device; with PerAddress each device has its own, labelled with its address.
func TestCollectorSumsOrLabelsDevices(t *testing.T) {
	var s1, s2 transport.Stats
	s1.ICRCErrors.Add(1)
	s2.ICRCErrors.Add(2)
	d1 := fakeSource(&s1, map[roce.QPState]int{roce.QPSRTS: 1})
	d2 := fakeSource(&s2, map[roce.QPState]int{roce.QPSRTS: 2})
	d2.addr = netip.MustParseAddr("2001:db8::2")
	d1.queues.CQs, d2.queues.CQs = 4, 5
	sum := `
# HELP roce_icrc_errors_total Received packets dropped for a bad ICRC.
# TYPE roce_icrc_errors_total counter
roce_icrc_errors_total 3
# HELP roce_completion_queues Completion queues open.
# TYPE roce_completion_queues gauge
roce_completion_queues 9
`
	if err := testutil.CollectAndCompare(NewCollector(Options{}, d1, d2), strings.NewReader(sum),
		"roce_icrc_errors_total", "roce_completion_queues"); err != nil {
		t.Error(err)
	}
	per := `
# HELP roce_icrc_errors_total Received packets dropped for a bad ICRC.
# TYPE roce_icrc_errors_total counter
roce_icrc_errors_total{address="192.0.2.1"} 1
roce_icrc_errors_total{address="2001:db8::2"} 2
# HELP roce_completion_queues Completion queues open.
# TYPE roce_completion_queues gauge
roce_completion_queues{address="192.0.2.1"} 4
roce_completion_queues{address="2001:db8::2"} 5
`
	c := NewCollector(Options{PerAddress: true}, d1, d2)
	if err := testutil.CollectAndCompare(c, strings.NewReader(per), "roce_icrc_errors_total", "roce_completion_queues"); err != nil {
		t.Error(err)
	}
	if n := testutil.CollectAndCount(c, "roce_queue_pairs"); n != 2*len(QPStateNames) {
		t.Errorf("roce_queue_pairs has %d series with two devices, want %d", n, 2*len(QPStateNames))
	}
	reg := prometheus.NewPedanticRegistry()
	reg.MustRegister(c)
	if _, err := reg.Gather(); err != nil {
		t.Error(err)
	}
}

// TestCollectorExportsEveryRow gives every engine counter its own value and finds
// each in the exposition under its row's series and labels: a counter added to
// transport.Counters is exported without touching this package.
func TestCollectorExportsEveryRow(t *testing.T) {
	var st transport.Stats
	n := uint64(0)
	v := reflect.ValueOf(&st.Counters).Elem()
	for f := range v.NumField() {
		fv := v.Field(f)
		set := func(x reflect.Value) {
			n++
			x.Addr().Interface().(*atomic.Uint64).Store(n)
		}
		if fv.Kind() == reflect.Array {
			for i := range fv.Len() {
				set(fv.Index(i))
			}
		} else {
			set(fv)
		}
	}
	got := gather(t, newCollector(fakeSource(&st, nil)))
	snap := st.Snapshot()
	rows := transport.CounterTable()
	for i := range rows {
		r := &rows[i]
		if r.Kind == transport.KindHistogram {
			var count uint64
			for j := range r.Len {
				count += r.Value(&snap, j)
			}
			if got[r.Metric+",count"] != float64(count) {
				t.Errorf("%s count = %v, want %d", r.Metric, got[r.Metric+",count"], count)
			}
			continue
		}
		for j := range r.Len {
			key := r.Metric
			for k, lv := range r.LabelValues(j) {
				key += "," + r.LabelNames[k] + "=" + lv
			}
			if g, ok := got[key]; !ok || g != float64(r.Value(&snap, j)) {
				t.Errorf("%s (field %s[%d]) = %v (present %v), want %d", key, r.Field, j, g, ok, r.Value(&snap, j))
			}
		}
	}
}

// gather collects c through a pedantic registry and returns every value keyed
// by "name,label=value,..." (labels sorted by name); a histogram gives its
// sample count under the key plus ",count".
func gather(t *testing.T, c prometheus.Collector) map[string]float64 {
	t.Helper()
	reg := prometheus.NewPedanticRegistry()
	reg.MustRegister(c)
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]float64{}
	for _, mf := range mfs {
		for _, m := range mf.GetMetric() {
			key := mf.GetName()
			for _, l := range m.GetLabel() {
				key += "," + l.GetName() + "=" + l.GetValue()
			}
			switch {
			case m.Counter != nil:
				got[key] = m.GetCounter().GetValue()
			case m.Gauge != nil:
				got[key] = m.GetGauge().GetValue()
			case m.Histogram != nil:
				got[key+",count"] = float64(m.GetHistogram().GetSampleCount())
			}
		}
	}
	return got
}

// wantValues checks that got has each of want's keys with its value.
func wantValues(t *testing.T, got, want map[string]float64) {
	t.Helper()
	for k, v := range want {
		if g, ok := got[k]; !ok || g != v {
			t.Errorf("%s = %v (present %v), want %v", k, g, ok, v)
		}
	}
}

package main

import (
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/goroce/goroce/roce"
	"github.com/goroce/goroce/transport"
)

func fakeSource(s *transport.Stats, states map[string]int) source {
	return source{
		stats:    s.Snapshot,
		qpStates: func() map[string]int { return states },
	}
}

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
	c := newCollector(fakeSource(&st, map[string]int{"rts": 2, "err": 1}))

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
# HELP roce_qps Queue pairs by state.
# TYPE roce_qps gauge
roce_qps{state="err"} 1
roce_qps{state="init"} 0
roce_qps{state="reset"} 0
roce_qps{state="rtr"} 0
roce_qps{state="rts"} 2
roce_qps{state="sqd"} 0
roce_qps{state="sqe"} 0
`
	if err := testutil.CollectAndCompare(c, strings.NewReader(want),
		"roce_icrc_errors_total", "roce_malformed_packets_total", "roce_unknown_qp_total",
		"roce_srq_limit_events_total", "roce_qps"); err != nil {
		t.Error(err)
	}

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
			if m.Counter != nil {
				got[key] = m.GetCounter().GetValue()
			}
		}
	}
	for k, v := range map[string]float64{
		"roce_packets_total,direction=tx,op_class=send":         3,
		"roce_bytes_total,direction=tx,op_class=send":           300,
		"roce_packets_total,direction=rx,op_class=ack":          2,
		"roce_bytes_total,direction=rx,op_class=ack":            40,
		"roce_packets_total,direction=rx,op_class=send":         0,
		"roce_naks_total,direction=tx,kind=rnr":                 1,
		"roce_naks_total,direction=rx,kind=psn_sequence_error":  4,
		"roce_naks_total,direction=rx,kind=remote_access_error": 0,
	} {
		if g, ok := got[k]; !ok || g != v {
			t.Errorf("%s = %v (present %v), want %v", k, g, ok, v)
		}
	}
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
// the registry exports.
func TestCollectorLint(t *testing.T) {
	var st transport.Stats
	reg := newRegistry(newCollector(fakeSource(&st, nil)))
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
	src.queues = func() roce.QueueOccupancy {
		return roce.QueueOccupancy{CQs: 3, CQEntries: 7, CQCapacity: 768, SRQs: 1, SRQWRs: 9, SRQCapacity: 16}
	}
	want := `
# HELP roce_cq_completions Completions held in CQs and not yet polled.
# TYPE roce_cq_completions gauge
roce_cq_completions 7
# HELP roce_cq_capacity Summed capacity (cqe) of the open CQs.
# TYPE roce_cq_capacity gauge
roce_cq_capacity 768
# HELP roce_cqs Completion queues open.
# TYPE roce_cqs gauge
roce_cqs 3
# HELP roce_srq_receive_wrs Receive WRs posted to SRQs and not yet consumed.
# TYPE roce_srq_receive_wrs gauge
roce_srq_receive_wrs 9
# HELP roce_srq_capacity Summed max_wr of the open SRQs.
# TYPE roce_srq_capacity gauge
roce_srq_capacity 16
# HELP roce_srqs Shared receive queues open.
# TYPE roce_srqs gauge
roce_srqs 1
`
	if err := testutil.CollectAndCompare(newCollector(src), strings.NewReader(want),
		"roce_cqs", "roce_cq_completions", "roce_cq_capacity", "roce_srqs", "roce_srq_receive_wrs", "roce_srq_capacity"); err != nil {
		t.Fatal(err)
	}
}

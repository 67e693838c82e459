package transport

import (
	"reflect"
	"regexp"
	"strings"
	"sync/atomic"
	"testing"
	"time"
)

// fillStats gives every counter cell of s its own value, 1, 2, 3, ... in field
// order, and returns how many cells there are.
func fillStats(s *Stats) int {
	n := 0
	v := reflect.ValueOf(&s.Counters).Elem()
	for f := range v.NumField() {
		fv := v.Field(f)
		set := func(x reflect.Value) {
			n++
			x.Addr().Interface().(*atomic.Uint64).Store(uint64(n))
		}
		if fv.Kind() == reflect.Array {
			for i := range fv.Len() {
				set(fv.Index(i))
			}
		} else {
			set(fv)
		}
	}
	return n
}

// cells lists every value of a snapshot in field order.
func cells(s *StatsSnapshot) []uint64 {
	var out []uint64
	v := reflect.ValueOf(&s.Counters).Elem()
	for f := range v.NumField() {
		fv := v.Field(f)
		if fv.Kind() == reflect.Array {
			for i := range fv.Len() {
				out = append(out, fv.Index(i).Uint())
			}
		} else {
			out = append(out, fv.Uint())
		}
	}
	return out
}

// TestSnapshotAndAdd: Snapshot copies every cell of Stats, and Add sums every
// cell, so a new counter needs neither taught.
func TestSnapshotAndAdd(t *testing.T) {
	var st Stats
	n := fillStats(&st)
	snap := st.Snapshot()
	got := cells(&snap)
	if len(got) != n {
		t.Fatalf("snapshot has %d cells, Stats %d", len(got), n)
	}
	for i, v := range got {
		if v != uint64(i+1) {
			t.Errorf("cell %d = %d, want %d", i, v, i+1)
		}
	}
	var sum StatsSnapshot
	sum.Add(&snap)
	sum.Add(&snap)
	for i, v := range cells(&sum) {
		if v != 2*uint64(i+1) {
			t.Errorf("sum cell %d = %d, want %d", i, v, 2*(i+1))
		}
	}
}

// TestCounterTable checks the table's rows: every field is exported or is a
// histogram's sum, names follow Prometheus conventions (counters end in _total,
// gauges do not), and each row reads its own field.
func TestCounterTable(t *testing.T) {
	rows := CounterTable()
	ct := reflect.TypeFor[Counters[uint64]]()
	name := regexp.MustCompile(`^roce_[a-z][a-z0-9_]*$`)
	covered := map[string]bool{}
	var st Stats
	fillStats(&st)
	snap := st.Snapshot()
	fv := reflect.ValueOf(&snap.Counters).Elem()
	for i := range rows {
		r := &rows[i]
		covered[r.Field] = true
		if !name.MatchString(r.Metric) {
			t.Errorf("%s: series name %q", r.Field, r.Metric)
		}
		switch r.Kind {
		case KindCounter:
			if !strings.HasSuffix(r.Metric, "_total") {
				t.Errorf("%s: counter %s does not end in _total", r.Field, r.Metric)
			}
		case KindGauge, KindHistogram:
			if strings.HasSuffix(r.Metric, "_total") {
				t.Errorf("%s: %s ends in _total but is not a counter", r.Field, r.Metric)
			}
		}
		if r.Kind == KindHistogram {
			covered[ct.Field(r.sum).Name] = true
		}
		f := fv.FieldByName(r.Field)
		for j := range r.Len {
			want := f
			if f.Kind() == reflect.Array {
				want = f.Index(j)
			}
			if got := r.Value(&snap, j); got != want.Uint() {
				t.Errorf("%s[%d]: Value = %d, want %d", r.Field, j, got, want.Uint())
			}
			if lv := r.LabelValues(j); len(lv) != len(r.LabelNames) {
				t.Errorf("%s[%d]: %d label values for %d names", r.Field, j, len(lv), len(r.LabelNames))
			}
		}
	}
	for f := range ct.NumField() {
		if n := ct.Field(f).Name; !covered[n] {
			t.Errorf("field %s is in no row", n)
		}
	}
}

// TestSnapshotString labels every value with its series and labels.
func TestSnapshotString(t *testing.T) {
	var st Stats
	st.ICRCErrors.Add(5)
	st.SentPackets[ClassAck].Add(7)
	st.NAKsRcvd[NAKRNR].Add(2)
	st.ObserveLatency(3 * time.Microsecond)
	s := st.Snapshot().String()
	for _, want := range []string{
		"icrc_errors_total=5",
		"packets_total{direction=tx,op_class=ack}=7",
		"packets_total{direction=rx,op_class=send}=0",
		"naks_total{direction=rx,kind=rnr}=2",
		"ack_latency_seconds_count=1 ack_latency_seconds_sum=3µs",
	} {
		if !strings.Contains(s, want) {
			t.Errorf("String() lacks %q:\n%s", want, s)
		}
	}
	if strings.Contains(s, "roce_") || strings.Contains(s, "LatencySumNanos") {
		t.Errorf("String() = %s", s)
	}
}

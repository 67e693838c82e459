package transport

import (
	"fmt"
	"math/bits"
	"reflect"
	"slices"
	"strings"
	"sync/atomic"
	"time"
)

// OpClass groups opcodes for counting, so metrics stay low-cardinality.
type OpClass uint8

// Opcode classes, in the order Stats arrays use.
const (
	ClassSend         OpClass = iota // RC/UC SEND*, incl. with immediate/invalidate
	ClassWrite                       // RDMA WRITE*
	ClassReadRequest                 // RDMA READ request
	ClassReadResponse                // RDMA READ response*
	ClassAtomic                      // CMP_SWAP, FETCH_ADD
	ClassAtomicAck                   // ATOMIC ACKNOWLEDGE
	ClassAck                         // ACKNOWLEDGE (ACK and NAK)
	ClassUD                          // UD SEND*
	ClassCNP                         // congestion notification
	ClassOther
	NumOpClasses
)

var opClassNames = [NumOpClasses]string{"send", "write", "read_request", "read_response", "atomic", "atomic_ack", "ack", "ud_send", "cnp", "other"}

func (c OpClass) String() string {
	if c < NumOpClasses {
		return opClassNames[c]
	}
	return "other"
}

// NAKKind is the kind of a NAK carried in an AETH.
type NAKKind uint8

// NAK kinds, in the order Stats arrays use.
const (
	NAKPSNSeqErr    NAKKind = iota // AETH 0x60
	NAKInvalidReq                  // AETH 0x61
	NAKRemoteAccess                // AETH 0x62
	NAKRemoteOpErr                 // AETH 0x63
	NAKInvalidRDReq                // AETH 0x64
	NAKRNR                         // RNR NAK, AETH 0x20..0x3f
	NumNAKKinds
)

var nakKindNames = [NumNAKKinds]string{"psn_sequence_error", "invalid_request", "remote_access_error", "remote_operational_error", "invalid_rd_request", "rnr"}

func (k NAKKind) String() string {
	if k < NumNAKKinds {
		return nakKindNames[k]
	}
	return "unknown"
}

// NumLatencyBuckets is the number of request-to-ACK latency buckets: bucket i
// counts latencies below 2^i µs, the last also everything above.
const NumLatencyBuckets = 24

// LatencyBucketBound returns the upper bound of bucket i.
func LatencyBucketBound(i int) time.Duration { return time.Duration(1<<uint(i)) * time.Microsecond }

// Counters is the engine's counter table: a field per counter (or per array
// indexed by OpClass, NAKKind or latency bucket), its tag saying how it is
// shown. Stats (atomics) and StatsSnapshot (plain values) are this struct;
// Snapshot, StatsSnapshot.Add and String and package metrics iterate it, so a
// new counter is one line here plus its increment. Names follow rxe's
// hw_counters where one exists. Tag keys:
//
//	metric  the Prometheus series name ("-": not exported on its own)
//	help    the series' help text
//	kind    counter (default), gauge, or histogram: an array of duration
//	        buckets (LatencyBucketBound), the last taking everything above
//	sum     histogram: the field with the sum of observations, in ns
//	labels  constant labels, "name=value,..." (a series' tx and rx halves)
//	index   the label an array's index fills: op_class or kind
//
// Rows of one series must agree on help, kind and label names.
type Counters[T uint64 | atomic.Uint64] struct {
	SentPackets [NumOpClasses]T `metric:"roce_packets_total" labels:"direction=tx" index:"op_class" help:"RoCEv2 packets sent (tx) and received (rx), by opcode class."`
	SentBytes   [NumOpClasses]T `metric:"roce_bytes_total" labels:"direction=tx" index:"op_class" help:"UDP payload bytes of RoCEv2 packets sent (tx) and received (rx), by opcode class."`
	RcvdPackets [NumOpClasses]T `metric:"roce_packets_total" labels:"direction=rx" index:"op_class" help:"RoCEv2 packets sent (tx) and received (rx), by opcode class."`
	RcvdBytes   [NumOpClasses]T `metric:"roce_bytes_total" labels:"direction=rx" index:"op_class" help:"UDP payload bytes of RoCEv2 packets sent (tx) and received (rx), by opcode class."`

	ICRCErrors        T              `metric:"roce_icrc_errors_total" help:"Received packets dropped for a bad ICRC."`                              // rxe: silently
	Malformed         T              `metric:"roce_malformed_packets_total" help:"Received datagrams dropped because their headers did not parse."` // failed bth.Parse or header checks
	UnknownQP         T              `metric:"roce_unknown_qp_total" help:"Received packets dropped because no QP has their destination QPN."`      // DestQP not found
	BadPKey           T              `metric:"roce_bad_pkey_total" help:"Received packets dropped because their P_Key is not the port's."`          // rxe: bad_pkey_cntr
	BadQKey           T              `metric:"roce_bad_qkey_total" help:"UD datagrams dropped because their Q_Key does not match the QP's."`        // rxe: qkey_viol_cntr
	BadSource         T              `metric:"roce_bad_source_total" help:"RC/UC packets dropped because they did not come from the QP's peer."`    // rxe check_addr
	OutOfSequence     T              `metric:"roce_out_of_sequence_total" help:"Requests received with a PSN ahead of the expected one."`           // rxe out_of_seq_request
	DuplicateRequests T              `metric:"roce_duplicate_requests_total" help:"Requests received with a PSN already acknowledged."`             // rxe duplicate_request
	NAKsSent          [NumNAKKinds]T `metric:"roce_naks_total" labels:"direction=tx" index:"kind" help:"NAKs sent (tx) and received (rx), by AETH kind (rnr is the RNR NAK)."`
	NAKsRcvd          [NumNAKKinds]T `metric:"roce_naks_total" labels:"direction=rx" index:"kind" help:"NAKs sent (tx) and received (rx), by AETH kind (rnr is the RNR NAK)."`
	GhostResponses    T              `metric:"roce_ghost_responses_total" help:"RC responses dropped because they name a PSN the QP never sent (a stale peer, or a QPN reused at the same address)."`
	Retransmits       T              `metric:"roce_retransmits_total" help:"Request packets sent again after a timeout or a NAK."`
	Timeouts          T              `metric:"roce_timeouts_total" help:"Retransmission timer expiries."` // rxe completer_retry
	BackedOffTimeouts T              `metric:"roce_backed_off_timeouts_total" help:"Retransmission timeouts after an earlier one with no progress, each doubling the QP's timer."`
	RetriesDeferred   T              `metric:"roce_retries_deferred_total" help:"Retransmission timeouts that waited for the device-wide retry budget."`
	TurnsYielded      T              `metric:"roce_turns_yielded_total" help:"Times a QP had more to send at the end of its turn and went to the back of its shard's ready queue."`
	PollerWaits       T              `metric:"roce_poller_waits_total" help:"CQ polls (run to completion) that waited for a receive path or a shard another goroutine of the engine held."`
	ECNMarked         T              `metric:"roce_ecn_marked_packets_total" help:"Packets received with ECN CE set (mlx5 np_ecn_marked_roce_packets)."`
	CNPsSent          T              `metric:"roce_cnps_total" labels:"direction=tx" help:"Congestion notification packets sent for CE-marked packets (tx, mlx5 np_cnp_sent) and received (rx)."`
	CNPsRcvd          T              `metric:"roce_cnps_total" labels:"direction=rx" help:"Congestion notification packets sent for CE-marked packets (tx, mlx5 np_cnp_sent) and received (rx)."`
	CNPsIgnored       T              `metric:"roce_cnps_ignored_total" help:"CNPs received while congestion control is off (mlx5 rp_cnp_ignored)."`
	RateCuts          T              `metric:"roce_cc_rate_cuts_total" help:"DCQCN rate decreases of QPs (one per rate_reduce_monitor_period with a CNP)."`
	RetryExceeded     T              `metric:"roce_retry_exceeded_total" help:"Send queues that ran out of transport retries (IBV_WC_RETRY_EXC_ERR)."` // rxe retry_exceeded_err
	RNRRetryExceeded  T              `metric:"roce_rnr_retry_exceeded_total" help:"Send queues that ran out of RNR retries (IBV_WC_RNR_RETRY_EXC_ERR)."`
	RxQueueDrops      T              `metric:"roce_rx_queue_drops_total" help:"Received packets dropped because an engine shard's queue was full."`
	DestroyedQPDrops  T              `metric:"roce_destroyed_qp_drops_total" help:"Received packets dropped because their QP was destroyed while they waited in its shard's queue."`
	TxTrains          T              `metric:"roce_tx_trains_total" help:"Segment trains (runs of equal-size packets of one UDP flow: one source port, one destination) handed to the link as one message, sent as UDP GSO where the kernel allows."`
	TxTrainSegments   T              `metric:"roce_tx_train_segments_total" help:"Packets sent inside segment trains."`
	TxTrailingACKs    T              `metric:"roce_tx_trailing_acks_total" help:"ACKs sent as a train's shorter last segment, behind the packets that left with them, to a peer that reads the train whole and handles its ACK first."`
	RxTrains          T              `metric:"roce_rx_trains_total" help:"UDP GRO trains received (runs of datagrams the kernel coalesced), split back into packets."`
	RxTrainSegments   T              `metric:"roce_rx_train_segments_total" help:"Packets received inside UDP GRO trains."`
	TxErrors          T              `metric:"roce_tx_errors_total" help:"Datagrams the UDP socket failed to send."`
	CQOverruns        T              `metric:"roce_cq_overruns_total" help:"Completions that did not fit in their CQ (IBV_EVENT_CQ_ERR)."`
	SRQLimitEvents    T              `metric:"roce_srq_limit_events_total" help:"IBV_EVENT_SRQ_LIMIT_REACHED events raised."`

	LatencyBuckets  [NumLatencyBuckets]T `metric:"roce_ack_latency_seconds" kind:"histogram" sum:"LatencySumNanos" help:"Time from sending an RC request to the ACK that covers it."`
	LatencySumNanos T                    `metric:"-"`
}

// Stats holds the engine's counters, atomics; exporters read a Snapshot.
type Stats struct {
	Counters[atomic.Uint64]
}

type StatsSnapshot struct {
	Counters[uint64]
}

// ObserveLatency records one request-to-ACK time.
func (s *Stats) ObserveLatency(d time.Duration) {
	if d < 0 {
		d = 0
	}
	us := uint64(d / time.Microsecond)
	i := bits.Len64(us) // us < 2^i
	if i >= NumLatencyBuckets {
		i = NumLatencyBuckets - 1
	}
	s.LatencyBuckets[i].Add(1)
	s.LatencySumNanos.Add(uint64(d))
}

// Snapshot copies every counter, one by one: not one instant, which is fine
// for monotonic counters.
func (s *Stats) Snapshot() StatsSnapshot {
	var o StatsSnapshot
	src, dst := reflect.ValueOf(&s.Counters).Elem(), reflect.ValueOf(&o.Counters).Elem()
	for f := range src.NumField() {
		eachCell(src.Field(f), dst.Field(f), func(a, b reflect.Value) {
			b.SetUint(a.Addr().Interface().(*atomic.Uint64).Load())
		})
	}
	return o
}

// Add adds every counter of b to s (summing the devices of a program).
func (s *StatsSnapshot) Add(b *StatsSnapshot) {
	dst, src := reflect.ValueOf(&s.Counters).Elem(), reflect.ValueOf(&b.Counters).Elem()
	for f := range dst.NumField() {
		eachCell(src.Field(f), dst.Field(f), func(a, b reflect.Value) { b.SetUint(b.Uint() + a.Uint()) })
	}
}

// eachCell calls f for the field a and its twin b, or for each element of both
// when they are arrays.
func eachCell(a, b reflect.Value, f func(a, b reflect.Value)) {
	if a.Kind() != reflect.Array {
		f(a, b)
		return
	}
	for i := range a.Len() {
		f(a.Index(i), b.Index(i))
	}
}

// String shows every exported value in table order, series names without
// roce_: "packets_total{direction=tx,op_class=send}=3"; histograms' count,
// sum.
func (s StatsSnapshot) String() string {
	var b strings.Builder
	for i := range counterTable {
		d := &counterTable[i]
		name := strings.TrimPrefix(d.Metric, "roce_")
		if b.Len() > 0 {
			b.WriteByte(' ')
		}
		if d.Kind == KindHistogram {
			var n uint64
			for j := range d.Len {
				n += d.Value(&s, j)
			}
			fmt.Fprintf(&b, "%s_count=%d %s_sum=%v", name, n, name, d.Sum(&s))
			continue
		}
		for j := range d.Len {
			if j > 0 {
				b.WriteByte(' ')
			}
			b.WriteString(name)
			if names := d.LabelNames; len(names) > 0 {
				b.WriteByte('{')
				for k, v := range d.LabelValues(j) {
					if k > 0 {
						b.WriteByte(',')
					}
					b.WriteString(names[k] + "=" + v)
				}
				b.WriteByte('}')
			}
			fmt.Fprintf(&b, "=%d", d.Value(&s, j))
		}
	}
	return b.String()
}

// CounterKind is how a series reads (Prometheus metric types).
type CounterKind uint8

const (
	KindCounter CounterKind = iota
	KindGauge
	KindHistogram
)

// CounterDesc is an exported row of Counters: a field and its series.
type CounterDesc struct {
	Field  string      // the Counters field, e.g. "ICRCErrors"
	Metric string      // the series name, e.g. "roce_icrc_errors_total"
	Help   string      // the series' help text
	Kind   CounterKind // counter, gauge or histogram
	// LabelNames: the constant labels, then the index label (none for a
	// histogram, whose index is the bucket).
	LabelNames []string
	// Len is the row's number of values: 1, or the array's length.
	Len int

	consts []string // constant label values
	index  func(int) string
	field  int
	sum    int // histogram: the field with the sum
}

// Value returns value i (0 for a scalar) of the row in s.
func (d *CounterDesc) Value(s *StatsSnapshot, i int) uint64 {
	v := reflect.ValueOf(&s.Counters).Elem().Field(d.field)
	if v.Kind() == reflect.Array {
		v = v.Index(i)
	}
	return v.Uint()
}

// LabelValues returns the label values of value i, in LabelNames order.
func (d *CounterDesc) LabelValues(i int) []string {
	if d.index == nil {
		return d.consts
	}
	return append(append([]string(nil), d.consts...), d.index(i))
}

// Bound is the upper bound of histogram bucket i; the last has none (+Inf).
func (d *CounterDesc) Bound(i int) time.Duration { return LatencyBucketBound(i) }

// Sum returns the sum of a histogram row's observations in s.
func (d *CounterDesc) Sum(s *StatsSnapshot) time.Duration {
	return time.Duration(reflect.ValueOf(&s.Counters).Elem().Field(d.sum).Uint())
}

// CounterTable returns the exported rows in field order; do not modify it.
func CounterTable() []CounterDesc { return counterTable }

var counterTable = parseCounterTable()

// indexLabels maps an index tag to the names of the array's indexes.
var indexLabels = map[string]func(int) string{
	"op_class": func(i int) string { return OpClass(i).String() },
	"kind":     func(i int) string { return NAKKind(i).String() },
}

// parseCounterTable reads the Counters tags; a bad tag panics at the first
// test run.
func parseCounterTable() []CounterDesc {
	t := reflect.TypeFor[Counters[uint64]]()
	var rows []CounterDesc
	bySeries := map[string]CounterDesc{}
	for f := range t.NumField() {
		sf := t.Field(f)
		metric := sf.Tag.Get("metric")
		if metric == "-" {
			continue
		}
		d := CounterDesc{Field: sf.Name, Metric: metric, Help: sf.Tag.Get("help"), Len: 1, field: f}
		bad := func(format string, args ...any) {
			panic(fmt.Sprintf("transport: Counters.%s: %s", sf.Name, fmt.Sprintf(format, args...)))
		}
		if metric == "" || d.Help == "" {
			bad("needs a metric and a help tag")
		}
		switch k := sf.Tag.Get("kind"); k {
		case "", "counter":
		case "gauge":
			d.Kind = KindGauge
		case "histogram":
			d.Kind = KindHistogram
			s, ok := t.FieldByName(sf.Tag.Get("sum"))
			if !ok || sf.Type.Kind() != reflect.Array {
				bad("a histogram is an array with a sum field")
			}
			d.sum = s.Index[0]
		default:
			bad("unknown kind %q", k)
		}
		if sf.Type.Kind() == reflect.Array {
			d.Len = sf.Type.Len()
		}
		if l := sf.Tag.Get("labels"); l != "" {
			for _, kv := range strings.Split(l, ",") {
				k, v, ok := strings.Cut(kv, "=")
				if !ok {
					bad("label %q is not name=value", kv)
				}
				d.LabelNames, d.consts = append(d.LabelNames, k), append(d.consts, v)
			}
		}
		if ix := sf.Tag.Get("index"); ix != "" {
			if d.index = indexLabels[ix]; d.index == nil || d.Len == 1 {
				bad("index %q: not an array, or not one of %v", ix, indexLabels)
			}
			d.LabelNames = append(d.LabelNames, ix)
		} else if d.Len > 1 && d.Kind != KindHistogram {
			bad("an array needs an index tag")
		}
		if o, ok := bySeries[metric]; ok && (o.Help != d.Help || o.Kind != d.Kind || !slices.Equal(o.LabelNames, d.LabelNames)) {
			bad("disagrees with %s about series %s", o.Field, metric)
		}
		rows = append(rows, d)
		bySeries[metric] = d
	}
	return rows
}

package transport

import (
	"math/bits"
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

// String returns the class's metric label value.
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

// String returns the kind's metric label value.
func (k NAKKind) String() string {
	if k < NumNAKKinds {
		return nakKindNames[k]
	}
	return "unknown"
}

// NumLatencyBuckets is the number of request-to-ACK latency buckets. Bucket i counts
// latencies below 2^i microseconds (bucket 0: < 1 µs); the last bucket also takes
// everything above.
const NumLatencyBuckets = 24

// LatencyBucketBound returns the upper bound of bucket i.
func LatencyBucketBound(i int) time.Duration { return time.Duration(1<<uint(i)) * time.Microsecond }

// Stats holds the engine's wire counters. Every field is a plain atomic that the data
// path increments; exporters (cmd/roced) read a Snapshot at scrape time. Names follow
// rxe's hw_counters where one exists.
type Stats struct {
	SentPackets [NumOpClasses]atomic.Uint64
	SentBytes   [NumOpClasses]atomic.Uint64 // UDP payload bytes
	RcvdPackets [NumOpClasses]atomic.Uint64
	RcvdBytes   [NumOpClasses]atomic.Uint64

	ICRCErrors        atomic.Uint64 // bad ICRC: dropped (rxe: silently)
	Malformed         atomic.Uint64 // failed bth.Parse or header checks
	BadPKey           atomic.Uint64 // P_Key not the default 0xFFFF (rxe: bad_pkey_cntr)
	BadQKey           atomic.Uint64 // UD Q_Key differs from the QP's (rxe: qkey_viol_cntr)
	BadSource         atomic.Uint64 // RC/UC packet not from the QP's peer address (rxe check_addr)
	UnknownQP         atomic.Uint64 // DestQP not found
	OutOfSequence     atomic.Uint64 // rxe out_of_seq_request
	DuplicateRequests atomic.Uint64 // rxe duplicate_request
	NAKsSent          [NumNAKKinds]atomic.Uint64
	NAKsRcvd          [NumNAKKinds]atomic.Uint64
	Retransmits       atomic.Uint64 // request packets sent again
	Timeouts          atomic.Uint64 // retransmission timer expiries (rxe completer_retry)
	RetryExceeded     atomic.Uint64 // rxe retry_exceeded_err
	RNRRetryExceeded  atomic.Uint64 // rxe rnr_retry_exceeded_err (not in rxe; ours)
	RxQueueDrops      atomic.Uint64 // inbound packets dropped on a full shard queue
	TxErrors          atomic.Uint64 // datagrams the link failed to send
	CQOverruns        atomic.Uint64 // completions that did not fit (CQ_ERR)
	SRQLimitEvents    atomic.Uint64 // SRQ_LIMIT_REACHED raised
	LatencyBuckets    [NumLatencyBuckets]atomic.Uint64
	LatencySumNanos   atomic.Uint64
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

// StatsSnapshot is a plain copy of Stats.
type StatsSnapshot struct {
	SentPackets, SentBytes, RcvdPackets, RcvdBytes         [NumOpClasses]uint64
	ICRCErrors, Malformed, UnknownQP, OutOfSequence        uint64
	BadPKey, BadQKey, BadSource                            uint64
	DuplicateRequests                                      uint64
	NAKsSent, NAKsRcvd                                     [NumNAKKinds]uint64
	Retransmits, Timeouts, RetryExceeded, RNRRetryExceeded uint64
	RxQueueDrops, TxErrors, CQOverruns, SRQLimitEvents     uint64
	LatencyBuckets                                         [NumLatencyBuckets]uint64
	LatencySumNanos                                        uint64
}

// Snapshot copies every counter. Counters are read one by one, so a snapshot taken
// under traffic is not a single instant, which is fine for monotonic counters.
func (s *Stats) Snapshot() StatsSnapshot {
	var o StatsSnapshot
	for i := range s.SentPackets {
		o.SentPackets[i] = s.SentPackets[i].Load()
		o.SentBytes[i] = s.SentBytes[i].Load()
		o.RcvdPackets[i] = s.RcvdPackets[i].Load()
		o.RcvdBytes[i] = s.RcvdBytes[i].Load()
	}
	for i := range s.NAKsSent {
		o.NAKsSent[i] = s.NAKsSent[i].Load()
		o.NAKsRcvd[i] = s.NAKsRcvd[i].Load()
	}
	for i := range s.LatencyBuckets {
		o.LatencyBuckets[i] = s.LatencyBuckets[i].Load()
	}
	o.ICRCErrors = s.ICRCErrors.Load()
	o.Malformed = s.Malformed.Load()
	o.BadPKey = s.BadPKey.Load()
	o.BadQKey = s.BadQKey.Load()
	o.BadSource = s.BadSource.Load()
	o.UnknownQP = s.UnknownQP.Load()
	o.OutOfSequence = s.OutOfSequence.Load()
	o.DuplicateRequests = s.DuplicateRequests.Load()
	o.Retransmits = s.Retransmits.Load()
	o.Timeouts = s.Timeouts.Load()
	o.RetryExceeded = s.RetryExceeded.Load()
	o.RNRRetryExceeded = s.RNRRetryExceeded.Load()
	o.RxQueueDrops = s.RxQueueDrops.Load()
	o.TxErrors = s.TxErrors.Load()
	o.CQOverruns = s.CQOverruns.Load()
	o.SRQLimitEvents = s.SRQLimitEvents.Load()
	o.LatencySumNanos = s.LatencySumNanos.Load()
	return o
}

package roce

import (
	"time"

	"github.com/goroce/goroce/internal/core/transport"
)

// Stats is a snapshot of a device's counters; its tags name package metrics' series.
type Stats = transport.StatsSnapshot

// OpClass groups opcodes for counting (the op_class label).
type OpClass = transport.OpClass

// Opcode classes, the indexes of Stats' per-class arrays.
const (
	ClassSend         = transport.ClassSend
	ClassWrite        = transport.ClassWrite
	ClassReadRequest  = transport.ClassReadRequest
	ClassReadResponse = transport.ClassReadResponse
	ClassAtomic       = transport.ClassAtomic
	ClassAtomicAck    = transport.ClassAtomicAck
	ClassAck          = transport.ClassAck
	ClassUD           = transport.ClassUD
	ClassCNP          = transport.ClassCNP
	ClassOther        = transport.ClassOther
	NumOpClasses      = transport.NumOpClasses
)

// NAKKind is the kind of a NAK (the kind label of roce_naks_total).
type NAKKind = transport.NAKKind

// NAK kinds, the indexes of Stats.NAKsSent and NAKsRcvd.
const (
	NAKPSNSeqErr    = transport.NAKPSNSeqErr
	NAKInvalidReq   = transport.NAKInvalidReq
	NAKRemoteAccess = transport.NAKRemoteAccess
	NAKRemoteOpErr  = transport.NAKRemoteOpErr
	NAKInvalidRDReq = transport.NAKInvalidRDReq
	NAKRNR          = transport.NAKRNR
	NumNAKKinds     = transport.NumNAKKinds
)

// NumLatencyBuckets is the length of Stats.LatencyBuckets.
const NumLatencyBuckets = transport.NumLatencyBuckets

// LatencyBucketBound returns the upper bound of latency bucket i.
func LatencyBucketBound(i int) time.Duration { return transport.LatencyBucketBound(i) }

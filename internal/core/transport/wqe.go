package transport

import (
	"sync"
	"sync/atomic"
	"time"

	"github.com/goroce/goroce/bth"
	"github.com/goroce/goroce/internal/core/verbs"
)

// wqeState is the life of a send WQE (rxe enum wqe_state).
type wqeState uint8

const (
	wqePosted     wqeState = iota // queued, no packet sent yet
	wqeProcessing                 // some packets sent
	wqePending                    // every packet sent, waiting for the ACK/response
	wqeDone                       // completed (completion posted if due)
)

// sendWQE is a send queue slot. PostSend fills the request part under
// sendQueue.mu while the slot is free; then only the owner shard touches it
// until it is retired.
type sendWQE struct {
	wr     verbs.SendWR
	sgl    []verbs.SGE // storage behind wr.SGL
	inline []byte      // storage for SendInline data
	av     verbs.AddressVector
	length uint32 // message length in bytes

	// Owner shard only.
	state    wqeState
	firstPSN bth.PSN
	lastPSN  bth.PSN
	sentAt   time.Time      // first transmission, for the request-to-ACK latency
	orig     uint64         // atomic: original remote value
	status   verbs.WCStatus // a local operation's outcome, once executed
	value    [8]byte        // ATOMIC_WRITE: the bytes to write (Swap, in host order)
}

// isReadOrAtomic reports whether w completes only on a response with data or a
// result (READ, atomics, and FLUSH and ATOMIC_WRITE, answered by an empty READ
// RESPONSE); such WQEs count against max_rd_atomic.
func (w *sendWQE) isReadOrAtomic() bool {
	switch w.wr.Opcode {
	case verbs.WRRDMARead, verbs.WRAtomicCmpAndSwp, verbs.WRAtomicFetchAndAdd, verbs.WRFlush, verbs.WRAtomicWrite:
		return true
	}
	return false
}

func (w *sendWQE) isAtomic() bool {
	return w.wr.Opcode == verbs.WRAtomicCmpAndSwp || w.wr.Opcode == verbs.WRAtomicFetchAndAdd
}

// numPackets is the PSNs a WQE takes at path MTU pmtu: one per request packet,
// for a READ one per response packet (at least one).
func numPackets(op verbs.WROpcode, length, pmtu uint32) uint32 {
	switch op {
	case verbs.WRAtomicCmpAndSwp, verbs.WRAtomicFetchAndAdd, verbs.WRFlush, verbs.WRAtomicWrite:
		return 1
	}
	if length == 0 {
		return 1
	}
	return (length + pmtu - 1) / pmtu
}

// wcOpcode maps a send WR opcode to its completion opcode.
func wcOpcode(op verbs.WROpcode) verbs.WCOpcode {
	switch op {
	case verbs.WRRDMAWrite, verbs.WRRDMAWriteWithImm:
		return verbs.WCRDMAWrite
	case verbs.WRRDMARead:
		return verbs.WCRDMARead
	case verbs.WRAtomicCmpAndSwp:
		return verbs.WCCompSwap
	case verbs.WRAtomicFetchAndAdd:
		return verbs.WCFetchAdd
	case verbs.WRLocalInv:
		return verbs.WCLocalInv
	case verbs.WRBindMW:
		return verbs.WCBindMW
	case verbs.WRFlush:
		return verbs.WCFlush
	case verbs.WRAtomicWrite:
		return verbs.WCAtomicWrite
	}
	return verbs.WCSend
}

// sendQueue is a fixed ring of send WQEs: PostSend produces, the owner shard
// consumes and retires. The first post allocates it (grow).
//
// The indexes are atomics so that the shard reads tail, and retires, without
// the posters' lock: a poster fills the slot at tail, then publishes it by
// storing tail+1; the shard reads a slot only below the tail it loaded, and
// frees it by advancing head, which posters load before they reuse it. The
// lock only serialises posters with each other and with reset.
type sendQueue struct {
	mu         sync.Mutex    // posters, grow, reset
	head, tail atomic.Uint64 // tail: stored under mu; head: the owner shard (retire, and reset under mu)
	slots      []sendWQE     // set once by grow, before the first tail store

	// Immutable after init: the ring's geometry.
	n, maxSGE, maxInline int
}

func (s *sendQueue) init(n, maxSGE, maxInline int) {
	s.n, s.maxSGE, s.maxInline = n, maxSGE, max(maxInline, 0)
}

// grow allocates the slots and one array each for all SGEs and inline data, a
// slot's share a fixed-capacity window (appends never allocate). mu held.
func (s *sendQueue) grow() {
	if s.slots != nil {
		return
	}
	slots := make([]sendWQE, s.n)
	sges := make([]verbs.SGE, s.n*s.maxSGE)
	var inline []byte
	if s.maxInline > 0 {
		inline = make([]byte, s.n*s.maxInline)
	}
	for i := range slots {
		slots[i].sgl = sges[i*s.maxSGE : i*s.maxSGE : (i+1)*s.maxSGE]
		if inline != nil {
			slots[i].inline = inline[i*s.maxInline : i*s.maxInline : (i+1)*s.maxInline]
		}
	}
	s.slots = slots
}

// slot is the WQE at absolute index i, once a post has filled it.
func (s *sendQueue) slot(i uint64) *sendWQE { return &s.slots[i%uint64(len(s.slots))] }

// outstanding is how many WRs posted so far have not retired. head is
// loaded first: head never passes tail, so the difference is never negative.
func (s *sendQueue) outstanding() int {
	h := s.head.Load()
	return int(s.tail.Load() - h)
}

// loadTail is the index past the last published WQE.
func (s *sendQueue) loadTail() uint64 { return s.tail.Load() }

// retire frees the slot at head; only the owner shard calls it.
func (s *sendQueue) retire() { s.head.Add(1) }

package transport

import (
	"sync"
	"time"

	"github.com/goroce/goroce/bth"
	"github.com/goroce/goroce/internal/core/cq"
	"github.com/goroce/goroce/internal/core/srq"
)

// wqeState is the life of a send WQE (rxe enum wqe_state).
type wqeState uint8

const (
	wqePosted     wqeState = iota // queued, no packet sent yet
	wqeProcessing                 // some packets sent
	wqePending                    // every packet sent, waiting for the ACK/response
	wqeDone                       // completed (completion posted if due)
)

// sendWQE is one slot of a send queue. The user goroutine fills the request
// part in PostSend (under sendQueue.mu, while the slot is free); from then
// until the slot is retired only the owner shard touches it.
type sendWQE struct {
	wr     SendWR
	sgl    []srq.SGE // storage behind wr.SGL
	inline []byte    // storage for SendInline data
	av     AddressVector
	length uint32 // message length in bytes

	// Owner shard only.
	state    wqeState
	firstPSN bth.PSN
	lastPSN  bth.PSN
	sentAt   time.Time // first transmission, for the request-to-ACK latency
	orig     uint64    // atomic: original remote value
	status   cq.Status // a local operation's outcome, once executed
	value    [8]byte   // ATOMIC_WRITE: the bytes to write (Swap, in host order)
}

// isReadOrAtomic reports whether w is answered by a response carrying data or
// a result (a READ, an atomic, and FLUSH and ATOMIC_WRITE, which an empty READ
// RESPONSE answers): such a WQE counts against max_rd_atomic and completes only
// on its response.
func (w *sendWQE) isReadOrAtomic() bool {
	switch w.wr.Opcode {
	case WRRDMARead, WRAtomicCmpAndSwp, WRAtomicFetchAndAdd, WRFlush, WRAtomicWrite:
		return true
	}
	return false
}

func (w *sendWQE) isAtomic() bool {
	return w.wr.Opcode == WRAtomicCmpAndSwp || w.wr.Opcode == WRAtomicFetchAndAdd
}

// numPackets is how many PSNs the WQE consumes at path MTU pmtu: one per
// request packet, or for a READ one per response packet (at least one).
func numPackets(op WROpcode, length, pmtu uint32) uint32 {
	switch op {
	case WRAtomicCmpAndSwp, WRAtomicFetchAndAdd, WRFlush, WRAtomicWrite:
		return 1
	}
	if length == 0 {
		return 1
	}
	return (length + pmtu - 1) / pmtu
}

// wcOpcode maps a send WR opcode to its completion opcode.
func wcOpcode(op WROpcode) cq.Opcode {
	switch op {
	case WRRDMAWrite, WRRDMAWriteWithImm:
		return cq.OpRDMAWrite
	case WRRDMARead:
		return cq.OpRDMARead
	case WRAtomicCmpAndSwp:
		return cq.OpCompSwap
	case WRAtomicFetchAndAdd:
		return cq.OpFetchAdd
	case WRLocalInv:
		return cq.OpLocalInv
	case WRBindMW:
		return cq.OpBindMW
	case WRFlush:
		return cq.OpFlush
	case WRAtomicWrite:
		return cq.OpAtomicWrite
	}
	return cq.OpSend
}

// sendQueue is a fixed ring of send WQEs. The user produces (PostSend), the
// owner shard consumes and retires. The ring and its SGE and inline storage
// are allocated by the first post (grow), so a QP that never sends costs
// none of it.
type sendQueue struct {
	mu sync.Mutex
	// mu guards: head, tail, slots (allocation). slots[i] for head <= i <
	// tail belong to the shard; the others to PostSend.
	head, tail uint64
	slots      []sendWQE

	// Immutable after init: the ring's geometry.
	n, maxSGE, maxInline int
}

func (s *sendQueue) init(n, maxSGE, maxInline int) {
	s.n, s.maxSGE, s.maxInline = n, maxSGE, max(maxInline, 0)
}

// grow allocates the ring on first use: the slots, one array for every
// slot's SGEs and one for every slot's inline data, each slot taking a
// fixed-capacity window of them (appends within it never allocate). Called
// with mu held.
func (s *sendQueue) grow() {
	if s.slots != nil {
		return
	}
	slots := make([]sendWQE, s.n)
	sges := make([]srq.SGE, s.n*s.maxSGE)
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

// slot is the WQE at absolute index i; only for indices a post has filled
// (the ring exists from then on).
func (s *sendQueue) slot(i uint64) *sendWQE { return &s.slots[i%uint64(len(s.slots))] }

func (s *sendQueue) loadTail() uint64 {
	s.mu.Lock()
	t := s.tail
	s.mu.Unlock()
	return t
}

// retire frees the slot at head; only the owner shard calls it.
func (s *sendQueue) retire() {
	s.mu.Lock()
	s.head++
	s.mu.Unlock()
}

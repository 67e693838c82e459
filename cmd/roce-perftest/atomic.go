package main

import (
	"encoding/binary"
	"fmt"

	"github.com/goroce/goroce/transport"
)

// The atomic tests check that the peer executed every atomic exactly once,
// from whichever side goroce is.
//
// As the requester, goroce has each WR fetch into a word of its own. perftest's
// WRs visit the slots of the peer's buffer in turn (atomic_lat: always the
// first), so consecutive visits of one slot must fetch consecutive values
// (FETCH_AND_ADD adds 1) or the same value (CMP_AND_SWAP compares 0 and swaps
// 0, so a slot that is not 0 never changes): an atomic executed twice, or not
// at all, breaks the sequence.
//
// As the target, goroce knows what its buffer held before the test. The adds
// must account exactly for the atomic requests the engine executed (received,
// less duplicates, which are answered from the replay cache, and requests out
// of sequence, which are NAKed), and with -n known from the client's report,
// for -n per QP; CMP_AND_SWAP must have changed nothing, and the executed
// requests must number -n per QP.

// slots is how many slots of the peer's buffer the atomic WRs visit in turn.
func (s *session) slots() int {
	if s.c.test.lat {
		return 1
	}
	return s.cycle / s.inc(defSizeAtomic)
}

// checkAtomicResults checks the fetched values of this side's atomics.
func (s *session) checkAtomicResults() error {
	if s.c.test.verb != atomic || len(s.results) == 0 {
		return nil
	}
	m := s.slots()
	word := func(q, k int) uint64 { return binary.LittleEndian.Uint64(s.results[8*(q*s.c.iters+k):]) }
	step := uint64(atomicAdd)
	if s.c.atomicCAS {
		step = 0
	}
	for q := range s.c.numQPs {
		for k := m; k < s.c.iters; k++ {
			if prev, got := word(q, k-m), word(q, k); got != prev+step {
				return fmt.Errorf("QP %d atomic %d fetched %#x from slot %d, whose previous atomic fetched %#x: want %#x (each atomic executed exactly once)",
					q, k, got, k%m, prev, prev+step)
			}
		}
	}
	fmt.Fprintf(s.errOut, "atomics: %d per QP fetched consecutive values from %d slot(s): each executed exactly once\n", s.c.iters, min(m, s.c.iters))
	return nil
}

// checkAtomicTarget checks this side's buffer after the peer's atomics;
// total is the number of atomics the peer reports (0 when unknown).
func (s *session) checkAtomicTarget(total int) error {
	if s.c.test.verb != atomic {
		return nil
	}
	st := s.dev.Stats()
	executed := st.RcvdPackets[transport.ClassAtomic] - st.DuplicateRequests - st.OutOfSequence
	var added uint64
	n := s.c.numQPs
	region := s.buf[n*s.bsize : 2*n*s.bsize]
	for i := 0; i+8 <= len(region); i += 8 {
		was, now := binary.LittleEndian.Uint64(s.initial[i:]), binary.LittleEndian.Uint64(region[i:])
		if s.c.atomicCAS && now != was {
			return fmt.Errorf("CMP_AND_SWAP changed the word at offset %d from %#x to %#x (compare 0 never matches it)", i, was, now)
		}
		added += now - was
	}
	switch {
	case !s.c.atomicCAS && added != executed:
		return fmt.Errorf("the buffer gained %d adds, but the engine executed %d atomic requests", added, executed)
	case total > 0 && !s.timed() && executed != uint64(total):
		return fmt.Errorf("the engine executed %d atomic requests, the peer reports %d", executed, total)
	}
	fmt.Fprintf(s.errOut, "atomics: %d executed exactly once (%d adds in the buffer)\n", executed, added)
	return nil
}

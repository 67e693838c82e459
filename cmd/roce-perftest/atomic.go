package main

import (
	"encoding/binary"
	"fmt"

	"github.com/goroce/goroce/roce"
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
// of sequence, which are NAKed), or, for CMP_AND_SWAP, the buffer must be as it
// was; and with -n known from the client's report, the executed requests must
// number -n per QP.

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
// total is the number of atomics the peer reports (0 when unknown). The
// target's -A need not match the peer's (perftest's target is passive), so
// the buffer tells: FETCH_AND_ADDs added exactly one per executed request, and
// CMP_AND_SWAPs changed nothing.
func (s *session) checkAtomicTarget(total int) error {
	if s.c.test.verb != atomic {
		return nil
	}
	st := s.dev.Stats()
	executed := st.RcvdPackets[roce.ClassAtomic] - st.DuplicateRequests - st.OutOfSequence
	var added uint64
	n := s.c.numQPs
	region := s.buf[n*s.bsize : 2*n*s.bsize]
	for i := 0; i+8 <= len(region); i += 8 {
		was, now := binary.LittleEndian.Uint64(s.initial[i:]), binary.LittleEndian.Uint64(region[i:])
		if now < was {
			return fmt.Errorf("the word at offset %d went down from %#x to %#x: no FETCH_AND_ADD of 1 or CMP_AND_SWAP of 0 does that", i, was, now)
		}
		added += now - was
	}
	kind := "FETCH_AND_ADD"
	switch {
	case added == 0 && executed > 0:
		kind = "CMP_AND_SWAP" // compare 0 never matches the buffer's words
	case added != executed:
		return fmt.Errorf("the buffer gained %d adds, but the engine executed %d atomic requests", added, executed)
	}
	if total > 0 && !s.timed() && executed != uint64(total) {
		return fmt.Errorf("the engine executed %d atomic requests, the peer reports %d", executed, total)
	}
	fmt.Fprintf(s.errOut, "atomics: %d %s executed exactly once (%d adds in the buffer)\n", executed, kind, added)
	return nil
}

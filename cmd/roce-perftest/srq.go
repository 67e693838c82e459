package main

import (
	"fmt"

	"github.com/goroce/goroce/roce"
)

// srqSlotBudget is the most memory the receive slots of an SRQ may take.
const srqSlotBudget = 64 << 20

// srqSlots gives every receive posted to the SRQ a buffer of its own, taken back
// when its completion is handled. perftest points the receives of one QP's
// region at a few cycle-buffer slots, which is harmless while one QP consumes
// them in order, but any QP of an SRQ takes any receive, and goroce places the
// messages of QPs on different engine shards at once: receives that share bytes
// would be written concurrently. With more than srqSlotBudget of slots (-a up to
// 8 MiB, a large -r) the receives keep perftest's layout; the data is never read.
type srqSlots struct {
	mr   *roce.MR
	buf  []byte
	size int   // bytes per slot: the largest message (UD: and its GRH)
	free []int // slots no posted receive owns
}

// setupSRQSlots makes the slots of the SRQ's -r receives, if they fit the budget.
func (s *session) setupSRQSlots() error {
	c := s.c
	size := c.size
	if c.conn == connUD {
		size += udAddition
	}
	if c.rxDepth*size > srqSlotBudget {
		return nil
	}
	sl := &srqSlots{buf: make([]byte, c.rxDepth*size), size: size, free: make([]int, c.rxDepth)}
	for i := range sl.free {
		sl.free[i] = c.rxDepth - 1 - i
	}
	var err error
	if sl.mr, err = s.pd.RegMR(sl.buf, roce.AccessLocalWrite); err != nil {
		return fmt.Errorf("couldn't register the SRQ's buffers: %w", err)
	}
	s.Add(sl.mr.Close)
	s.srqBufs = sl
	return nil
}

// recvSGE is where receive i of a batch for QP q's region goes: a free slot,
// named in the WR's low bits, or perftest's place in the region.
func (s *session) recvSGE(q, k, length, sgeLen int) (roce.SGE, uint32, error) {
	if sl := s.srqBufs; sl != nil {
		if len(sl.free) == 0 {
			return roce.SGE{}, 0, fmt.Errorf("no free SRQ receive buffer for qp %d", q)
		}
		slot := sl.free[len(sl.free)-1]
		sl.free = sl.free[:len(sl.free)-1]
		return roce.SGE{Addr: sl.mr.Addr() + uint64(slot*sl.size), Length: uint32(sgeLen), LKey: sl.mr.LKey()}, uint32(slot), nil
	}
	off := s.advertised(q) + s.slotOf(k, length)
	return roce.SGE{Addr: s.mr.Addr() + uint64(off), Length: uint32(sgeLen), LKey: s.mr.LKey()}, uint32(k), nil
}

// releaseRecv gives the slot of receive completion w back.
func (s *session) releaseRecv(w roce.WC) {
	if s.srqBufs != nil {
		s.srqBufs.free = append(s.srqBufs.free, int(uint32(w.WRID)))
	}
}

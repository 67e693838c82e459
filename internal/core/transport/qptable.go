package transport

import (
	"math/bits"
	"sync/atomic"
)

// The QP table maps a 24-bit QPN to its QP, looked up lock-free for every
// datagram: a two-level radix table of atomic pointers (4096 chunks of 4096
// slots, a chunk allocated with its first QP and released with its last), with
// a bitmap per chunk for finding free QPNs. Its cost does not grow with QPs.
const (
	qpnChunkBits = 12
	qpnChunkSize = 1 << qpnChunkBits
	qpnChunks    = (maxQPN + 1) >> qpnChunkBits
	qpnWords     = qpnChunkSize / 64
)

// qpChunk holds the QPs of 4096 consecutive QPNs.
type qpChunk struct {
	slots [qpnChunkSize]atomic.Pointer[QP]
	// Writers only (under Engine.mu).
	used [qpnWords]uint64 // bit i: slot i holds a QP
	n    int              // QPs in the chunk
}

// qpTable is the table. Lookups are lock-free; insert, remove and alloc run
// under Engine.mu.
type qpTable struct {
	chunks [qpnChunks]atomic.Pointer[qpChunk]
	// Writers only.
	n      int      // QPs in the table
	next   uint32   // where the search for a free QPN starts
	lo, hi uint32   // the QPNs alloc hands out
	spare  *qpChunk // an emptied chunk kept for the next one needed
}

// init makes alloc hand out [lo, hi].
func (t *qpTable) init(lo, hi uint32) { t.lo, t.hi, t.next = lo, hi, lo }

// lookup returns the QP with number qpn, or nil. Safe from any goroutine.
func (t *qpTable) lookup(qpn uint32) *QP {
	if qpn > maxQPN {
		return nil
	}
	c := t.chunks[qpn>>qpnChunkBits].Load()
	if c == nil {
		return nil
	}
	return c.slots[qpn&(qpnChunkSize-1)].Load()
}

// alloc returns the next free QPN in [lo, hi] from the cursor, wrapping, and
// moves the cursor past it: a destroyed QP's number returns only after the
// whole space has gone round (as rxe's cyclic allocation), so a stray packet
// for it finds no QP rather than a new one. Full chunks are skipped and a
// chunk's bitmap scanned a word at a time, so the cost is bounded by the
// table's geometry. 0: every QPN is taken.
func (t *qpTable) alloc() uint32 {
	if t.n >= int(t.hi+1-t.lo) {
		return 0
	}
	for qpn, wrapped := t.next, false; ; {
		if qpn > t.hi {
			if wrapped {
				return 0
			}
			qpn, wrapped = t.lo, true
		}
		ci := qpn >> qpnChunkBits
		c := t.chunks[ci].Load()
		if c == nil {
			return t.take(qpn)
		}
		if c.n < qpnChunkSize {
			if free, ok := c.freeFrom(qpn & (qpnChunkSize - 1)); ok && ci<<qpnChunkBits|free <= t.hi {
				return t.take(ci<<qpnChunkBits | free)
			}
		}
		qpn = (ci + 1) << qpnChunkBits
	}
}

// take moves the cursor past qpn and returns it.
func (t *qpTable) take(qpn uint32) uint32 {
	t.next = qpn + 1
	if t.next > t.hi {
		t.next = t.lo
	}
	return qpn
}

// freeFrom returns the first free slot at or after i.
func (c *qpChunk) freeFrom(i uint32) (uint32, bool) {
	w := i / 64
	free := ^c.used[w] &^ (1<<(i%64) - 1) // free bits at or after i in word w
	for {
		if free != 0 {
			return w*64 + uint32(bits.TrailingZeros64(free)), true
		}
		if w++; w == qpnWords {
			return 0, false
		}
		free = ^c.used[w]
	}
}

// insert puts q at qpn, found free under the same lock.
func (t *qpTable) insert(qpn uint32, q *QP) {
	ci, i := qpn>>qpnChunkBits, qpn&(qpnChunkSize-1)
	c := t.chunks[ci].Load()
	if c == nil {
		c, t.spare = t.spare, nil
		if c == nil {
			c = new(qpChunk)
		}
		t.chunks[ci].Store(c)
	}
	c.used[i/64] |= 1 << (i % 64)
	c.n++
	t.n++
	c.slots[i].Store(q)
}

func (t *qpTable) remove(q *QP) {
	ci, i := q.qpn>>qpnChunkBits, q.qpn&(qpnChunkSize-1)
	c := t.chunks[ci].Load()
	if c == nil || c.slots[i].Load() != q {
		return
	}
	c.slots[i].Store(nil)
	c.used[i/64] &^= 1 << (i % 64)
	c.n--
	t.n--
	if c.n == 0 {
		// All slots are nil: a reader still holding the chunk finds nothing,
		// and it can serve any other range.
		t.chunks[ci].Store(nil)
		t.spare = c
	}
}

// each calls fn for every QP until fn returns false; from any goroutine, a QP
// created or destroyed meanwhile may or may not be seen.
func (t *qpTable) each(fn func(*QP) bool) {
	for ci := range t.chunks {
		c := t.chunks[ci].Load()
		if c == nil {
			continue
		}
		for i := range c.slots {
			if q := c.slots[i].Load(); q != nil && !fn(q) {
				return
			}
		}
	}
}

func (t *qpTable) all() []*QP {
	var out []*QP
	t.each(func(q *QP) bool { out = append(out, q); return true })
	return out
}

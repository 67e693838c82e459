package cm

import (
	"container/heap"
	"time"
)

// timers is a min-heap of the entries that have a deadline (entry.next),
// earliest first. Each entry holds its place (entry.pos), so a deadline that
// moves, appears or goes costs O(log n), and Deadline and Tick never walk
// every communication ID.
type timers []*entry

func (h timers) Len() int           { return len(h) }
func (h timers) Less(i, j int) bool { return h[i].sched.Before(h[j].sched) }
func (h timers) Swap(i, j int) {
	h[i], h[j] = h[j], h[i]
	h[i].pos, h[j].pos = i+1, j+1
}
func (h *timers) Push(x any) {
	e := x.(*entry)
	*h = append(*h, e)
	e.pos = len(*h)
}
func (h *timers) Pop() any {
	old := *h
	e := old[len(old)-1]
	old[len(old)-1] = nil
	*h = old[:len(old)-1]
	e.pos = 0
	return e
}

// touch notes that e's deadline may have moved: reschedule looks at it.
func (m *Machine) touch(e *entry) { m.touched = append(m.touched, e) }

// reschedule puts every touched entry that is still known at its deadline
// in the heap (or out of it, without one) and forgets the touched list.
// Drain, Deadline and Tick call it, so the list holds only what one call to
// the Machine touched.
func (m *Machine) reschedule() {
	for _, e := range m.touched {
		if m.byID[e.id] == e {
			m.schedule(e, e.next())
		}
	}
	clear(m.touched)
	m.touched = m.touched[:0]
}

// schedule gives e the deadline at; zero takes it out of the heap.
func (m *Machine) schedule(e *entry, at time.Time) {
	switch {
	case at.IsZero():
		if e.pos > 0 {
			heap.Remove(&m.timers, e.pos-1)
		}
	case e.pos == 0:
		e.sched = at
		heap.Push(&m.timers, e)
	case !at.Equal(e.sched):
		e.sched = at
		heap.Fix(&m.timers, e.pos-1)
	}
}

// Deadline returns the earliest time Tick must be called; ok is false when
// no timer runs.
func (m *Machine) Deadline() (t time.Time, ok bool) {
	m.reschedule()
	if len(m.timers) == 0 {
		return time.Time{}, false
	}
	return m.timers[0].sched, true
}

// due takes the next entry whose deadline has come at now out of the heap
// (touched, so that it is put back at its next deadline); nil when none has.
func (m *Machine) due(now time.Time) *entry {
	if len(m.timers) == 0 || now.Before(m.timers[0].sched) {
		return nil
	}
	e := heap.Pop(&m.timers).(*entry)
	m.touch(e)
	return e
}

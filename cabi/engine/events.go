package main

import (
	"sync"
	"sync/atomic"

	"golang.org/x/sys/unix"
)

// eventQueue is the file descriptor behind a completion channel (its fd) or a
// context's async_fd: a bounded queue of records with a semaphore eventfd that
// counts them, so the fd polls readable while a record waits and each read(2)
// of 8 bytes by the C half takes the right to pop one. The program may make the
// fd non-blocking, poll it or epoll it, as it would the kernel's.
//
// A withdrawn record (its object destroyed) takes its count back, so it wakes
// no reader and the fd stops polling readable, as the kernel's queue forgets the
// events of a destroyed object. A reader that took a count just before the
// withdraw finds the queue empty and reads again: one extra read, never a wrong
// record.
type eventQueue[T comparable] struct {
	fd int

	mu     sync.Mutex
	q      []T // mu guards; len(q) <= max
	max    int
	closed bool

	dropped atomic.Uint64 // records refused because the queue was full
}

func newEventQueue[T comparable](max int) (*eventQueue[T], error) {
	fd, err := unix.Eventfd(0, unix.EFD_SEMAPHORE|unix.EFD_CLOEXEC)
	if err != nil {
		return nil, err
	}
	return &eventQueue[T]{fd: fd, max: max}, nil
}

// push queues r and makes the fd readable. A full queue drops r and counts it.
func (e *eventQueue[T]) push(r T) {
	e.mu.Lock()
	if e.closed || len(e.q) >= e.max {
		e.mu.Unlock()
		e.dropped.Add(1)
		return
	}
	e.q = append(e.q, r)
	// Written under mu, so close cannot close the fd (and its number be
	// reused by another file) between the check above and the write.
	var one = [8]byte{1}
	unix.Write(e.fd, one[:])
	e.mu.Unlock()
}

// pop takes the oldest record; ok is false when none is queued.
func (e *eventQueue[T]) pop() (r T, ok bool) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if len(e.q) == 0 {
		return r, false
	}
	r = e.q[0]
	var zero T
	e.q[0] = zero
	e.q = e.q[1:]
	return r, true
}

// withdraw removes and returns every queued record for which match holds: the
// events of an object being destroyed, which the program must no longer
// receive.
func (e *eventQueue[T]) withdraw(match func(T) bool) (removed []T) {
	e.mu.Lock()
	defer e.mu.Unlock()
	k := 0
	for _, r := range e.q {
		if match(r) {
			removed = append(removed, r)
		} else {
			e.q[k] = r
			k++
		}
	}
	var zero T
	for i := k; i < len(e.q); i++ {
		e.q[i] = zero
	}
	e.unwake(len(e.q) - k)
	e.q = e.q[:k]
	return removed
}

// unwake takes back up to n counts without blocking, whatever the program set
// on the fd (RWF_NOWAIT, Linux 5.12 and later). It stops early when readers
// already took the rest; on an older kernel the counts stay, and each costs a
// reader one extra read.
func (e *eventQueue[T]) unwake(n int) {
	var b [8]byte
	iov := [][]byte{b[:]}
	for ; n > 0; n-- {
		if _, err := unix.Preadv2(e.fd, iov, -1, unix.RWF_NOWAIT); err != nil {
			return
		}
	}
}

// stop refuses every later push and returns the records still queued; the fd
// stays open for its owner to close.
func (e *eventQueue[T]) stop() []T {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.closed = true
	q := e.q
	e.q = nil
	return q
}

// close stops the queue and closes the fd.
func (e *eventQueue[T]) close() {
	e.stop()
	unix.Close(e.fd)
}

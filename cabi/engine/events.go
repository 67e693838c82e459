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
// A record can be withdrawn (its object destroyed) after its count was
// written; the C half then finds the queue empty after a successful read and
// reads again, so a stale count costs one read, never a wrong record.
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
	e.mu.Unlock()
	var one = [8]byte{1}
	unix.Write(e.fd, one[:])
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

// withdraw removes every queued record for which match holds: the events of an
// object being destroyed, which the program must no longer receive.
func (e *eventQueue[T]) withdraw(match func(T) bool) {
	e.mu.Lock()
	defer e.mu.Unlock()
	k := 0
	for _, r := range e.q {
		if !match(r) {
			e.q[k] = r
			k++
		}
	}
	var zero T
	for i := k; i < len(e.q); i++ {
		e.q[i] = zero
	}
	e.q = e.q[:k]
}

// close closes the fd; later pushes are dropped.
func (e *eventQueue[T]) close() {
	e.mu.Lock()
	e.closed = true
	e.q = nil
	e.mu.Unlock()
	unix.Close(e.fd)
}

package cm

import (
	"context"
	"fmt"
	"net"
	"net/netip"
	"sync"
	"time"
)

// requestQueue is what both listener kinds (RC connection requests and SIDR
// requests) share: the service they listen on, a bounded backlog, and a close
// that unregisters the service and refuses whatever is still queued.
type requestQueue[T any] struct {
	mg        *Manager
	addr      netip.AddrPort
	serviceID uint64
	reqs      chan T
	done      chan struct{}
	closeOnce sync.Once
}

// backlog is how many requests wait for GetRequest before new ones are refused.
const backlog = 64

// listenLocked registers addr's port in port space ps with the CM and readies
// the queue for it. mg.mu is held.
func (q *requestQueue[T]) listenLocked(mg *Manager, addr netip.AddrPort, ps PortSpace) error {
	if mg.closed {
		return net.ErrClosed
	}
	sid := ServiceID(ps, addr.Port())
	if err := mg.m.Listen(sid); err != nil {
		return fmt.Errorf("cm: listen %v: %w", addr, err)
	}
	q.init(mg, addr, sid)
	return nil
}

func (q *requestQueue[T]) init(mg *Manager, addr netip.AddrPort, sid uint64) {
	q.mg, q.serviceID = mg, sid
	q.addr = netip.AddrPortFrom(addr.Addr().Unmap(), addr.Port())
	q.reqs, q.done = make(chan T, backlog), make(chan struct{})
}

// get waits for the next request, the listener's or the manager's end, or ctx.
func (q *requestQueue[T]) get(ctx context.Context) (T, error) {
	var zero T
	select {
	case r := <-q.reqs:
		return r, nil
	case <-q.mg.readDone:
		return zero, net.ErrClosed
	case <-q.done:
		return zero, net.ErrClosed
	case <-ctx.Done():
		return zero, ctx.Err()
	}
}

// closeLocked runs once: it stops the service, drops it from the manager's
// table (unregister), and refuses every request still queued. mg.mu is held.
func (q *requestQueue[T]) closeLocked(unregister func(), refuse func(now time.Time, r T)) {
	q.closeOnce.Do(func() {
		close(q.done)
		q.mg.m.Unlisten(q.serviceID)
		unregister()
		for {
			select {
			case r := <-q.reqs:
				refuse(time.Now(), r)
			default:
				q.mg.flushLocked()
				return
			}
		}
	})
}

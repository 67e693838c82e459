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

// MaxBacklog is rdma_cm's bound on a listener's backlog, and its default:
// ucma takes rdma_listen's backlog when it is above 0 and below the
// net.rdma_ucm.max_backlog sysctl (1024 unless changed), and the sysctl's
// value otherwise. Like ucma's, the backlog counts the requests not yet taken
// (GetRequest, rdma_get_cm_event), not the connections waiting for RTU.
const MaxBacklog = 1024

// backlogOf is rdma_listen's backlog as ucma applies it.
func backlogOf(n int) int {
	if n <= 0 || n > MaxBacklog {
		return MaxBacklog
	}
	return n
}

// listenLocked registers addr's port in port space ps with the CM and readies
// the queue for it, backlog requests deep. mg.mu is held.
func (q *requestQueue[T]) listenLocked(mg *Manager, addr netip.AddrPort, ps PortSpace, backlog int) error {
	if mg.closed {
		return net.ErrClosed
	}
	sid := ServiceID(ps, addr.Port())
	if g := mg.grace[sid]; g != nil && ps == PortSpaceTCP {
		// The machine still takes requests for sid: the port's last
		// listener closed within its grace (Manager.startGraceLocked),
		// and roced's claim on it (ServiceClaimer) is still this process's.
		g.timer.Stop()
		delete(mg.grace, sid)
		mg.adopt = append(mg.adopt, g.held...)
	} else {
		claimer, _ := mg.conn.(ServiceClaimer)
		if claimer != nil {
			if err := claimer.ClaimService(sid, ps == PortSpaceUDP); err != nil {
				return fmt.Errorf("cm: listen %v: %w", addr, err)
			}
		}
		if err := mg.m.Listen(sid); err != nil {
			if claimer != nil {
				claimer.ReleaseService(sid, ps == PortSpaceUDP)
			}
			return fmt.Errorf("cm: listen %v: %w", addr, err)
		}
	}
	q.mg, q.serviceID = mg, sid
	q.addr = netip.AddrPortFrom(addr.Addr().Unmap(), addr.Port())
	q.reqs, q.done = make(chan T, backlogOf(backlog)), make(chan struct{})
	return nil
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

// closeLocked runs once: it stops the service and drops it from the manager's
// tables (unregister), and refuses every request still queued. mg.mu is held.
func (q *requestQueue[T]) closeLocked(unregister func(), refuse func(now time.Time, r T)) {
	q.closeOnce.Do(func() {
		close(q.done)
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

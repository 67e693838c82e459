package main

/*
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <netinet/in.h>
#include "goroce_verbs.h"
#include "goroce_rdmacm.h"
*/
import "C"

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"
	"strconv"
	"sync"
	"syscall"
	"time"
	"unsafe"

	"github.com/goroce/goroce/cm"
	"github.com/goroce/goroce/cm/gsi"
	"github.com/goroce/goroce/cm/mcast"
	"github.com/goroce/goroce/roce"
)

// This file is the kernel side of goroce's librdmacm, what rdma_ucm is to
// rdma-core's: ids, address and route resolution, listening, connecting and
// the event stream, on the cm package's Manager of each device. The C half
// (cabi/rdmacm) keeps librdmacm's structs and moves QPs with libibverbs calls,
// as rdma-core's does.

// The rdma_cm events (enum rdma_cm_event_type).
const (
	evAddrResolved    = C.RDMA_CM_EVENT_ADDR_RESOLVED
	evAddrError       = C.RDMA_CM_EVENT_ADDR_ERROR
	evRouteResolved   = C.RDMA_CM_EVENT_ROUTE_RESOLVED
	evConnectRequest  = C.RDMA_CM_EVENT_CONNECT_REQUEST
	evConnectResponse = C.RDMA_CM_EVENT_CONNECT_RESPONSE
	evConnectError    = C.RDMA_CM_EVENT_CONNECT_ERROR
	evUnreachable     = C.RDMA_CM_EVENT_UNREACHABLE
	evRejected        = C.RDMA_CM_EVENT_REJECTED
	evEstablished     = C.RDMA_CM_EVENT_ESTABLISHED
	evDisconnected    = C.RDMA_CM_EVENT_DISCONNECTED
	evMulticastJoin   = C.RDMA_CM_EVENT_MULTICAST_JOIN
	evMulticastError  = C.RDMA_CM_EVENT_MULTICAST_ERROR
	evTimewaitExit    = C.RDMA_CM_EVENT_TIMEWAIT_EXIT
)

// The private data sizes the kernel's rdma_cm reports with each event: the
// message's private data field, less the rdma_cm header on a request.
const (
	privREQ    = 92 - cm.CMAHeaderLen
	privREP    = 196
	privREJ    = 148
	privDREQ   = 220
	privSIDRRQ = 216 - cm.CMAHeaderLen
	privSIDRRP = 136
)

// cmRetriesEnv sets how often the CM resends a REQ, REP or DREQ that gets no
// answer (rdma_cm's default, 15, takes about a minute to give up on a peer
// that never answers; 4 bits).
const cmRetriesEnv = "GOROCE_CM_RETRIES"

// cmEventQueueLen bounds a channel's unread events; a program that never
// reads its channel loses the newest events, counted.
const cmEventQueueLen = 4096

// cmChannel is an rdma_event_channel.
type cmChannel struct {
	q *eventQueue[*C.struct_gr_cm_event]
}

//export gr_cm_create_channel
func gr_cm_create_channel(h *C.uintptr_t, fd *C.int) C.int {
	q, err := newEventQueue[*C.struct_gr_cm_event](cmEventQueueLen)
	if err != nil {
		return errno(err)
	}
	*h = newHandle(&cmChannel{q: q})
	*fd = C.int(q.fd)
	return 0
}

// gr_cm_destroy_channel drops the channel's events and every later one. The C
// half closes the fd once no thread is inside rdma_get_cm_event: a thread
// blocked there when the channel is destroyed stays blocked, as one in the
// kernel's ucma does.
//
//export gr_cm_destroy_channel
func gr_cm_destroy_channel(h C.uintptr_t) C.int {
	ch := object[*cmChannel](h)
	if ch == nil {
		return C.EINVAL
	}
	deleteHandle(h)
	freeEvents(ch.q.stop())
	return 0
}

// freeEvents frees withdrawn or dropped events, and ends the new id a
// CONNECT_REQUEST carries (its request is rejected) since no program will see
// it.
func freeEvents(evs []*C.struct_gr_cm_event) {
	for _, e := range evs {
		if e.event == evConnectRequest && e.child_h != 0 {
			gr_cm_destroy_id(e.child_h)
		}
		C.free(unsafe.Pointer(e))
	}
}

// gr_cm_get_event pops the channel's oldest event after the C half read its
// fd; ENOENT when it was withdrawn meanwhile. The record is C memory the C half
// frees.
//
//export gr_cm_get_event
func gr_cm_get_event(h C.uintptr_t, ev **C.struct_gr_cm_event) C.int {
	ch := object[*cmChannel](h)
	if ch == nil {
		return C.EINVAL
	}
	e, ok := ch.q.pop()
	if !ok {
		return C.ENOENT
	}
	*ev = e
	return 0
}

// cmID is an rdma_cm_id: its address, and what it is doing, listening or
// connected to.
type cmID struct {
	ps      cm.PortSpace
	ctx     context.Context // ends with the id: every goroutine of the id watches it
	cancel  context.CancelFunc
	mu      sync.Mutex // guards the fields below
	ch      *cmChannel
	element C.uintptr_t // the C struct
	dev     *device     // bound or resolved; nil for an id on every device (listening on ANY)
	local   netip.AddrPort
	remote  netip.AddrPort
	tos     uint8

	listeners []*cm.Listener   // one per device for an unspecified address
	udListen  []*cm.UDListener // RDMA_PS_UDP
	req       *cm.ConnRequest  // a child id's request, until accepted or rejected
	udReq     *cm.UDRequest
	reqParam  cm.REQ      // the request's attributes, for rdma_init_qp_attr before accept
	psn       uint32      // the starting PSN the QP was given before accept (0: none yet)
	conn      *cm.Conn    // established
	params    cm.QPParams // negotiated; valid with haveParams
	haveParam bool
	rtu       chan error // active side: rdma_establish's (or librdmacm's) answer to Ready
	dialed    chan error // active side: the RTU is sent (nil) or the connection failed
	joins     map[netip.Addr]*mcast.Membership
}

// push queues an event of the id on its channel, filled by fill, and reports
// whether it did: once the id is destroyed its events are dropped, as
// gr_cm_destroy_id withdraws those queued before (the C struct they point to is
// freed).
func (id *cmID) push(typ C.int, status C.int, fill func(*C.struct_gr_cm_event)) bool {
	e := (*C.struct_gr_cm_event)(C.calloc(1, C.sizeof_struct_gr_cm_event))
	e.event, e.status = typ, status
	id.mu.Lock()
	e.id = id.element
	id.mu.Unlock()
	if fill != nil {
		fill(e) // may take id.mu
	}
	// Checked and queued under mu, which gr_cm_destroy_id takes after it
	// cancels ctx and before it withdraws.
	id.mu.Lock()
	defer id.mu.Unlock()
	if id.ctx.Err() != nil {
		C.free(unsafe.Pointer(e))
		return false
	}
	if debug {
		fmt.Fprintf(os.Stderr, "goroce: rdma_cm event %d status %d for id %#x\n", typ, status, uintptr(e.id))
	}
	id.ch.q.push(e)
	return true
}

// putPrivate copies p into e, padded with zeros to n bytes as the kernel reports it.
func putPrivate(e *C.struct_gr_cm_event, p []byte, n int) {
	n = min(max(n, len(p)), len(e.private_data))
	copy(unsafe.Slice((*byte)(unsafe.Pointer(&e.private_data[0])), n), p)
	e.private_data_len = C.uint8_t(n)
}

//export gr_cm_create_id
func gr_cm_create_id(chH C.uintptr_t, element C.uintptr_t, ps C.int, h *C.uintptr_t) C.int {
	ch := object[*cmChannel](chH)
	if ch == nil {
		return C.EINVAL
	}
	switch cm.PortSpace(ps) {
	case cm.PortSpaceTCP, cm.PortSpaceUDP:
	default:
		// RDMA_PS_IB and RDMA_PS_IPOIB need native InfiniBand addressing.
		return C.EPROTONOSUPPORT
	}
	ctx, cancel := context.WithCancel(context.Background())
	*h = newHandle(&cmID{ps: cm.PortSpace(ps), ctx: ctx, cancel: cancel, ch: ch, element: element})
	return 0
}

// newChild is the id of an incoming request on listener id l.
func (l *cmID) newChild(dev *device, local, remote netip.AddrPort) (*cmID, C.uintptr_t) {
	// A connection outlives its listener: programs destroy the listening id
	// once they accepted what they wait for.
	ctx, cancel := context.WithCancel(context.Background())
	l.mu.Lock()
	c := &cmID{ps: l.ps, ctx: ctx, cancel: cancel, ch: l.ch, dev: dev, local: local, remote: remote, tos: l.tos}
	l.mu.Unlock()
	return c, newHandle(c)
}

//export gr_cm_set_element
func gr_cm_set_element(h, element C.uintptr_t) {
	if id := object[*cmID](h); id != nil {
		id.mu.Lock()
		id.element = element
		id.mu.Unlock()
	}
}

// gr_cm_destroy_id ends the id: a listener stops, a pending request is
// rejected, a connection is disconnected, and the id's unread events are
// withdrawn from its channel.
//
//export gr_cm_destroy_id
func gr_cm_destroy_id(h C.uintptr_t) C.int {
	id := object[*cmID](h)
	if id == nil {
		return C.EINVAL
	}
	id.cancel()
	id.mu.Lock()
	ls, uls, req, udReq, conn, joins := id.listeners, id.udListen, id.req, id.udReq, id.conn, id.joins
	id.listeners, id.udListen, id.req, id.udReq, id.joins = nil, nil, nil, nil, nil
	el, ch := id.element, id.ch
	id.mu.Unlock()
	for _, l := range ls {
		l.Close()
	}
	for _, l := range uls {
		l.Close()
	}
	if req != nil {
		req.Reject(nil)
	}
	if udReq != nil {
		udReq.Reject(nil)
	}
	for _, m := range joins {
		m.Leave()
	}
	if conn != nil {
		if d := id.dev; d != nil {
			d.mu.Lock()
			delete(d.waiting, conn.ID())
			d.mu.Unlock()
		}
		// The DREQ leaves before this returns (the program may exit next);
		// the CM resends it until the DREP comes or it gives up.
		ctx, cancel := context.WithCancel(context.Background())
		cancel()
		conn.Disconnect(ctx)
	}
	// A listener's CONNECT_REQUESTs name it in listen_id (their id is 0: the
	// new id's C struct does not exist yet, nor has a new id that was never
	// delivered an element or events).
	if el != 0 {
		freeEvents(ch.q.withdraw(func(e *C.struct_gr_cm_event) bool {
			return e.id == el || e.event == evConnectRequest && e.listen_id == el
		}))
	}
	deleteHandle(h)
	return 0
}

//export gr_cm_migrate_id
func gr_cm_migrate_id(h, chH C.uintptr_t) C.int {
	id, ch := object[*cmID](h), object[*cmChannel](chH)
	if id == nil || ch == nil {
		return C.EINVAL
	}
	// Events not yet read move with the id, as the kernel's do, ahead of
	// any new one (push waits for mu).
	id.mu.Lock()
	defer id.mu.Unlock()
	old, el := id.ch, id.element
	id.ch = ch
	for _, e := range old.q.withdraw(func(e *C.struct_gr_cm_event) bool { return e.id == el }) {
		ch.q.push(e)
	}
	return 0
}

// sockaddrAddr reads a struct sockaddr (AF_INET or AF_INET6).
func sockaddrAddr(sa *C.struct_sockaddr) (netip.AddrPort, bool) {
	if sa == nil {
		return netip.AddrPort{}, false
	}
	switch sa.sa_family {
	case C.AF_INET:
		in := (*C.struct_sockaddr_in)(unsafe.Pointer(sa))
		a := netip.AddrFrom4(*(*[4]byte)(unsafe.Pointer(&in.sin_addr)))
		return netip.AddrPortFrom(a, ntohs(uint16(in.sin_port))), true
	case C.AF_INET6:
		in := (*C.struct_sockaddr_in6)(unsafe.Pointer(sa))
		a := netip.AddrFrom16(*(*[16]byte)(unsafe.Pointer(&in.sin6_addr))).Unmap()
		return netip.AddrPortFrom(a, ntohs(uint16(in.sin6_port))), true
	}
	return netip.AddrPort{}, false
}

// putSockaddr writes ap as a struct sockaddr_storage of ap's family.
func putSockaddr(ss *C.struct_sockaddr_storage, ap netip.AddrPort) {
	*ss = C.struct_sockaddr_storage{}
	if !ap.IsValid() {
		return
	}
	if ap.Addr().Is4() {
		in := (*C.struct_sockaddr_in)(unsafe.Pointer(ss))
		in.sin_family = C.AF_INET
		in.sin_port = C.in_port_t(htons(ap.Port()))
		*(*[4]byte)(unsafe.Pointer(&in.sin_addr)) = ap.Addr().As4()
		return
	}
	in := (*C.struct_sockaddr_in6)(unsafe.Pointer(ss))
	in.sin6_family = C.AF_INET6
	in.sin6_port = C.in_port_t(htons(ap.Port()))
	*(*[16]byte)(unsafe.Pointer(&in.sin6_addr)) = ap.Addr().As16()
}

func htons(v uint16) uint16 { return v<<8 | v>>8 }
func ntohs(v uint16) uint16 { return v<<8 | v>>8 }

// deviceOf is the device on address a.
func deviceOf(a netip.Addr) *device {
	for _, d := range deviceList() {
		if d.addr == a.Unmap() {
			return d
		}
	}
	return nil
}

// gr_cm_bind_addr is rdma_bind_addr: the id takes a local address (a device's,
// or the unspecified one: every device) and port (0: one is chosen at listen or
// connect).
//
//export gr_cm_bind_addr
func gr_cm_bind_addr(h C.uintptr_t, sa *C.struct_sockaddr) C.int {
	id := object[*cmID](h)
	if id == nil {
		return C.EINVAL
	}
	ap, ok := sockaddrAddr(sa)
	if !ok {
		return C.EAFNOSUPPORT
	}
	var dev *device
	if !ap.Addr().IsUnspecified() {
		if dev = deviceOf(ap.Addr()); dev == nil || dev.open() == nil {
			return C.EADDRNOTAVAIL
		}
	}
	id.mu.Lock()
	defer id.mu.Unlock()
	if id.local.IsValid() {
		return C.EINVAL // bound already
	}
	id.dev, id.local = dev, ap
	return 0
}

// localFor is the local address a datagram to dst leaves from: the kernel's
// route, read by connecting a UDP socket (which sends nothing).
func localFor(dst netip.Addr) (netip.Addr, error) {
	c, err := net.DialUDP("udp", nil, net.UDPAddrFromAddrPort(netip.AddrPortFrom(dst, 4791)))
	if err != nil {
		return netip.Addr{}, err
	}
	defer c.Close()
	return c.LocalAddr().(*net.UDPAddr).AddrPort().Addr().Unmap(), nil
}

// routeDevice is the device a datagram to dst leaves from: the one on the
// kernel's source address for dst, or else one on the same interface (a
// device on 127.0.0.43 reaches 127.0.0.42 through lo, whose route says
// 127.0.0.1), or dst itself when it is one of ours.
func routeDevice(dst netip.Addr) *device {
	src, err := localFor(dst)
	if err != nil {
		return deviceOf(dst)
	}
	if d := deviceOf(src); d != nil {
		return d
	}
	ifs, _ := net.Interfaces()
	for _, ifc := range ifs {
		addrs, _ := ifc.Addrs()
		var onIf []netip.Addr
		has := false
		for _, a := range addrs {
			if p, err := netip.ParsePrefix(a.String()); err == nil {
				onIf = append(onIf, p.Addr().Unmap())
				has = has || p.Addr().Unmap() == src || p.Contains(src)
			}
		}
		if !has {
			continue
		}
		for _, d := range deviceList() {
			for _, a := range onIf {
				if d.addr == a {
					return d
				}
			}
			// Loopback: every 127.0.0.0/8 address is on lo, listed or not.
			if d.addr.IsLoopback() && src.IsLoopback() {
				return d
			}
		}
	}
	return deviceOf(dst)
}

// gr_cm_resolve_addr is rdma_resolve_addr: it finds the device that reaches
// dst (from src when given) and reports ADDR_RESOLVED, or ADDR_ERROR when no
// goroce device does.
//
//export gr_cm_resolve_addr
func gr_cm_resolve_addr(h C.uintptr_t, src, dst *C.struct_sockaddr, timeoutMS C.int) C.int {
	id := object[*cmID](h)
	if id == nil {
		return C.EINVAL
	}
	remote, ok := sockaddrAddr(dst)
	if !ok {
		return C.EAFNOSUPPORT
	}
	if s, ok := sockaddrAddr(src); ok {
		if rc := gr_cm_bind_addr(h, src); rc != 0 && rc != C.EINVAL {
			return rc
		}
		_ = s
	}
	go func() {
		id.mu.Lock()
		dev, local := id.dev, id.local
		id.mu.Unlock()
		if dev == nil {
			dev = routeDevice(remote.Addr())
		}
		if dev == nil || dev.open() == nil {
			// No device reaches dst, or the one that does could not be
			// opened (its address is another process's).
			id.push(evAddrError, -C.EHOSTUNREACH, nil)
			return
		}
		id.mu.Lock()
		id.dev, id.remote = dev, remote
		if !local.IsValid() || local.Addr().IsUnspecified() {
			id.local = netip.AddrPortFrom(dev.addr, local.Port())
		}
		id.mu.Unlock()
		id.push(evAddrResolved, 0, nil)
	}()
	return 0
}

// gr_cm_resolve_route is rdma_resolve_route: RoCE needs no path query, the
// route is the resolved address.
//
//export gr_cm_resolve_route
func gr_cm_resolve_route(h C.uintptr_t, timeoutMS C.int) C.int {
	id := object[*cmID](h)
	if id == nil {
		return C.EINVAL
	}
	id.mu.Lock()
	ok := id.dev != nil && id.remote.IsValid()
	id.mu.Unlock()
	if !ok {
		return C.EINVAL
	}
	go id.push(evRouteResolved, 0, nil)
	return 0
}

// gr_cm_query is what the C half shows in the rdma_cm_id: the device, the
// addresses and GIDs, and the path MTU.
//
//export gr_cm_query
func gr_cm_query(h C.uintptr_t, q *C.struct_gr_cm_query) C.int {
	id := object[*cmID](h)
	if id == nil {
		return C.EINVAL
	}
	id.mu.Lock()
	dev, local, remote := id.dev, id.local, id.remote
	id.mu.Unlock()
	*q = C.struct_gr_cm_query{dev_index: -1}
	putSockaddr(&q.src, local)
	putSockaddr(&q.dst, remote)
	if remote.IsValid() {
		*(*[16]byte)(unsafe.Pointer(&q.dgid)) = roce.GIDFromAddr(remote.Addr())
	}
	if dev == nil {
		return 0
	}
	q.dev_index = C.int(dev.index)
	*(*[16]byte)(unsafe.Pointer(&q.sgid)) = roce.GIDFromAddr(dev.addr)
	if d := dev.open(); d != nil {
		if p, err := d.QueryPort(1); err == nil {
			q.mtu = C.uint8_t(p.ActiveMTU)
		}
	}
	return 0
}

// manager is the CM of the device, started by its first use.
func (d *device) manager() (*cm.Manager, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.dev == nil {
		return nil, syscall.ENODEV
	}
	if d.mgr == nil {
		mtu := uint8(roce.MTU1024)
		if p, err := d.dev.QueryPort(1); err == nil {
			mtu = uint8(p.ActiveMTU)
		}
		events := make(chan cm.ConnEvent, 256)
		cfg := cm.ManagerConfig{CAGUID: gsi.CAGUID(d.dev), PathMTU: mtu, Events: events}
		if n, err := strconv.Atoi(os.Getenv(cmRetriesEnv)); err == nil && n >= 0 && n < 16 {
			cfg.MaxCMRetries = uint8(n)
		}
		d.mgr = cm.NewManager(d.gsi, cfg)
		go d.timewaits(d.mgr, events)
	}
	return d.mgr, nil
}

// timewaits reports TIMEWAIT_EXIT to the id whose connection's communication ID
// the CM released, as the kernel's rdma_cm does (an id destroyed before then
// gets none), until the CM closes.
func (d *device) timewaits(mg *cm.Manager, events <-chan cm.ConnEvent) {
	for ev := range events {
		if ev.Type != cm.TimeWaitExit {
			continue
		}
		d.mu.Lock()
		id := d.waiting[ev.ID]
		delete(d.waiting, ev.ID)
		d.mu.Unlock()
		if id != nil && id.ctx.Err() == nil {
			id.push(evTimewaitExit, 0, nil)
		}
		if d.open() == nil {
			return
		}
	}
}

// open is the device's roce.Device when a context has it open.
func (d *device) open() *roce.Device {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.dev
}

// gr_cm_listen is rdma_listen: requests to the id's port (on its device, or
// every device for an unspecified address) become CONNECT_REQUEST events with
// a new id each.
//
//export gr_cm_listen
func gr_cm_listen(h C.uintptr_t, backlog C.int) C.int {
	id := object[*cmID](h)
	if id == nil {
		return C.EINVAL
	}
	id.mu.Lock()
	dev, local := id.dev, id.local
	id.mu.Unlock()
	if !local.IsValid() {
		return C.EINVAL // rdma_listen needs rdma_bind_addr first
	}
	devs := deviceList()
	if dev != nil {
		devs = []*device{dev}
	}
	var opened []*device
	for _, d := range devs {
		if d.open() != nil {
			opened = append(opened, d)
		}
	}
	if len(opened) == 0 {
		return C.ENODEV
	}
	for _, d := range opened {
		mg, err := d.manager()
		if err != nil {
			return errno(err)
		}
		addr := netip.AddrPortFrom(d.addr, local.Port())
		if id.ps == cm.PortSpaceUDP {
			l, err := mg.ListenUD(addr, int(backlog))
			if err != nil {
				return errno(err)
			}
			id.mu.Lock()
			id.udListen = append(id.udListen, l)
			id.mu.Unlock()
			go id.serveUD(d, l)
			continue
		}
		l, err := mg.Listen(addr, int(backlog))
		if err != nil {
			return errno(err)
		}
		id.mu.Lock()
		id.listeners = append(id.listeners, l)
		id.mu.Unlock()
		go id.serve(d, l)
	}
	return 0
}

// serve turns l's requests into CONNECT_REQUEST events until the id ends.
func (id *cmID) serve(d *device, l *cm.Listener) {
	for {
		r, err := l.GetRequest(id.ctx)
		if err != nil {
			return
		}
		c, ch := id.newChild(d, r.Local, r.Remote)
		c.mu.Lock()
		c.req, c.reqParam = r, r.REQ()
		c.mu.Unlock()
		q := r.REQ()
		queued := id.push(evConnectRequest, 0, func(e *C.struct_gr_cm_event) {
			e.listen_id, e.child_h = e.id, ch
			e.id = 0
			// From the listener's side, as the kernel's rdma_cm reports them:
			// what the peer issues is what we answer, and the other way round.
			e.responder_resources = C.uint8_t(q.InitiatorDepth)
			e.initiator_depth = C.uint8_t(q.ResponderResources)
			e.retry_count = C.uint8_t(q.RetryCount)
			e.rnr_retry_count = C.uint8_t(q.RNRRetryCount)
			e.qp_num = C.uint32_t(q.LocalQPN)
			if q.SRQ {
				e.srq = 1
			}
			if q.EndToEndFlowControl {
				e.flow_control = 1
			}
			putPrivate(e, r.PrivateData, privREQ)
		})
		if !queued {
			gr_cm_destroy_id(ch) // the listener was destroyed: reject
		}
	}
}

// serveUD turns l's SIDR requests into CONNECT_REQUEST events.
func (id *cmID) serveUD(d *device, l *cm.UDListener) {
	for {
		r, err := l.GetRequest(id.ctx)
		if err != nil {
			return
		}
		c, ch := id.newChild(d, r.Local, r.Remote)
		c.mu.Lock()
		c.udReq = r
		c.mu.Unlock()
		queued := id.push(evConnectRequest, 0, func(e *C.struct_gr_cm_event) {
			e.listen_id, e.child_h = e.id, ch
			e.id = 0
			putPrivate(e, r.PrivateData, privSIDRRQ)
		})
		if !queued {
			gr_cm_destroy_id(ch)
		}
	}
}

// connParam reads struct gr_conn_param into what the CM offers.
func connParam(p *C.struct_gr_conn_param) cm.ConnParam {
	return cm.ConnParam{
		QPN:                uint32(p.qp_num),
		StartingPSN:        cm.RandomPSN(),
		ResponderResources: uint8(p.responder_resources),
		InitiatorDepth:     uint8(p.initiator_depth),
		RetryCount:         uint8(p.retry_count) & 7,
		RNRRetryCount:      uint8(p.rnr_retry_count) & 7,
		PrivateData:        C.GoBytes(unsafe.Pointer(&p.private_data[0]), C.int(p.private_data_len)),
	}
}

// gr_cm_connect is rdma_connect: REQ (or SIDR_REQ on a UDP id) to the resolved
// address. The REP comes back as CONNECT_RESPONSE, which the C half answers by
// moving its QP and calling gr_cm_establish (or leaves to the program, which
// calls rdma_establish); a REJ comes as REJECTED, no answer as UNREACHABLE.
//
//export gr_cm_connect
func gr_cm_connect(h C.uintptr_t, p *C.struct_gr_conn_param) C.int {
	id := object[*cmID](h)
	if id == nil {
		return C.EINVAL
	}
	id.mu.Lock()
	dev, local, remote := id.dev, id.local, id.remote
	id.mu.Unlock()
	if dev == nil || !remote.IsValid() {
		return C.EINVAL
	}
	mg, err := dev.manager()
	if err != nil {
		return errno(err)
	}
	param := connParam(p)
	if id.ps == cm.PortSpaceUDP {
		go id.resolveUD(mg, local, remote, param.PrivateData)
		return 0
	}
	rtu, dialed := make(chan error, 1), make(chan error, 1)
	id.mu.Lock()
	id.rtu, id.dialed = rtu, dialed
	id.mu.Unlock()
	param.Ready = func(q cm.QPParams) error {
		id.mu.Lock()
		id.params, id.haveParam = q, true
		id.mu.Unlock()
		id.push(evConnectResponse, 0, nil)
		select {
		case err := <-rtu:
			return err
		case <-id.ctx.Done():
			return id.ctx.Err()
		}
	}
	go func() {
		conn, err := mg.Dial(id.ctx, local, remote, param)
		if err != nil {
			dialed <- err
			id.failConnect(err)
			return
		}
		id.mu.Lock()
		id.conn, id.local = conn, conn.LocalAddr
		id.mu.Unlock()
		// ESTABLISHED is librdmacm's to report: it turns the CONNECT_RESPONSE
		// into one once it has moved the QP (or the program calls
		// rdma_establish).
		dialed <- nil
		id.watch(conn)
	}()
	return 0
}

// failConnect reports why a connection was not made: REJECTED with the REJ's
// reason and private data, UNREACHABLE when the peer never answered,
// CONNECT_ERROR otherwise.
func (id *cmID) failConnect(err error) {
	if debug {
		fmt.Fprintf(os.Stderr, "goroce: rdma_cm connection failed: %v\n", err)
	}
	if id.ctx.Err() != nil {
		return // destroyed meanwhile
	}
	var rej *cm.RejectError
	switch {
	case errors.As(err, &rej):
		id.push(evRejected, C.int(rej.Reason), func(e *C.struct_gr_cm_event) { putPrivate(e, rej.PrivateData, privREJ) })
	case errors.Is(err, cm.ErrTimeout):
		id.push(evUnreachable, -C.ETIMEDOUT, nil)
	default:
		id.push(evConnectError, -errno(err), nil)
	}
}

// watch reports DISCONNECTED when the connection ends, and lets the device
// report TIMEWAIT_EXIT when the CM releases it.
func (id *cmID) watch(conn *cm.Conn) {
	id.mu.Lock()
	d := id.dev
	id.mu.Unlock()
	d.mu.Lock()
	if d.waiting == nil {
		d.waiting = map[uint32]*cmID{}
	}
	d.waiting[conn.ID()] = id
	d.mu.Unlock()
	select {
	case <-conn.Done():
	case <-id.ctx.Done():
		return
	}
	id.push(evDisconnected, 0, nil)
}

// resolveUD is rdma_connect on a UDP id: SIDR_REQ, then ESTABLISHED with the
// remote QP, its Q_Key and an address vector to it.
func (id *cmID) resolveUD(mg *cm.Manager, local, remote netip.AddrPort, priv []byte) {
	svc, err := mg.ResolveUD(id.ctx, local, remote, priv)
	if err != nil {
		var se *cm.SIDRError
		if errors.As(err, &se) {
			id.push(evRejected, C.int(se.Status), nil)
			return
		}
		id.failConnect(err)
		return
	}
	id.push(evEstablished, 0, func(e *C.struct_gr_cm_event) {
		e.ud_qp_num, e.qkey = C.uint32_t(svc.QPN), C.uint32_t(svc.QKey)
		id.putAH(e, remote.Addr())
		putPrivate(e, svc.PrivateData, privSIDRRP)
	})
}

// putAH fills the event's address vector to remote, from the id's device.
func (id *cmID) putAH(e *C.struct_gr_cm_event, remote netip.Addr) {
	id.mu.Lock()
	dev, tos := id.dev, id.tos
	id.mu.Unlock()
	gidx := 1
	if d := dev.open(); d != nil {
		gidx = d.GIDIndex()
	}
	putAV(&e.ah_attr, roce.AddressVector{DGID: netip.AddrFrom16(roce.GIDFromAddr(remote)), SGIDIndex: uint8(gidx),
		HopLimit: mcast.HopLimit, TrafficClass: tos, IsGlobal: true})
	e.has_ah = 1
}

// gr_cm_establish is rdma_establish, or librdmacm's own answer to a
// CONNECT_RESPONSE once it moved the QP: RTU (status 0), or REJ.
//
//export gr_cm_establish
func gr_cm_establish(h C.uintptr_t, status C.int) C.int {
	id := object[*cmID](h)
	if id == nil {
		return C.EINVAL
	}
	id.mu.Lock()
	rtu, dialed := id.rtu, id.dialed
	id.rtu = nil
	id.mu.Unlock()
	if rtu == nil {
		return C.EINVAL
	}
	if status != 0 {
		rtu <- syscall.Errno(status)
		return 0
	}
	rtu <- nil
	// Return once the RTU is out and the connection recorded, so that a
	// disconnect right after finds it.
	select {
	case err := <-dialed:
		return errno(err)
	case <-id.ctx.Done():
		return C.ENODEV
	}
}

// gr_cm_accept is rdma_accept: REP (SIDR_REP on a UDP id) with p. It returns
// once the REP is on its way; the RTU comes as ESTABLISHED.
//
//export gr_cm_accept
func gr_cm_accept(h C.uintptr_t, p *C.struct_gr_conn_param) C.int {
	id := object[*cmID](h)
	if id == nil {
		return C.EINVAL
	}
	id.mu.Lock()
	req, udReq, psn := id.req, id.udReq, id.psn
	id.req, id.udReq = nil, nil
	id.mu.Unlock()
	if udReq != nil {
		err := udReq.Accept(uint32(p.qp_num), uint32(p.qkey),
			C.GoBytes(unsafe.Pointer(&p.private_data[0]), C.int(p.private_data_len)))
		return errno(err)
	}
	if req == nil {
		return C.EINVAL
	}
	param := connParam(p)
	if psn != 0 {
		param.StartingPSN = psn // the one the QP was moved with
	}
	sent := make(chan struct{})
	param.Ready = func(q cm.QPParams) error {
		id.mu.Lock()
		id.params, id.haveParam = q, true
		id.mu.Unlock()
		close(sent)
		return nil
	}
	done := make(chan error, 1)
	go func() {
		conn, err := req.Accept(id.ctx, param)
		done <- err
		if err != nil {
			id.failConnect(err)
			return
		}
		id.mu.Lock()
		id.conn = conn
		id.mu.Unlock()
		id.push(evEstablished, 0, nil)
		id.watch(conn)
	}()
	select {
	case <-sent:
		return 0
	case err := <-done:
		return errno(err)
	}
}

//export gr_cm_reject
func gr_cm_reject(h C.uintptr_t, pd unsafe.Pointer, n C.uint8_t) C.int {
	id := object[*cmID](h)
	if id == nil {
		return C.EINVAL
	}
	id.mu.Lock()
	req, udReq := id.req, id.udReq
	id.req, id.udReq = nil, nil
	id.mu.Unlock()
	priv := C.GoBytes(pd, C.int(n))
	switch {
	case req != nil:
		return errno(req.Reject(priv))
	case udReq != nil:
		return errno(udReq.Reject(priv))
	}
	return C.EINVAL
}

// gr_cm_disconnect is rdma_disconnect: DREQ; DISCONNECTED follows when the
// peer answers or the CM gives up.
//
//export gr_cm_disconnect
func gr_cm_disconnect(h C.uintptr_t) C.int {
	id := object[*cmID](h)
	if id == nil {
		return C.EINVAL
	}
	id.mu.Lock()
	conn := id.conn
	id.mu.Unlock()
	if conn == nil {
		return C.EINVAL
	}
	go func() {
		ctx, cancel := context.WithTimeout(id.ctx, 30*time.Second)
		defer cancel()
		conn.Disconnect(ctx)
	}()
	return 0
}

// gr_cm_init_qp_attr is rdma_init_qp_attr: the attributes of the QP's move to
// a->qp_state, from the negotiated connection (or, before accept, from the
// request), as the kernel's rdma_cm fills them.
//
//export gr_cm_init_qp_attr
func gr_cm_init_qp_attr(h C.uintptr_t, a *C.struct_ibv_qp_attr, mask *C.int, resp, init C.uint8_t) C.int {
	id := object[*cmID](h)
	if id == nil {
		return C.EINVAL
	}
	id.mu.Lock()
	dev, p, have, req := id.dev, id.params, id.haveParam, id.req
	id.mu.Unlock()
	gidx := 1
	if d := dev.open(); d != nil {
		gidx = d.GIDIndex()
	}
	switch a.qp_state {
	case C.IBV_QPS_INIT:
		a.pkey_index, a.port_num = 0, 1
		if id.ps == cm.PortSpaceUDP {
			a.qkey = cm.UDPQKey
			*mask = C.IBV_QP_STATE | C.IBV_QP_PKEY_INDEX | C.IBV_QP_PORT | C.IBV_QP_QKEY
			return 0
		}
		// Before a connection exists the kernel's rdma_cm grants nothing
		// (cma_ib_init_qp_attr); once it does, its CM grants remote write,
		// and read and atomics when the QP answers READs
		// (cm_init_qp_init_attr). librdmacm moves INIT to INIT with these
		// before RTR.
		a.qp_access_flags = 0
		if have || req != nil {
			a.qp_access_flags = C.IBV_ACCESS_REMOTE_WRITE
			if resp > 0 {
				a.qp_access_flags |= C.IBV_ACCESS_REMOTE_READ | C.IBV_ACCESS_REMOTE_ATOMIC
			}
		}
		*mask = C.IBV_QP_STATE | C.IBV_QP_PKEY_INDEX | C.IBV_QP_PORT | C.IBV_QP_ACCESS_FLAGS
		return 0
	case C.IBV_QPS_RTR, C.IBV_QPS_RTS:
	default:
		return C.EINVAL
	}
	if id.ps == cm.PortSpaceUDP {
		*mask = C.IBV_QP_STATE
		if a.qp_state == C.IBV_QPS_RTS {
			a.sq_psn = 0
			*mask |= C.IBV_QP_SQ_PSN
		}
		return 0
	}
	if !have {
		if req == nil {
			return C.EINVAL // no connection negotiated yet
		}
		// Before accept: what Accept will negotiate, with the PSN it will
		// then advertise.
		psn := cm.RandomPSN()
		p = req.QPParams(cm.ConnParam{ResponderResources: uint8(resp), InitiatorDepth: uint8(init), StartingPSN: psn,
			RetryCount: 7, RNRRetryCount: 7})
		id.mu.Lock()
		id.params, id.haveParam, id.psn = p, true, psn
		id.mu.Unlock()
	}
	c := gsi.ConnectAttr(p, gidx, 0)
	if a.qp_state == C.IBV_QPS_RTR {
		putAV(&a.ah_attr, c.AV)
		a.path_mtu = uint32(c.PathMTU)
		a.dest_qp_num = C.uint32_t(c.DestQPN)
		a.rq_psn = C.uint32_t(c.RQPSN)
		a.max_dest_rd_atomic = C.uint8_t(c.MaxDestRDAtomic)
		a.min_rnr_timer = C.uint8_t(c.MinRNRTimer)
		*mask = C.IBV_QP_STATE | C.IBV_QP_AV | C.IBV_QP_PATH_MTU | C.IBV_QP_DEST_QPN | C.IBV_QP_RQ_PSN |
			C.IBV_QP_MAX_DEST_RD_ATOMIC | C.IBV_QP_MIN_RNR_TIMER
		return 0
	}
	a.sq_psn = C.uint32_t(c.SQPSN)
	a.timeout = C.uint8_t(c.Timeout)
	a.retry_cnt = C.uint8_t(c.RetryCnt)
	a.rnr_retry = C.uint8_t(c.RNRRetry)
	a.max_rd_atomic = C.uint8_t(c.MaxRDAtomic)
	*mask = C.IBV_QP_STATE | C.IBV_QP_SQ_PSN | C.IBV_QP_TIMEOUT | C.IBV_QP_RETRY_CNT | C.IBV_QP_RNR_RETRY |
		C.IBV_QP_MAX_QP_RD_ATOMIC
	return 0
}

// gr_cm_set_tos is rdma_set_option(RDMA_OPTION_ID_TOS): the traffic class of
// the id's address vectors.
//
//export gr_cm_set_tos
func gr_cm_set_tos(h C.uintptr_t, tos C.uint8_t) C.int {
	id := object[*cmID](h)
	if id == nil {
		return C.EINVAL
	}
	id.mu.Lock()
	id.tos = uint8(tos)
	id.mu.Unlock()
	return 0
}

// gr_cm_join_multicast is rdma_join_multicast_ex (flags: enum
// rdma_cm_mc_join_flags) for the UD QP qpH of the id:
// MULTICAST_JOIN at once (RoCE has no subnet administrator to ask), carrying
// the user's context.
//
//export gr_cm_join_multicast
func gr_cm_join_multicast(h, qpH C.uintptr_t, sa *C.struct_sockaddr, flags C.int, context C.uintptr_t) C.int {
	id := object[*cmID](h)
	if id == nil {
		return C.EINVAL
	}
	group, ok := sockaddrAddr(sa)
	if !ok || !group.Addr().IsMulticast() {
		return C.EINVAL
	}
	q := object[*qp](qpH)
	if q == nil {
		return C.EINVAL // librdmacm attaches the id's QP: create it first
	}
	m, err := mcast.Join(q.qp, group.Addr(), mcast.JoinFlags(flags))
	if err != nil {
		return errno(err)
	}
	id.mu.Lock()
	if id.joins == nil {
		id.joins = map[netip.Addr]*mcast.Membership{}
	}
	id.joins[group.Addr()] = m
	id.mu.Unlock()
	go id.push(evMulticastJoin, 0, func(e *C.struct_gr_cm_event) {
		e.ud_qp_num, e.qkey = C.uint32_t(m.RemoteQPN()), C.uint32_t(m.QKey())
		putAV(&e.ah_attr, m.AHAttr())
		e.has_ah = 1
		e.mc_context = context
	})
	return 0
}

//export gr_cm_leave_multicast
func gr_cm_leave_multicast(h C.uintptr_t, sa *C.struct_sockaddr) C.int {
	id := object[*cmID](h)
	if id == nil {
		return C.EINVAL
	}
	group, ok := sockaddrAddr(sa)
	if !ok {
		return C.EINVAL
	}
	id.mu.Lock()
	m := id.joins[group.Addr()]
	delete(id.joins, group.Addr())
	id.mu.Unlock()
	if m == nil {
		return C.EADDRNOTAVAIL
	}
	return errno(m.Leave())
}

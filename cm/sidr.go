package cm

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"net"
	"net/netip"
	"time"
)

// UDService is what SIDR resolves: the UD QP serving a port and its Q_Key
// (rdma_cm's RDMA_CM_EVENT_ESTABLISHED for RDMA_PS_UDP, param.ud).
type UDService struct {
	QPN         uint32
	QKey        uint32
	PrivateData []byte // the SIDR_REP's private data (136 bytes)
}

// ErrSIDRStatus reports a SIDR_REP whose status is not success.
var ErrSIDRStatus = errors.New("cm: SIDR request refused")

// SIDRError carries a refused SIDR_REP's status; errors.Is(err,
// ErrSIDRStatus) and errors.Is(err, syscall.ECONNREFUSED) hold.
type SIDRError struct{ Status SIDRStatus }

// Error formats as "cm: SIDR request refused: status 1".
func (e *SIDRError) Error() string {
	return fmt.Sprintf("cm: SIDR request refused: status %d", e.Status)
}

// Is matches ErrSIDRStatus and ErrRejected.
func (e *SIDRError) Is(target error) bool { return target == ErrSIDRStatus || target == ErrRejected }

// Unwrap returns the errno of ErrRejected.
func (e *SIDRError) Unwrap() error { return errors.Unwrap(ErrRejected) }

// ResolveUD asks the CM at remote for the UD QP serving remote's port in the
// UDP port space (rdma_cm RDMA_PS_UDP: rdma_resolve_route + rdma_connect,
// which send SIDR_REQ with the rdma_cm header). The request is resent every
// CM response timeout (≈4 s by default), MaxCMRetries times.
func (mg *Manager) ResolveUD(ctx context.Context, local, remote netip.AddrPort, privateData []byte) (UDService, error) {
	la := local.Addr().Unmap()
	if !la.IsValid() || la.IsUnspecified() {
		la = mg.addr
	}
	lport := local.Port()
	if lport == 0 {
		lport = uint16(32768 + rand.IntN(61000-32768))
	}
	ra := remote.Addr().Unmap()
	priv, err := AppendCMA(nil, CMAHeader{SrcPort: lport, Src: la, Dst: ra}, privateData)
	if err != nil {
		return UDService{}, fmt.Errorf("cm: resolve %v: %w", remote, err)
	}
	if len(priv) > SIDRREQPrivateDataLen {
		return UDService{}, fmt.Errorf("cm: resolve %v: %w", remote, ErrPrivateDataTooLong)
	}
	h := &handle{local: netip.AddrPortFrom(la, lport), remote: netip.AddrPortFrom(ra, remote.Port()), ev: make(chan Event, 4)}
	mg.mu.Lock()
	if mg.closed {
		mg.mu.Unlock()
		return UDService{}, net.ErrClosed
	}
	h.id, err = mg.m.ResolveService(time.Now(), ra, SIDRREQ{PKey: GSIPKey, ServiceID: ServiceID(PortSpaceUDP, remote.Port()),
		PrivateData: priv}, TimeoutDuration(mg.cfg.CMResponseTimeout), int(mg.cfg.MaxCMRetries))
	if err == nil {
		mg.handles[h.id] = h
		mg.flushLocked()
	}
	mg.mu.Unlock()
	if err != nil {
		return UDService{}, fmt.Errorf("cm: resolve %v: %w", remote, err)
	}
	select {
	case ev := <-h.ev:
		if ev.Type == EventSIDRReply {
			r := ev.SIDRREP
			if r.Status != SIDRSuccess {
				return UDService{}, fmt.Errorf("cm: resolve %v: %w", remote, &SIDRError{r.Status})
			}
			return UDService{QPN: r.QPN, QKey: r.QKey, PrivateData: r.PrivateData}, nil
		}
		return UDService{}, fmt.Errorf("cm: resolve %v: %w", remote, ev.Err)
	case <-mg.readDone:
		return UDService{}, net.ErrClosed
	case <-ctx.Done():
		mg.mu.Lock()
		delete(mg.handles, h.id)
		mg.mu.Unlock()
		return UDService{}, ctx.Err()
	}
}

// UDListener receives SIDR requests for one port of the UDP port space.
type UDListener struct {
	requestQueue[*UDRequest]
}

// ListenUD accepts SIDR requests to addr's port in the UDP port space
// (rdma_listen on an RDMA_PS_UDP id). An unspecified address matches any.
// backlog is Listen's; a SIDR request beyond it is refused (SIDR_REP "no
// QP"), as cm.c rejects a SIDR request its consumer cannot take.
func (mg *Manager) ListenUD(addr netip.AddrPort, backlog int) (*UDListener, error) {
	mg.mu.Lock()
	defer mg.mu.Unlock()
	l := &UDListener{}
	if err := l.listenLocked(mg, addr, PortSpaceUDP, backlog); err != nil {
		return nil, err
	}
	mg.udListen[l.serviceID] = l
	return l, nil
}

// GetRequest waits for the next SIDR request.
func (l *UDListener) GetRequest(ctx context.Context) (*UDRequest, error) { return l.get(ctx) }

// Close stops listening; pending requests are refused.
func (l *UDListener) Close() error {
	l.mg.mu.Lock()
	defer l.mg.mu.Unlock()
	l.closeLocked()
	return nil
}

func (l *UDListener) closeLocked() {
	l.requestQueue.closeLocked(func() { l.mg.m.Unlisten(l.serviceID); delete(l.mg.udListen, l.serviceID) },
		func(now time.Time, r *UDRequest) { l.mg.m.SIDRReply(now, r.id, SIDRREP{Status: SIDRReject}) })
}

// UDRequest is a received SIDR_REQ waiting for Accept or Reject.
type UDRequest struct {
	Local, Remote netip.AddrPort
	PrivateData   []byte // the application's part, after the rdma_cm header

	mg *Manager
	id uint32
}

// Accept answers with the UD QP serving the port (rdma_accept on a UDP id
// sends SIDR_REP status success with the QPN and Q_Key; rdma_cm uses
// UDPQKey).
func (r *UDRequest) Accept(qpn, qkey uint32, privateData []byte) error {
	return r.reply(SIDRREP{Status: SIDRSuccess, QPN: qpn, QKey: qkey, PrivateData: privateData})
}

// Reject refuses the request (SIDR_REP status reject).
func (r *UDRequest) Reject(privateData []byte) error {
	return r.reply(SIDRREP{Status: SIDRReject, PrivateData: privateData})
}

func (r *UDRequest) reply(rep SIDRREP) error {
	r.mg.mu.Lock()
	defer r.mg.mu.Unlock()
	if r.mg.closed {
		return net.ErrClosed
	}
	err := r.mg.m.SIDRReply(time.Now(), r.id, rep)
	r.mg.flushLocked()
	return err
}

func (mg *Manager) onSIDRRequestLocked(ev Event) {
	now := time.Now()
	req := ev.SIDRREQ
	l := mg.udListen[req.ServiceID]
	ch, user, err := ParseCMA(req.PrivateData)
	if l == nil || err != nil || (l.addr.Addr().IsValid() && !l.addr.Addr().IsUnspecified() && ch.Dst != l.addr.Addr()) {
		mg.m.SIDRReply(now, ev.ID, SIDRREP{Status: SIDRUnsupported})
		return
	}
	_, port, _ := SplitServiceID(req.ServiceID)
	r := &UDRequest{Local: netip.AddrPortFrom(ch.Dst, port), Remote: netip.AddrPortFrom(ch.Src, ch.SrcPort),
		PrivateData: append([]byte(nil), user...), mg: mg, id: ev.ID}
	select {
	case l.reqs <- r:
	default:
		mg.m.SIDRReply(now, ev.ID, SIDRREP{Status: SIDRNoQP}) // backlog full
	}
}

package verbsprobe

import (
	"context"
	"fmt"

	"github.com/goroce/goroce/roce"
)

// The memory window and invalidation tests, as verbs-probe.c runs them: the server binds
// a window (or offers an MR) at TargetOff, the client WRITEs and READs through it, and
// the server checks what landed; the last operation of each test is refused, which
// leaves both QPs in the error state.

// mwAccess is what every window grants; the MR under it needs AccessMWBind and, for a
// writable window, local write (C10-74).
const (
	mwAccess   = roce.AccessRemoteWrite | roce.AccessRemoteRead
	mrMWAccess = roce.AccessLocalWrite | roce.AccessMWBind
)

// target is where the server lets the client in.
type target struct {
	addr uint64
	rkey uint32
	len  uint64
}

func (p *Peer) sendTarget(ctx context.Context, rkey uint32) error {
	return p.conn.Send(ctx, "target", "addr", p.Addr(TargetOff), "rkey", rkey, "len", TargetLen)
}

func (p *Peer) recvTarget(ctx context.Context) (target, error) {
	m, err := p.conn.Recv(ctx, "target")
	if err != nil {
		return target{}, err
	}
	addr, err1 := m.Uint("addr")
	rkey, err2 := m.Uint("rkey")
	n, err3 := m.Uint("len")
	for _, err := range []error{err1, err2, err3} {
		if err != nil {
			return target{}, err
		}
	}
	return target{addr, uint32(rkey), n}, nil
}

// okLine sends verb ok=1|0 and turns a 0 into an error saying why.
func (p *Peer) okLine(ctx context.Context, verb string, ok bool, why string) error {
	if err := p.conn.Send(ctx, verb, "ok", ok); err != nil {
		return err
	}
	if !ok {
		return fmt.Errorf("%s", why)
	}
	return nil
}

// recvOK reads verb and requires ok=1.
func (p *Peer) recvOK(ctx context.Context, verb, why string) error {
	m, err := p.conn.Recv(ctx, verb)
	if err != nil {
		return err
	}
	if ok, err := m.Uint("ok"); err != nil || ok != 1 {
		return fmt.Errorf("the server: %s", why)
	}
	return nil
}

// serveWrite answers a "wrote" step: the client's pattern must be at TargetOff and
// nothing else may have changed.
func (p *Peer) serveWrite(ctx context.Context) error {
	m, err := p.conn.Recv(ctx, "wrote")
	if err != nil {
		return err
	}
	n, err1 := m.Uint("len")
	seed, err2 := m.Uint("seed")
	if err1 != nil || err2 != nil {
		return fmt.Errorf("%w: %q", ErrLine, m)
	}
	ok := n <= TargetLen && p.Holds(TargetOff, int(n), uint(seed)) && p.GuardsIntact()
	return p.okLine(ctx, "verified", ok, "the WRITE did not land where it should")
}

// serveRefused answers the last step: the refused operation changed nothing, so
// TargetOff still holds n bytes of pattern seed.
func (p *Peer) serveRefused(ctx context.Context, seed uint, n int) (string, error) {
	m, err := p.conn.Recv(ctx, "refused")
	if err != nil {
		return "", err
	}
	status, _ := m.Get("status")
	ok := p.Holds(TargetOff, n, seed) && p.GuardsIntact()
	return "client's refused operation: " + status, p.okLine(ctx, "result", ok, "a refused operation changed the memory")
}

// writeAndRead WRITEs n bytes of pattern seed through t, READs them back, and has the
// server check them.
func (p *Peer) writeAndRead(ctx context.Context, t target, n int, seed uint) error {
	p.Fill(0, n, seed)
	if st, err := p.RDMA(ctx, roce.WRRDMAWrite, 0, n, t.addr, t.rkey); err != nil || st != roce.WCSuccess {
		return fmt.Errorf("WRITE through rkey %#x: %v %v", t.rkey, StatusName(st), err)
	}
	const back = 4096
	clear(p.Mem[back : back+n])
	if st, err := p.RDMA(ctx, roce.WRRDMARead, back, n, t.addr, t.rkey); err != nil || st != roce.WCSuccess {
		return fmt.Errorf("READ through rkey %#x: %v %v", t.rkey, StatusName(st), err)
	}
	if !p.Holds(back, n, seed) {
		return fmt.Errorf("READ through rkey %#x returned other bytes than were written", t.rkey)
	}
	if err := p.conn.Send(ctx, "wrote", "len", n, "seed", int(seed)); err != nil {
		return err
	}
	return p.recvOK(ctx, "verified", fmt.Sprintf("did not find the WRITE through rkey %#x", t.rkey))
}

// refused WRITEs pattern seed through t, requires a remote access error, and has the
// server confirm its memory did not change.
func (p *Peer) refused(ctx context.Context, t target, n int, seed uint, what string) error {
	p.Fill(0, n, seed)
	st, err := p.RDMA(ctx, roce.WRRDMAWrite, 0, n, t.addr, t.rkey)
	if err != nil {
		return err
	}
	if err := p.conn.Send(ctx, "refused", "status", StatusName(st)); err != nil {
		return err
	}
	if st != roce.WCRemAccessErr {
		return fmt.Errorf("%s: completion status %s, want %s", what, StatusName(st), StatusName(roce.WCRemAccessErr))
	}
	return p.recvOK(ctx, "result", "its memory changed by the refused "+what)
}

// rolled checks that a rebind kept the window's index and changed its key byte.
func rolled(old, new uint32) error {
	if old>>8 != new>>8 || old&0xff == new&0xff {
		return fmt.Errorf("rebind gave rkey %#x after %#x: want the same index and another key byte", new, old)
	}
	return nil
}

// bindInfo is the window every test binds: TargetLen bytes at TargetOff.
func (p *Peer) bindInfo() roce.MWBindInfo {
	return roce.MWBindInfo{MR: p.MR, Addr: p.Addr(TargetOff), Length: TargetLen, Access: mwAccess}
}

// bind2 binds type 2 window mw with a BIND_MW work request and returns its new rkey.
func (p *Peer) bind2(ctx context.Context, mw *roce.MW) (uint32, error) {
	wr := roce.SendWR{WRID: 5, Opcode: roce.WRBindMW, BindMW: mw.Bind(p.bindInfo())}
	wc, err := must(p.Post(ctx, wr))
	if err == nil && wc.Opcode != roce.WCBindMW {
		err = fmt.Errorf("BIND_MW completed with opcode %v", wc.Opcode)
	}
	return wr.BindMW.RKey, err
}

// bind1 binds type 1 window mw with ibv_bind_mw and returns its new rkey.
func (p *Peer) bind1(ctx context.Context, mw *roce.MW) (uint32, error) {
	rkey, err := p.QP.BindMW(mw, roce.MWBind{WRID: 6, Flags: roce.SendSignaled, Info: p.bindInfo()})
	if err != nil {
		return 0, err
	}
	wc, err := must(p.Poll(ctx))
	if err == nil && wc.Opcode != roce.WCBindMW {
		err = fmt.Errorf("ibv_bind_mw completed with opcode %v", wc.Opcode)
	}
	return rkey, err
}

// bindMWServer is the server of bind_mw1 and bind_mw2.
func bindMWServer(typ roce.MWType) Role {
	return func(ctx context.Context, p *Peer) (string, error) {
		p.GuardFill()
		if err := p.Reg(mrMWAccess); err != nil {
			return "", err
		}
		mw, err := p.PD.AllocMW(typ)
		if err != nil {
			return "", err
		}
		defer mw.Close()
		bind := p.bind1
		if typ == roce.MWType2 {
			bind = p.bind2
		}
		r1, err := bind(ctx, mw)
		if err != nil {
			return "", err
		}
		if err := p.sendTarget(ctx, r1); err != nil {
			return "", err
		}
		if err := p.serveWrite(ctx); err != nil {
			return "", err
		}
		if typ == roce.MWType2 {
			wc, err := must(p.Post(ctx, roce.SendWR{WRID: 7, Opcode: roce.WRLocalInv, InvRKey: r1}))
			if err == nil && wc.Opcode != roce.WCLocalInv {
				err = fmt.Errorf("LOCAL_INV completed with opcode %v", wc.Opcode)
			}
			if err != nil {
				return "", fmt.Errorf("LOCAL_INV: %w", err)
			}
		}
		r2, err := bind(ctx, mw)
		if err != nil {
			return "", err
		}
		if err := rolled(r1, r2); err != nil {
			return "", err
		}
		if err := p.sendTarget(ctx, r2); err != nil {
			return "", err
		}
		if err := p.serveWrite(ctx); err != nil {
			return "", err
		}
		s, err := p.serveRefused(ctx, 2, 256)
		return fmt.Sprintf("rkeys %#x then %#x, %s", r1, r2, s), err
	}
}

func bindMWClient(ctx context.Context, p *Peer) (string, error) {
	if err := p.Reg(roce.AccessLocalWrite); err != nil {
		return "", err
	}
	t1, err := p.recvTarget(ctx)
	if err != nil {
		return "", err
	}
	if err := p.writeAndRead(ctx, t1, 256, 1); err != nil {
		return "", err
	}
	t2, err := p.recvTarget(ctx)
	if err != nil {
		return "", err
	}
	if err := rolled(t1.rkey, t2.rkey); err != nil {
		return "", err
	}
	if err := p.writeAndRead(ctx, t2, 256, 2); err != nil {
		return "", err
	}
	if err := p.refused(ctx, t1, 256, 3, "WRITE through the rkey of the previous bind"); err != nil {
		return "", err
	}
	return fmt.Sprintf("rkeys %#x then %#x, the old one refused", t1.rkey, t2.rkey), nil
}

func sendInvServer(ctx context.Context, p *Peer) (string, error) {
	p.GuardFill()
	if err := p.Reg(mrMWAccess); err != nil {
		return "", err
	}
	mw, err := p.PD.AllocMW(roce.MWType2)
	if err != nil {
		return "", err
	}
	defer mw.Close()
	r, err := p.bind2(ctx, mw)
	if err != nil {
		return "", err
	}
	if err := p.postRecv(); err != nil {
		return "", err
	}
	if err := p.sendTarget(ctx, r); err != nil {
		return "", err
	}
	if err := p.serveWrite(ctx); err != nil {
		return "", err
	}
	if _, err := p.conn.Recv(ctx, "sent_inv"); err != nil {
		return "", err
	}
	wc, err := must(p.Poll(ctx))
	if err != nil {
		return "", fmt.Errorf("receive of SEND_WITH_INV: %w", err)
	}
	inv := wc.Flags&roce.WCWithInv != 0
	ok := wc.Opcode == roce.WCRecv && inv && wc.InvalidatedRKey == r
	var got uint32
	if inv {
		got = wc.InvalidatedRKey
	}
	if err := p.conn.Send(ctx, "received", "ok", ok, "inv", inv, "rkey", got); err != nil {
		return "", err
	}
	if !ok {
		return "", fmt.Errorf("receive: opcode %v flags %#x invalidated rkey %#x, want a RECV with WCWithInv and %#x",
			wc.Opcode, wc.Flags, wc.InvalidatedRKey, r)
	}
	return p.serveRefused(ctx, 1, 256)
}

// postRecv posts the server's one receive, at RecvOff.
func (p *Peer) postRecv() error {
	_, err := p.QP.PostRecv([]roce.RecvWR{{WRID: 2, SGL: []roce.SGE{{Addr: p.Addr(RecvOff), Length: BufSize - RecvOff, LKey: p.MR.LKey()}}}})
	return err
}

// sendInv posts a SEND_WITH_INV of 16 bytes naming rkey and returns its status.
func (p *Peer) sendInv(ctx context.Context, rkey uint32) (roce.WCStatus, error) {
	wc, err := p.Post(ctx, roce.SendWR{WRID: 8, Opcode: roce.WRSendWithInv, InvRKey: rkey,
		SGL: []roce.SGE{{Addr: p.Addr(0), Length: 16, LKey: p.MR.LKey()}}})
	return wc.Status, err
}

func sendInvClient(ctx context.Context, p *Peer) (string, error) {
	if err := p.Reg(roce.AccessLocalWrite); err != nil {
		return "", err
	}
	t, err := p.recvTarget(ctx)
	if err != nil {
		return "", err
	}
	if err := p.writeAndRead(ctx, t, 256, 1); err != nil {
		return "", err
	}
	st, err := p.sendInv(ctx, t.rkey)
	if err == nil && st != roce.WCSuccess {
		err = fmt.Errorf("SEND_WITH_INV: completion status %s", StatusName(st))
	}
	if err != nil {
		return "", err
	}
	if err := p.conn.Send(ctx, "sent_inv", "rkey", t.rkey); err != nil {
		return "", err
	}
	m, err := p.conn.Recv(ctx, "received")
	if err != nil {
		return "", err
	}
	if ok, err := m.Uint("ok"); err != nil || ok != 1 {
		return "", fmt.Errorf("the server's receive: %s", m)
	}
	if err := p.refused(ctx, t, 256, 2, "WRITE through the invalidated rkey"); err != nil {
		return "", err
	}
	return fmt.Sprintf("rkey %#x invalidated by SEND_WITH_INV", t.rkey), nil
}

func sendInvMRServer(ctx context.Context, p *Peer) (string, error) {
	p.GuardFill()
	if err := p.Reg(roce.AccessLocalWrite | roce.AccessRemoteWrite); err != nil {
		return "", err
	}
	if err := p.postRecv(); err != nil {
		return "", err
	}
	if err := p.sendTarget(ctx, p.MR.RKey()); err != nil {
		return "", err
	}
	m, err := p.conn.Recv(ctx, "sent_inv")
	if err != nil {
		return "", err
	}
	wc, err := p.Poll(ctx)
	if err != nil {
		return "", err
	}
	ok := wc.Status == roce.WCRemInvReqErr
	if err := p.conn.Send(ctx, "result", "ok", ok, "recv", StatusName(wc.Status)); err != nil {
		return "", err
	}
	if !ok {
		return "", fmt.Errorf("the receive of a SEND_WITH_INV naming an MR's rkey completed %s, want %s",
			StatusName(wc.Status), StatusName(roce.WCRemInvReqErr))
	}
	st, _ := m.Get("status")
	return fmt.Sprintf("receive completed %s; the client's SEND: %s", StatusName(wc.Status), st), nil
}

func sendInvMRClient(ctx context.Context, p *Peer) (string, error) {
	if err := p.Reg(roce.AccessLocalWrite); err != nil {
		return "", err
	}
	t, err := p.recvTarget(ctx)
	if err != nil {
		return "", err
	}
	// Whether the requester learns of the refusal is up to the responder: rxe
	// acknowledges the SEND and fails only the receive.
	st, err := p.sendInv(ctx, t.rkey)
	if err != nil {
		return "", err
	}
	if err := p.conn.Send(ctx, "sent_inv", "rkey", t.rkey, "status", StatusName(st)); err != nil {
		return "", err
	}
	m, err := p.conn.Recv(ctx, "result")
	if err != nil {
		return "", err
	}
	recv, _ := m.Get("recv")
	if ok, err := m.Uint("ok"); err != nil || ok != 1 {
		return "", fmt.Errorf("the server received it: %s", recv)
	}
	return fmt.Sprintf("SEND_WITH_INV naming an MR's rkey: the server's receive completed %s (our SEND: %s)", recv, StatusName(st)), nil
}

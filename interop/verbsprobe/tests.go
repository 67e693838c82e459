package verbsprobe

import (
	"context"
	"fmt"
	"net"

	"github.com/goroce/goroce/roce"
)

// Role is one side of a test. It returns what the PASS line says.
type Role func(ctx context.Context, p *Peer) (string, error)

// Test is goroce's half of one verbs-probe test.
type Test struct {
	Server, Client Role
	// Needs names the goroce feature a missing role waits for.
	Needs string
	// QPAccess is what the QP grants, when the test needs more than qpAccess.
	QPAccess roce.Access
}

// Tests are the verbs-probe tests by name (its -t).
var Tests = map[string]Test{
	"atomic":       {Server: atomicServer, Client: atomicClient},
	"send_inv":     {Server: sendInvServer, Client: sendInvClient},
	"send_inv_mr":  {Server: sendInvMRServer, Client: sendInvMRClient},
	"bind_mw1":     {Server: bindMWServer(roce.MWType1), Client: bindMWClient},
	"bind_mw2":     {Server: bindMWServer(roce.MWType2), Client: bindMWClient},
	"flush":        {Server: flushServer, Client: flushClient, QPAccess: flushQPAccess},
	"atomic_write": {Server: atomicWriteServer, Client: atomicWriteClient},
}

// Run plays goroce's side of test over c: the server (the responder) when client is
// false. It returns the PASS summary.
func Run(ctx context.Context, dev *roce.Device, test string, client bool, c net.Conn) (string, error) {
	t, ok := Tests[test]
	if !ok {
		return "", fmt.Errorf("verbsprobe: no test %q", test)
	}
	role := t.Server
	if client {
		role = t.Client
	}
	if role == nil {
		return "", fmt.Errorf("verbsprobe: %s: goroce has no %s yet", test, t.Needs)
	}
	access := t.QPAccess
	if access == 0 {
		access = qpAccess
	}
	p, err := NewPeer(dev, test, access)
	if err != nil {
		return "", err
	}
	defer p.Close()
	if err := p.Connect(ctx, c, client); err != nil {
		return "", err
	}
	return role(ctx, p)
}

// atomicV0 is the word's value before the client's atomics.
const atomicV0 = 0x0102030405060000

func atomicServer(ctx context.Context, p *Peer) (string, error) {
	p.GuardFill()
	p.SetWord(TargetOff, atomicV0)
	if err := p.Reg(roce.AccessLocalWrite | roce.AccessRemoteAtomic | roce.AccessRemoteRead); err != nil {
		return "", err
	}
	if err := p.conn.Send(ctx, "target", "addr", p.Addr(TargetOff), "rkey", p.MR.RKey(), "value", uint64(atomicV0)); err != nil {
		return "", err
	}
	m, err := p.conn.Recv(ctx, "check")
	if err != nil {
		return "", err
	}
	want, err := m.Uint("value")
	if err != nil {
		return "", err
	}
	got := p.Word(TargetOff)
	ok := got == want && p.GuardsIntact()
	if err := p.conn.Send(ctx, "result", "ok", ok, "value", got); err != nil {
		return "", err
	}
	if !ok {
		return "", fmt.Errorf("the word holds %#x, the client expects %#x (bytes around it intact: %v)", got, want, p.GuardsIntact())
	}
	return fmt.Sprintf("value=%#x", got), nil
}

// atomicOps is how many FETCH_AND_ADDs the client makes (verbs-probe's -n default).
const atomicOps = 16

func atomicClient(ctx context.Context, p *Peer) (string, error) {
	if err := p.Reg(roce.AccessLocalWrite); err != nil {
		return "", err
	}
	m, err := p.conn.Recv(ctx, "target")
	if err != nil {
		return "", err
	}
	raddr, err1 := m.Uint("addr")
	rkey, err2 := m.Uint("rkey")
	v, err3 := m.Uint("value")
	for _, err := range []error{err1, err2, err3} {
		if err != nil {
			return "", err
		}
	}
	for i := uint64(1); i <= atomicOps; i++ {
		old, err := p.Atomic(ctx, roce.WRAtomicFetchAndAdd, raddr, uint32(rkey), i, 0)
		if err != nil {
			return "", err
		}
		if old != v {
			return "", fmt.Errorf("FETCH_AND_ADD %d returned %#x, want %#x", i, old, v)
		}
		v += i
	}
	swap := v ^ 0x5a5a5a5a5a5a5a5a
	for _, c := range []struct {
		cmp, swap, after uint64
		what             string
	}{{v, swap, swap, "CMP_AND_SWAP (equal)"}, {swap + 1, 0, swap, "CMP_AND_SWAP (unequal)"}} {
		old, err := p.Atomic(ctx, roce.WRAtomicCmpAndSwp, raddr, uint32(rkey), c.cmp, c.swap)
		if err != nil {
			return "", err
		}
		if old != v {
			return "", fmt.Errorf("%s returned %#x, want %#x", c.what, old, v)
		}
		v = c.after
	}
	const rd = 128
	p.SetWord(rd, 0)
	if _, err := must(p.Post(ctx, roce.SendWR{WRID: 4, Opcode: roce.WRRDMARead, RemoteAddr: raddr, RKey: uint32(rkey),
		SGL: []roce.SGE{{Addr: p.Addr(rd), Length: 8, LKey: p.MR.LKey()}}})); err != nil {
		return "", err
	}
	if got := p.Word(rd); got != v {
		return "", fmt.Errorf("READ after the atomics returned %#x, want %#x", got, v)
	}
	if err := p.conn.Send(ctx, "check", "value", v); err != nil {
		return "", err
	}
	if m, err = p.conn.Recv(ctx, "result"); err != nil {
		return "", err
	}
	if ok, err := m.Uint("ok"); err != nil || ok != 1 {
		got, _ := m.Get("value")
		return "", fmt.Errorf("the server holds %s, want %#x", got, v)
	}
	return fmt.Sprintf("fetch_add=%d cmp_swap=2 read=1 value=%#x", atomicOps, v), nil
}

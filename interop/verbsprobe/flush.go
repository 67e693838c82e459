package verbsprobe

import (
	"context"
	"fmt"

	"github.com/goroce/goroce/roce"
)

// FLUSH and ATOMIC_WRITE (kernel 6.2 and rdma-core 45 on), as verbs-probe.c runs them.

// flushQPAccess is what a QP lets a peer FLUSH: its access check comes before the
// memory's, so the QP grants both placement types and the MR decides.
const flushQPAccess = qpAccess | roce.AccessFlushGlobal | roce.AccessFlushPersistent

func flushServer(ctx context.Context, p *Peer) (string, error) {
	p.GuardFill()
	if err := p.Reg(roce.AccessLocalWrite | roce.AccessRemoteWrite | roce.AccessRemoteRead | roce.AccessFlushGlobal); err != nil {
		return "", err
	}
	if err := p.sendTarget(ctx, p.MR.RKey()); err != nil {
		return "", err
	}
	if err := p.serveWrite(ctx); err != nil {
		return "", err
	}
	return p.serveRefused(ctx, 1, 512)
}

// flush posts a FLUSH of t and returns its completion status.
func (p *Peer) flush(ctx context.Context, t target, n uint32, typ, level uint8) (roce.WCStatus, error) {
	wc, err := p.Post(ctx, roce.SendWR{WRID: 10, Opcode: roce.WRFlush, RemoteAddr: t.addr, RKey: t.rkey,
		Flush: roce.FlushWR{Type: typ, Level: level, Length: n}})
	if err == nil && wc.Status == roce.WCSuccess && wc.Opcode != roce.WCFlush {
		err = fmt.Errorf("FLUSH completed with opcode %v", wc.Opcode)
	}
	return wc.Status, err
}

func flushClient(ctx context.Context, p *Peer) (string, error) {
	if err := p.Reg(roce.AccessLocalWrite); err != nil {
		return "", err
	}
	t, err := p.recvTarget(ctx)
	if err != nil {
		return "", err
	}
	p.Fill(0, 512, 1)
	if st, err := p.RDMA(ctx, roce.WRRDMAWrite, 0, 512, t.addr, t.rkey); err != nil || st != roce.WCSuccess {
		return "", fmt.Errorf("WRITE: %s %v", StatusName(st), err)
	}
	for _, f := range []struct {
		level uint8
		n     uint32
		what  string
	}{{roce.FlushRange, 512, "FLUSH global range"}, {roce.FlushMR, 0, "FLUSH global MR"}} {
		if st, err := p.flush(ctx, t, f.n, roce.FlushGlobal, f.level); err != nil || st != roce.WCSuccess {
			return "", fmt.Errorf("%s: %s %v", f.what, StatusName(st), err)
		}
	}
	if err := p.conn.Send(ctx, "wrote", "len", 512, "seed", 1); err != nil {
		return "", err
	}
	if err := p.recvOK(ctx, "verified", "did not find the flushed WRITE"); err != nil {
		return "", err
	}
	st, err := p.flush(ctx, t, 512, roce.FlushPersistent, roce.FlushRange)
	if err != nil {
		return "", err
	}
	if err := p.conn.Send(ctx, "refused", "status", StatusName(st)); err != nil {
		return "", err
	}
	if st != roce.WCRemAccessErr {
		return "", fmt.Errorf("FLUSH persistent of an MR without FLUSH_PERSISTENT: %s, want %s", StatusName(st),
			StatusName(roce.WCRemAccessErr))
	}
	if err := p.recvOK(ctx, "result", "its memory changed"); err != nil {
		return "", err
	}
	return "FLUSH global (range and MR) completed; FLUSH persistent refused", nil
}

// atomicWriteV0 and atomicWriteRO are the server's words before the client's writes.
const (
	atomicWriteV0 = 0x1111111111111111
	atomicWriteRO = 0x2222222222222222
	roWordOff     = TargetOff + 512
)

func atomicWriteServer(ctx context.Context, p *Peer) (string, error) {
	p.GuardFill()
	p.SetWord(TargetOff, atomicWriteV0)
	p.SetWord(roWordOff, atomicWriteRO)
	if err := p.Reg(roce.AccessLocalWrite | roce.AccessRemoteWrite | roce.AccessRemoteRead); err != nil {
		return "", err
	}
	ro, err := p.PD.RegMR(p.Mem, roce.AccessRemoteRead)
	if err != nil {
		return "", err
	}
	defer ro.Close()
	if err := p.conn.Send(ctx, "target", "addr", p.Addr(TargetOff), "rkey", p.MR.RKey(), "addr2", p.Addr(roWordOff),
		"rkey2", ro.RKey(), "value", uint64(atomicWriteV0)); err != nil {
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
	if err := p.okLine(ctx, "verified", p.Word(TargetOff) == want, "the ATOMIC_WRITE did not land"); err != nil {
		return "", err
	}
	if m, err = p.conn.Recv(ctx, "refused"); err != nil {
		return "", err
	}
	st, _ := m.Get("status")
	if err := p.okLine(ctx, "result", p.Word(roWordOff) == atomicWriteRO, "an ATOMIC_WRITE to a read-only MR changed it"); err != nil {
		return "", err
	}
	return fmt.Sprintf("value=%#x (client's refused ATOMIC_WRITE: %s)", want, st), nil
}

// atomicWrite posts an ATOMIC_WRITE of v and returns its completion status.
func (p *Peer) atomicWrite(ctx context.Context, raddr uint64, rkey uint32, v uint64) (roce.WCStatus, error) {
	wc, err := p.Post(ctx, roce.SendWR{WRID: 11, Opcode: roce.WRAtomicWrite, RemoteAddr: raddr, RKey: rkey, Swap: v})
	if err == nil && wc.Status == roce.WCSuccess && wc.Opcode != roce.WCAtomicWrite {
		err = fmt.Errorf("ATOMIC_WRITE completed with opcode %v", wc.Opcode)
	}
	return wc.Status, err
}

func atomicWriteClient(ctx context.Context, p *Peer) (string, error) {
	if err := p.Reg(roce.AccessLocalWrite); err != nil {
		return "", err
	}
	m, err := p.conn.Recv(ctx, "target")
	if err != nil {
		return "", err
	}
	var v [5]uint64
	for i, k := range []string{"addr", "rkey", "addr2", "rkey2", "value"} {
		if v[i], err = m.Uint(k); err != nil {
			return "", err
		}
	}
	raddr, rkey, raddr2, rkey2, val := v[0], uint32(v[1]), v[2], uint32(v[3]), v[4]
	const rd = 128
	for i := uint64(1); i <= 2; i++ {
		val = val*31 + 0x0123456789abcdef*i
		if st, err := p.atomicWrite(ctx, raddr, rkey, val); err != nil || st != roce.WCSuccess {
			return "", fmt.Errorf("ATOMIC_WRITE: %s %v", StatusName(st), err)
		}
		p.SetWord(rd, 0)
		if st, err := p.RDMA(ctx, roce.WRRDMARead, rd, 8, raddr, rkey); err != nil || st != roce.WCSuccess {
			return "", fmt.Errorf("READ: %s %v", StatusName(st), err)
		}
		if got := p.Word(rd); got != val {
			return "", fmt.Errorf("READ after ATOMIC_WRITE %d returned %#x, want %#x", i, got, val)
		}
	}
	if err := p.conn.Send(ctx, "check", "value", val); err != nil {
		return "", err
	}
	if err := p.recvOK(ctx, "verified", fmt.Sprintf("does not hold %#x", val)); err != nil {
		return "", err
	}
	st, err := p.atomicWrite(ctx, raddr2, rkey2, val)
	if err != nil {
		return "", err
	}
	if err := p.conn.Send(ctx, "refused", "status", StatusName(st)); err != nil {
		return "", err
	}
	if st != roce.WCRemAccessErr {
		return "", fmt.Errorf("ATOMIC_WRITE to a read-only MR: %s, want %s", StatusName(st), StatusName(roce.WCRemAccessErr))
	}
	if err := p.recvOK(ctx, "result", "its read-only word changed"); err != nil {
		return "", err
	}
	return fmt.Sprintf("two ATOMIC_WRITEs read back, value=%#x; one to a read-only MR refused", val), nil
}

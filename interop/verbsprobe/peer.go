package verbsprobe

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"net"
	"sync/atomic"
	"unsafe"

	"github.com/goroce/goroce/roce"
)

// The memory layout both programs use: BufSize bytes, the target (a word or a window) at
// TargetOff, the server's receive buffer at RecvOff, and Guard in every other byte of
// the server's buffer, which no test may change.
const (
	BufSize   = 8192
	TargetOff = 1024
	TargetLen = 1024
	RecvOff   = BufSize - 64
	Guard     = 0xa5
)

// Peer is goroce's side of one verbs-probe test: one RC QP and its buffer.
type Peer struct {
	Test string
	Dev  *roce.Device
	PD   *roce.PD
	CQ   *roce.CQ
	QP   *roce.QP
	Mem  []byte // BufSize bytes, 8-byte aligned
	MR   *roce.MR

	conn   *Conn
	client bool
	access roce.Access // what the QP grants
	words  []uint64    // Mem's backing array
}

// qpAccess is what the QP lets a peer do; each MR narrows it.
const qpAccess = roce.AccessLocalWrite | roce.AccessRemoteWrite | roce.AccessRemoteRead | roce.AccessRemoteAtomic

// NewPeer creates the verbs objects of test on dev and brings the QP to INIT, granting
// access.
func NewPeer(dev *roce.Device, test string, access roce.Access) (*Peer, error) {
	p := &Peer{Test: test, Dev: dev, access: access, words: make([]uint64, BufSize/8)}
	p.Mem = unsafe.Slice((*byte)(unsafe.Pointer(&p.words[0])), BufSize)
	var err error
	if p.PD, err = dev.AllocPD(); err != nil {
		return nil, err
	}
	if p.CQ, err = dev.CreateCQ(64); err != nil {
		p.Close()
		return nil, err
	}
	p.QP, err = p.PD.CreateQP(roce.QPInitAttr{Type: roce.QPTypeRC, SendCQ: p.CQ, RecvCQ: p.CQ,
		Cap: roce.QPCap{MaxSendWR: 16, MaxRecvWR: 16, MaxSendSGE: 1, MaxRecvSGE: 1}})
	if err != nil {
		p.Close()
		return nil, err
	}
	if err = p.QP.Init(&roce.ConnectAttr{AccessFlags: access}); err != nil {
		p.Close()
		return nil, err
	}
	return p, nil
}

// Close releases the verbs objects (not the device) and the connection.
func (p *Peer) Close() {
	if p.conn != nil {
		p.conn.Close()
	}
	if p.QP != nil {
		p.QP.Close()
	}
	if p.MR != nil {
		p.MR.Close()
	}
	if p.CQ != nil {
		p.CQ.Close()
	}
	if p.PD != nil {
		p.PD.Close()
	}
}

// Connect swaps the hello lines over c (the client first) and brings the QP to RTS.
func (p *Peer) Connect(ctx context.Context, c net.Conn, client bool) error {
	p.conn, p.client = NewConn(c), client
	var b [3]byte
	rand.Read(b[:])
	psn := uint32(b[0])<<16 | uint32(b[1])<<8 | uint32(b[2])
	gid := p.Dev.GID()
	hello := func() error {
		return p.conn.Send(ctx, "hello", "test", p.Test, "qpn", p.QP.QPN(), "psn", psn, "gid", hex.EncodeToString(gid[:]))
	}
	if client {
		if err := hello(); err != nil {
			return err
		}
	}
	m, err := p.conn.Recv(ctx, "hello")
	if err != nil {
		return err
	}
	if test, _ := m.Get("test"); test != p.Test {
		if !client {
			p.conn.Send(ctx, "error", "msg", "server_runs_"+p.Test)
		}
		return fmt.Errorf("verbsprobe: the peer runs test %q, not %q", test, p.Test)
	}
	qpn, err1 := m.Uint("qpn")
	rpsn, err2 := m.Uint("psn")
	g, err3 := m.Get("gid")
	var rgid roce.GID
	if n, err := hex.Decode(rgid[:], []byte(g)); err3 == nil && (err != nil || n != 16 || len(g) != 32) {
		err3 = fmt.Errorf("%w: gid %q", ErrLine, g)
	}
	if err := errors.Join(err1, err2, err3); err != nil {
		return err
	}
	if !client {
		if err := hello(); err != nil {
			return err
		}
	}
	port, err := p.Dev.QueryPort(1)
	if err != nil {
		return err
	}
	return p.QP.Connect(&roce.ConnectAttr{AccessFlags: p.access, PathMTU: port.ActiveMTU, DestQPN: uint32(qpn),
		RQPSN: uint32(rpsn), MaxDestRDAtomic: 16, MinRNRTimer: 12, SQPSN: psn, Timeout: 14, RetryCnt: 7, RNRRetry: 7,
		MaxRDAtomic: 16, AV: roce.AddressVector{DGID: rgid.Addr(), SGIDIndex: uint8(p.Dev.GIDIndex()), HopLimit: 64, IsGlobal: true}})
}

// Reg registers the whole buffer with access as p.MR.
func (p *Peer) Reg(access roce.Access) error {
	var err error
	p.MR, err = p.PD.RegMR(p.Mem, access)
	return err
}

// Addr is the address of Mem[off] as the peer names it.
func (p *Peer) Addr(off int) uint64 { return p.MR.Addr() + uint64(off) }

// Word reads the aligned 64-bit word at Mem[off] (host order, as an atomic leaves it).
func (p *Peer) Word(off int) uint64 { return atomic.LoadUint64(&p.words[off/8]) }

// SetWord writes the aligned 64-bit word at Mem[off].
func (p *Peer) SetWord(off int, v uint64) { atomic.StoreUint64(&p.words[off/8], v) }

// Post posts one signaled work request and returns its completion.
func (p *Peer) Post(ctx context.Context, wr roce.SendWR) (roce.WC, error) {
	wr.Flags |= roce.SendSignaled
	if _, err := p.QP.PostSend([]roce.SendWR{wr}); err != nil {
		return roce.WC{}, err
	}
	return p.Poll(ctx)
}

// Poll waits for one completion.
func (p *Peer) Poll(ctx context.Context) (roce.WC, error) {
	var wc [1]roce.WC
	if _, err := p.CQ.Wait(ctx, wc[:]); err != nil {
		return roce.WC{}, fmt.Errorf("waiting for a completion: %w", err)
	}
	return wc[0], nil
}

// must turns a completion that is not a success into an error.
func must(wc roce.WC, err error) (roce.WC, error) {
	if err == nil && wc.Status != roce.WCSuccess {
		err = fmt.Errorf("wr %d: completion status %s", wc.WRID, StatusName(wc.Status))
	}
	return wc, err
}

// StatusName is ibv_wc_status_str's text with spaces as '_', as the exchange carries it.
func StatusName(s roce.WCStatus) string {
	b := []byte(s.String())
	for i, c := range b {
		if c == ' ' {
			b[i] = '_'
		}
	}
	return string(b)
}

// Atomic posts FETCH_AND_ADD or CMP_AND_SWAP on the remote word and returns the value it
// held before.
func (p *Peer) Atomic(ctx context.Context, op roce.WROpcode, raddr uint64, rkey uint32, cmpAdd, swap uint64) (uint64, error) {
	const res = 64
	p.SetWord(res, 0)
	_, err := must(p.Post(ctx, roce.SendWR{WRID: 3, Opcode: op, RemoteAddr: raddr, RKey: rkey, CompareAdd: cmpAdd, Swap: swap,
		SGL: []roce.SGE{{Addr: p.Addr(res), Length: 8, LKey: p.MR.LKey()}}}))
	if err != nil {
		return 0, fmt.Errorf("atomic opcode %d: %w", op, err)
	}
	return p.Word(res), nil
}

// RDMA posts a WRITE or READ of Mem[off:off+n] to or from the remote address and returns
// the completion's status.
func (p *Peer) RDMA(ctx context.Context, op roce.WROpcode, off, n int, raddr uint64, rkey uint32) (roce.WCStatus, error) {
	wc, err := p.Post(ctx, roce.SendWR{WRID: 1, Opcode: op, RemoteAddr: raddr, RKey: rkey,
		SGL: []roce.SGE{{Addr: p.Addr(off), Length: uint32(n), LKey: p.MR.LKey()}}})
	return wc.Status, err
}

// Fill writes the pattern of seed to Mem[off:off+n]: byte i is seed+7i.
func (p *Peer) Fill(off, n int, seed uint) {
	for i := range n {
		p.Mem[off+i] = byte(seed + 7*uint(i))
	}
}

// Holds reports whether Mem[off:off+n] holds the pattern of seed.
func (p *Peer) Holds(off, n int, seed uint) bool {
	for i := range n {
		if p.Mem[off+i] != byte(seed+7*uint(i)) {
			return false
		}
	}
	return true
}

// GuardFill sets every byte of the buffer to Guard.
func (p *Peer) GuardFill() {
	for i := range p.Mem {
		p.Mem[i] = Guard
	}
}

// GuardsIntact reports whether every byte outside the target and the receive buffer
// still holds Guard.
func (p *Peer) GuardsIntact() bool {
	for i, b := range p.Mem {
		if (i < TargetOff || i >= TargetOff+TargetLen) && i < RecvOff && b != Guard {
			return false
		}
	}
	return true
}

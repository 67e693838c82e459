package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"os"
	"time"

	"github.com/goroce/goroce/internal/tool/cli"
	"github.com/goroce/goroce/internal/tool/pingpong"
	"github.com/goroce/goroce/oob"
	"github.com/goroce/goroce/roce"
)

// Work request IDs, as the stock tools use them: a bit each, so pending can hold both.
const (
	recvWRID = 1
	sendWRID = 2
)

// pageSize is the stride of the stock tools' -c pattern (sysconf(_SC_PAGESIZE) on x86).
const pageSize = 4096

// session holds the verbs objects of one run, shaped like the stock tools' context.
type session struct {
	c    *config
	out  io.Writer
	dev  *roce.Device
	pp   *pingpong.Session // its Buf: receive slots, then one send buffer per QP
	gidx int

	fill      byte // the byte the buffers start filled with: 0x7b, or 0 for srq
	sendFlags roce.SendFlags
	slotLen   int      // a receive buffer: size, plus the GRH room for ud
	slots     int      // receive buffers: one per receive WR that can be posted
	free      []int    // slots no receive WR owns and this program is done with
	echo      [][]byte // server: what each QP received last, to send back
	local     []oob.Dest
	remote    []oob.Dest
	cli.Closers
}

func runPingpong(ctx context.Context, c *config, out, errOut io.Writer) (err error) {
	s := &session{c: c, out: out}
	defer func() {
		if c.Stats && s.dev != nil {
			fmt.Fprintln(errOut, cli.Stats(s.dev))
		}
		if cerr := s.Close(); err == nil && cerr != nil {
			err = cerr
		}
	}()
	// With -d the device opens first, as the stock tools open theirs, so that a
	// busy address fails before the peer is involved; without it the device
	// binds the address the TCP connection uses.
	if c.Addr.IsValid() {
		if err := s.open(); err != nil {
			return err
		}
	}
	conn, err := c.Connect(ctx, c.server)
	if err != nil {
		return err
	}
	defer conn.Close()
	if s.dev == nil {
		c.Resolve(conn)
		if err := s.open(); err != nil {
			return err
		}
	}
	if err := s.exchange(ctx, conn); err != nil {
		return err
	}
	if err := s.loop(ctx); err != nil {
		return err
	}
	c.Hold(ctx)
	return nil
}

// open creates the device, buffer, MR, CQ, SRQ and QPs, moves the QPs to INIT and posts
// the receives: pp_init_ctx and the lines after it in the stock tools.
func (s *session) open() error {
	c := s.c
	var opts []roce.Option
	if c.pcap != "" {
		f, err := os.Create(c.pcap)
		if err != nil {
			return err
		}
		s.Add(f.Close)
		opts = append(opts, roce.WithPcap(f))
	}
	if c.portMTU != 0 {
		opts = append(opts, roce.WithMTU(c.portMTU))
	}
	var err error
	s.dev, err = c.Open(opts...)
	if err != nil {
		return cli.OpenError(err, c.Addr, c.RoCEPort, "-d", "--roce-port")
	}
	s.Add(s.dev.Close)

	port, err := s.dev.QueryPort(1)
	if err != nil {
		return err
	}
	if c.mode == "ud" && c.size > port.ActiveMTU.Bytes() {
		// A UD message is one packet of at most the port MTU (ud_pingpong
		// never sets a path MTU); refuse before any peer is involved, as the
		// stock tool does, in its words.
		return stockMessage(fmt.Sprintf("Requested size larger than port MTU (%d)", port.ActiveMTU.Bytes()))
	}
	s.gidx = c.gidIndex
	if s.gidx < 0 {
		s.gidx = s.dev.GIDIndex()
	}
	gid, err := s.dev.QueryGID(s.gidx)
	if err != nil {
		return fmt.Errorf("can't read sgid of index %d: %w", s.gidx, err)
	}

	// The stock tools send from and receive into one buffer. Here every posted
	// receive WR owns a slot, and a slot is posted again only after this program
	// is done with it, so the engine never writes a buffer being read: messages
	// on different QPs of an SRQ can complete in any order, so no smaller ring
	// of slots is safe. Every QP has its own send buffer.
	s.slotLen = c.size
	if c.mode == "ud" {
		s.slotLen += pingpong.GRH
	}
	s.slots = c.rxDepth
	s.free = make([]int, s.slots)
	for i := range s.free {
		s.free[i] = i
	}
	s.echo = make([][]byte, c.numQP)
	for i := range s.echo {
		s.echo[i] = make([]byte, c.size)
	}
	kind := map[string]pingpong.Kind{"rc": pingpong.RC, "uc": pingpong.UC, "ud": pingpong.UD, "srq": pingpong.SRQ}[c.mode]
	s.pp, err = pingpong.Open(s.dev, pingpong.Spec{Kind: kind, QPs: c.numQP, Slots: s.slots, SlotLen: s.slotLen,
		Extra: c.numQP * c.size, SendWR: 1, RecvWR: c.rxDepth, CQE: c.rxDepth + c.numQP})
	s.Add(s.pp.Close)
	if err != nil {
		return fmt.Errorf("couldn't create the verbs objects: %w", err)
	}
	s.fill = 0x7b
	if c.mode == "srq" {
		s.fill = 0 // srq_pingpong clears its buffer; the others fill it with '{'
	}
	for i := range s.pp.Buf {
		s.pp.Buf[i] = s.fill
	}
	if c.validate && c.server != "" {
		// The stock client's -c pattern: a zero at the start of every page it sends.
		for qi := 0; qi < c.numQP; qi++ {
			p := s.sendBuf(qi)
			for i := 0; i < len(p); i += pageSize {
				p[i] = 0
			}
		}
	}
	s.sendFlags = roce.SendSignaled
	for _, qp := range s.pp.QPs {
		if got, err := qp.Query(); err == nil && int(got.Cap.MaxInlineData) >= c.size {
			s.sendFlags |= roce.SendInline
		}
		s.local = append(s.local, oob.Dest{QPN: qp.QPN(), PSN: rand.Uint32() & 0xffffff, GID: gid})
	}
	if got := s.postRecv(c.rxDepth); got < c.rxDepth {
		return fmt.Errorf("couldn't post receive (%d)", got)
	}
	for _, d := range s.local {
		sep := ","
		if c.mode == "ud" {
			sep = ":" // ud_pingpong's own spelling
		}
		fmt.Fprintf(s.out, "  local address:  LID 0x%04x, QPN 0x%06x, PSN 0x%06x%s GID %s\n", d.LID, d.QPN, d.PSN, sep, d.GIDAddr())
	}
	return nil
}

// payload is the message in receive slot i: all of it, or for ud what follows the GRH
// room.
func (s *session) payload(slot int) []byte {
	b := s.pp.Buf[slot*s.slotLen : (slot+1)*s.slotLen]
	if s.c.mode == "ud" {
		return b[pingpong.GRH:]
	}
	return b
}

// sendOff is the offset in buf of QP qi's send buffer.
func (s *session) sendOff(qi int) int { return s.slots*s.slotLen + qi*s.c.size }

// sendBuf is QP qi's send buffer.
func (s *session) sendBuf(qi int) []byte { return s.pp.Buf[s.sendOff(qi) : s.sendOff(qi)+s.c.size] }

// postRecv posts up to n receives into free slots and returns how many were
// posted. Each WR carries its slot in the bits above the WR kind.
func (s *session) postRecv(n int) int {
	wrs := make([]roce.RecvWR, min(n, len(s.free)))
	for i := range wrs {
		slot := s.free[i]
		wrs[i] = roce.RecvWR{WRID: recvWRID | uint64(slot)<<8, SGL: []roce.SGE{s.pp.SGE(slot, 0, s.slotLen)}}
	}
	got, _ := s.pp.PostRecv(0, wrs)
	s.free = s.free[got:]
	return got
}

func (s *session) postSend(qp int) error {
	wr := roce.SendWR{WRID: sendWRID, Opcode: roce.WRSend, Flags: s.sendFlags,
		SGL: []roce.SGE{s.pp.SGE(0, s.sendOff(qp), s.c.size)}}
	if ah := s.pp.AHs[qp]; ah != nil {
		wr.AH = ah.AV()
		wr.RemoteQPN = s.remote[0].QPN
		wr.RemoteQKey = pingpong.QKey
	}
	_, err := s.pp.QPs[qp].PostSend([]roce.SendWR{wr})
	return err
}

// exchange swaps addresses over TCP with the peer and connects the QPs: as client
// after the answer, as server before answering (pp_server_exch_dest).
func (s *session) exchange(ctx context.Context, conn net.Conn) error {
	records := 1
	if s.c.mode == "srq" {
		records = oob.SRQRecords
	}
	xctx := ctx
	if _, ok := ctx.Deadline(); !ok {
		var cancel context.CancelFunc
		// The peer is another program: if it stalls mid-exchange, do not hang forever.
		xctx, cancel = context.WithTimeout(ctx, 60*time.Second)
		defer cancel()
	}
	var err error
	if s.c.server != "" {
		if s.remote, err = oob.ClientExchange(xctx, conn, s.local, records); err != nil {
			return fmt.Errorf("couldn't read/write remote address: %w", err)
		}
		s.printRemote()
		return s.connect()
	}
	_, err = oob.ServerExchange(xctx, conn, records, func(remote []oob.Dest) ([]oob.Dest, error) {
		s.remote = remote
		if err := s.connect(); err != nil {
			return nil, fmt.Errorf("couldn't connect to remote QP: %w", err)
		}
		return s.local, nil
	})
	if err != nil {
		return err
	}
	s.printRemote()
	return nil
}

func (s *session) printRemote() {
	for _, d := range s.remote[:len(s.pp.QPs)] {
		fmt.Fprintf(s.out, "  remote address: %v\n", d)
	}
}

// connect moves every QP to RTR and RTS with the attributes the stock tools use.
func (s *session) connect() error {
	mtu := roce.MTUFromBytes(s.c.mtu)
	for i := range s.pp.QPs {
		r := s.remote[i]
		if r.QPN == 0 {
			return fmt.Errorf("remote QP[%d]: the peer sent no address (fewer QPs than our -q %d?)", i, len(s.pp.QPs))
		}
		// Only the first record's GID counts (srq_pingpong uses dest->gid for all QPs).
		r.GID = s.remote[0].GID
		if err := s.pp.Connect(i, s.local[i].PSN, r, s.gidx, mtu); err != nil {
			return fmt.Errorf("QP[%d]: %w", i, err)
		}
	}
	return nil
}

// loop is the stock tools' main loop: each QP alternates one SEND and one RECV; the
// client starts. It ends after iters send and iters receive completions.
func (s *session) loop(ctx context.Context) error {
	c := s.c
	pending := make([]int, len(s.pp.QPs))
	for i := range pending {
		pending[i] = recvWRID
	}
	if c.server != "" {
		for i := range s.pp.QPs {
			if err := s.postSend(i); err != nil {
				return fmt.Errorf("couldn't post send: %w", err)
			}
			pending[i] |= sendWRID
		}
	}
	qpIndex := make(map[uint32]int, len(s.pp.QPs))
	for i, qp := range s.pp.QPs {
		qpIndex[qp.QPN()] = i
	}
	start := time.Now()
	routs := c.rxDepth
	refill := 1 // rc/uc/ud refill when at most one receive is left; srq at num_qp
	if s.pp.SRQ != nil {
		refill = len(s.pp.QPs)
	}
	wantLen := uint32(c.size)
	if c.mode == "ud" {
		wantLen += pingpong.GRH
	}
	wc := make([]roce.WC, 16)
	scnt, rcnt := 0, 0
	for rcnt < c.iters || scnt < c.iters {
		waitCtx, cancel := ctx, context.CancelFunc(func() {})
		tail := c.lastAckWait > 0 && rcnt >= c.iters
		if tail {
			waitCtx, cancel = context.WithTimeout(ctx, c.lastAckWait)
		}
		n, err := s.pp.CQ.Wait(waitCtx, wc)
		cancel()
		if err != nil {
			if tail && ctx.Err() == nil && errors.Is(err, context.DeadlineExceeded) {
				// Every receive completed, so the peer sent everything; only the ACK
				// of our last send(s) is missing. If the peer lost it and then
				// exited, no retransmission can ever be acknowledged.
				fmt.Fprintf(os.Stderr, "roce-pingpong: %d last send(s) not acknowledged within %v after every receive completed (the peer may have exited)\n", c.iters-scnt, c.lastAckWait)
				break
			}
			return fmt.Errorf("%w after %d/%d sends and %d/%d receives", err, scnt, c.iters, rcnt, c.iters)
		}
		for _, w := range wc[:n] {
			if w.Status != roce.WCSuccess {
				return fmt.Errorf("failed status %v (%d) for wr_id %d", w.Status, w.Status, w.WRID)
			}
			qi, ok := qpIndex[w.QPNum]
			if !ok {
				return fmt.Errorf("couldn't find QPN %06x", w.QPNum)
			}
			kind := int(w.WRID & 0xff)
			switch kind {
			case sendWRID:
				scnt++
			case recvWRID:
				rcnt++
				if w.ByteLen != wantLen {
					return fmt.Errorf("receive %d: %d bytes, want %d", rcnt, w.ByteLen, wantLen)
				}
				slot := int(w.WRID >> 8)
				p := s.payload(slot)
				if c.validate {
					if err := s.check(p); err != nil {
						return fmt.Errorf("receive %d: %w", rcnt, err)
					}
				}
				if c.server == "" {
					copy(s.echo[qi], p)
				}
				// Done with the slot: only now may a receive WR own it again.
				s.free = append(s.free, slot)
				if routs--; routs <= refill {
					routs += s.postRecv(c.rxDepth - routs)
					if routs < c.rxDepth {
						return fmt.Errorf("couldn't post receive (%d)", routs)
					}
				}
			default:
				return fmt.Errorf("completion for unknown wr_id %d", w.WRID)
			}
			pending[qi] &^= kind
			if scnt < c.iters && pending[qi] == 0 {
				// The server echoes what it received, as the stock server does by
				// sending from its receive buffer. The copy waits until now: only
				// once the previous send has completed is the engine done with it.
				if c.server == "" {
					copy(s.sendBuf(qi), s.echo[qi])
				}
				if err := s.postSend(qi); err != nil {
					return fmt.Errorf("couldn't post send: %w", err)
				}
				pending[qi] = recvWRID | sendWRID
			}
		}
	}
	usec := float64(time.Since(start).Microseconds())
	if usec < 1 {
		usec = 1
	}
	bytes := int64(c.size) * int64(c.iters) * 2
	fmt.Fprintf(s.out, "%d bytes in %.2f seconds = %.2f Mbit/sec\n", bytes, usec/1e6, float64(bytes)*8/usec)
	fmt.Fprintf(s.out, "%d iters in %.2f seconds = %.2f usec/iter\n", c.iters, usec/1e6, usec/float64(c.iters))
	return nil
}

// check validates a received message p. The client knows exactly what it sent and
// the server echoes it back. The server checks the stock pattern: the fill byte
// everywhere, and at each page start the client's -c zero (or the fill byte, from a
// client without -c).
func (s *session) check(p []byte) error {
	client := s.c.server != ""
	for i, b := range p {
		want := s.fill
		if i%pageSize == 0 {
			if client {
				want = 0
			} else if b == 0 {
				continue
			}
		}
		if b != want {
			return fmt.Errorf("invalid data in page %d: byte %d is %#02x, want %#02x", i/pageSize, i, b, want)
		}
	}
	return nil
}

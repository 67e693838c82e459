//go:build linux

package link

import (
	"encoding/binary"
	"fmt"
	"net/netip"
	"syscall"
	"unsafe"

	"golang.org/x/sys/unix"
)

// Kinds of write entries, for the counters.
const (
	entryPlain    uint8 = iota // one datagram that is not part of a train
	entryGSO                   // a UDP_SEGMENT super-datagram
	entrySegment               // one segment of a train sent on its own
	maxFlowLabel  = 0xFFFFF
	gsoCmsgSpace  = 24 // CMSG_SPACE(2) on 64-bit, >= on 32-bit
	intCmsgSpace  = 24 // CMSG_SPACE(4)
	maxTxCmsgSize = gsoCmsgSpace + 2*intCmsgSpace
)

// emit appends iovecs for the next n bytes to the arena from used on and
// returns the new used count.
func (g *gather) emit(s *mmsgScratch, used, n int) int {
	for n > 0 && g.pi < len(g.pieces) {
		p := g.pieces[g.pi][g.po:]
		if len(p) == 0 {
			g.pi, g.po = g.pi+1, 0
			continue
		}
		k := min(n, len(p))
		v := &s.iov(used, 1)[0]
		v.Base = &p[0]
		v.SetLen(k)
		used++
		n -= k
		g.advance(k)
	}
	return used
}

// WriteBatch implements Link: each run of messages with one SrcPort goes out
// through that port's socket, trains as UDP GSO super-datagrams (see
// GSOSegments), with TOS, TTL and flow label control messages only where a
// message asks for something else than the socket's default. It does not
// allocate in steady state.
func (u *UDP) WriteBatch(msgs []Message) (int, error) {
	raceReleaseIO()
	s := u.scratch.Get().(*mmsgScratch)
	defer u.scratch.Put(s)
	sent := 0
	for sent < len(msgs) {
		port := msgs[sent].SrcPort
		end := sent + 1
		for end < len(msgs) && msgs[end].SrcPort == port {
			end++
		}
		ss, err := u.sender(port)
		if err != nil {
			return sent, err
		}
		n, err := u.writeRun(s, ss, msgs[sent:end])
		sent += n
		if err != nil {
			return sent, err
		}
	}
	return sent, nil
}

// check validates one message before any of it is packed.
func (u *UDP) check(m *Message) error {
	if m.SegSize < 0 || m.SegSize > MaxDatagram {
		return fmt.Errorf("link: write to %v: segment size %d: %w", m.Addr, m.SegSize, syscall.EINVAL)
	}
	if m.FlowLabel > maxFlowLabel {
		return fmt.Errorf("link: write to %v: flow label %#x: %w", m.Addr, m.FlowLabel, syscall.EINVAL)
	}
	return nil
}

// writeRun sends msgs through ss in sendmmsg batches.
func (u *UDP) writeRun(s *mmsgScratch, ss *sendSock, msgs []Message) (int, error) {
	g := &s.g
	defer func() { g.one[0] = nil }()
	i, off := 0, 0 // next message, and the byte of it to send next
	for i < len(msgs) {
		gso := u.gso.Load()
		k, used := 0, 0
		var packErr error
		if off > 0 {
			// Resuming a message after a GSO refusal: skip to off.
			g.reset(&msgs[i])
			g.skip(off)
		}
		for k < u.batch && i < len(msgs) {
			m := &msgs[i]
			if off == 0 {
				if packErr = u.check(m); packErr != nil {
					break
				}
				g.reset(m)
			}
			var err error
			if k, used, err = u.pack(s, ss, g, m, i, k, used, &off, gso); err != nil {
				packErr = err
				break
			}
			if off == 0 { // m is all packed
				i++
			}
		}
		for e := 0; e < k; e++ { // the arena has stopped growing
			s.point(e, s.iovAt[e], int(s.hs[e].hdr.Iovlen))
		}
		ri, roff, done, err := u.flush(s, ss, k)
		s.clear(used)
		if err != nil {
			return s.owner[done], err
		}
		if done < k { // GSO refused at entry done: resend from there without it
			i, off = ri, roff
			continue
		}
		if packErr != nil {
			return i, packErr
		}
	}
	return i, nil
}

// pack adds the entries of message m = msgs[i] (from byte *off on) to the batch at
// entry k, arena position used, until m is packed (*off back to 0) or the
// batch is full.
func (u *UDP) pack(s *mmsgScratch, ss *sendSock, g *gather, m *Message, i, k, used int, off *int, gso bool) (int, int, error) {
	total := m.Len()
	seg := m.SegSize
	train := seg > 0 && seg < total
	unit := total
	if train {
		unit = seg
		if gso {
			unit = seg * GSOSegments(seg)
		}
	}
	dst := m.Addr
	is4 := !u.is6
	flow := uint32(0)
	if u.is6 && m.FlowLabel != 0 {
		flow = u.leaseLabel(ss, m.FlowLabel, dst.Addr())
	}
	for k < u.batch {
		n := min(unit, total-*off)
		nl, err := u.putName(&s.names[k], dst, flow)
		if err != nil {
			return k, used, err
		}
		h := &s.hs[k]
		h.hdr.Namelen = uint32(nl)
		h.hdr.Flags = 0
		h.len = 0
		s.owner[k], s.start[k], s.segs[k], s.kind[k] = i, *off, 1, entryPlain
		s.iovAt[k] = used
		rekey := false
		if train {
			s.segs[k] = (n + seg - 1) / seg
			if gso && n > seg {
				s.kind[k] = entryGSO
			} else {
				s.kind[k] = entrySegment
				// Sent alone it gets ID 0; its ICRC was made for the ID it
				// would have had in a super-datagram.
				id := TrainIPv4ID(seg, *off/seg)
				rekey = is4 && id != 0 && n >= 4
				if rekey {
					used = g.emit(s, used, n-4)
					g.read(s.icrc[k][:])
					var d [4]byte
					binary.LittleEndian.PutUint32(d[:], ICRCIDDelta(n, id, 0))
					for j := range d {
						s.icrc[k][j] ^= d[j]
					}
					v := &s.iov(used, 1)[0]
					v.Base = &s.icrc[k][0]
					v.SetLen(4)
					used++
				}
			}
		}
		if !rekey {
			used = g.emit(s, used, n)
		}
		h.hdr.SetIovlen(used - s.iovAt[k])
		u.putTxControl(s, k, m, s.kind[k] == entryGSO, dst.Addr())
		k++
		if *off += n; *off >= total {
			*off = 0
			return k, used, nil
		}
	}
	return k, used, nil
}

// putTxControl writes entry k's control messages: UDP_SEGMENT for a
// super-datagram, and TOS / TTL only where m differs from the socket's
// default, so the common datagram carries none.
func (u *UDP) putTxControl(s *mmsgScratch, k int, m *Message, gso bool, dst netip.Addr) {
	b := s.oob[k*oobLen : k*oobLen+maxTxCmsgSize]
	n := 0
	if gso {
		n += putCmsg(b[n:], unix.SOL_UDP, unix.UDP_SEGMENT, 2, uint32(m.SegSize))
	}
	if m.TOS != 0 {
		if u.is6 {
			n += putCmsg(b[n:], unix.IPPROTO_IPV6, unix.IPV6_TCLASS, 4, uint32(m.TOS))
		} else {
			n += putCmsg(b[n:], unix.IPPROTO_IP, unix.IP_TOS, 4, uint32(m.TOS))
		}
	}
	if m.TTL != 0 {
		def := u.defTTL
		if dst.IsMulticast() {
			def = u.mcTTL
		}
		if int(m.TTL) != def {
			if u.is6 {
				n += putCmsg(b[n:], unix.IPPROTO_IPV6, unix.IPV6_HOPLIMIT, 4, uint32(m.TTL))
			} else {
				n += putCmsg(b[n:], unix.IPPROTO_IP, unix.IP_TTL, 4, uint32(m.TTL))
			}
		}
	}
	h := &s.hs[k].hdr
	if n == 0 {
		h.Control = nil
	} else {
		h.Control = &b[0]
	}
	h.SetControllen(n)
}

// flush sends entries [0, k). It returns done == k, or on a GSO refusal
// the entry it happened at with the message and offset to resume from
// (GSO is off from then on), or an error for the message s.owner[done].
func (u *UDP) flush(s *mmsgScratch, ss *sendSock, k int) (ri, roff, done int, err error) {
	for done < k {
		// sendmmsg may stop early; resume from the first unsent.
		s.count = k - done
		hs := s.hs
		s.hs = s.hs[done:]
		err := ss.rc.Write(s.sendFn)
		s.hs = hs
		if err != nil {
			return 0, 0, done, fmt.Errorf("link: write %v: %w", u.local, err)
		}
		if s.errno == 0 {
			u.count(s, done, done+s.n)
			done += s.n
			continue
		}
		// The kernel stops at the first entry that fails and reports it
		// only when nothing was sent before it.
		if s.kind[done] == entryGSO && gsoRefusal(s.errno) {
			u.gsoRefused(s.errno)
			return s.owner[done], s.start[done], done, nil
		}
		return 0, 0, done, fmt.Errorf("link: sendmmsg %v to %v: %w", u.local, u.parseName(s.names[done][:s.hs[done].hdr.Namelen]), s.errno)
	}
	return 0, 0, done, nil
}

// count adds entries [a, b) to the GSO counters.
func (u *UDP) count(s *mmsgScratch, a, b int) {
	for e := a; e < b; e++ {
		switch s.kind[e] {
		case entryGSO:
			u.c.gsoSends.Add(1)
			u.c.gsoSegments.Add(uint64(s.segs[e]))
		case entrySegment:
			u.c.gsoFallbackSegs.Add(1)
		}
	}
}

// gsoRefusal reports whether errno is the kernel refusing UDP_SEGMENT:
// EIO (no checksum offload before 6.11, an IPsec route), EINVAL (no UDP
// checksum, too many segments) or ENOPROTOOPT (no UDP GSO at all).
func gsoRefusal(e syscall.Errno) bool {
	return e == unix.EIO || e == unix.EINVAL || e == unix.ENOPROTOOPT
}

// gsoRefused turns GSO off for the link, logs once and counts.
func (u *UDP) gsoRefused(e syscall.Errno) {
	u.c.gsoFallbacks.Add(1)
	u.gso.Store(false)
	u.gsoLogOnce.Do(func() {
		u.logf("link: the kernel refused UDP GSO; trains go out one datagram per segment from now on", "err", e)
	})
}

// leaseLabel returns label if ss may send it, leasing it from the kernel on
// first use (IPV6_FLOWLABEL_MGR: a socket may only send flow labels it holds
// a lease for), or 0 (the kernel's label) when the lease is refused.
func (u *UDP) leaseLabel(ss *sendSock, label uint32, dst netip.Addr) uint32 {
	if ok, seen := (*ss.labels.Load())[label]; seen {
		if ok {
			return label
		}
		u.c.flowLabelRefused.Add(1)
		return 0
	}
	ss.mu.Lock()
	defer ss.mu.Unlock()
	m := *ss.labels.Load()
	ok, seen := m[label]
	if !seen {
		err := leaseFlowLabel(ss.rc, label, dst)
		ok = err == nil
		if !ok {
			u.flLogOnce.Do(func() {
				u.logf("link: IPv6 flow label lease refused; such datagrams carry the kernel's label", "label", label, "err", err)
			})
		}
		nm := make(map[uint32]bool, len(m)+1)
		for k, v := range m {
			nm[k] = v
		}
		nm[label] = ok
		ss.labels.Store(&nm)
	}
	if !ok {
		u.c.flowLabelRefused.Add(1)
		return 0
	}
	return label
}

// in6FlowlabelReq is struct in6_flowlabel_req.
type in6FlowlabelReq struct {
	dst     [16]byte
	label   uint32 // network order
	action  uint8
	share   uint8
	flags   uint16
	expires uint16
	linger  uint16
	_       uint32
}

// Values from linux/in6.h.
const (
	ipv6FlActionGet = 0   // IPV6_FL_A_GET
	ipv6FlFCreate   = 1   // IPV6_FL_F_CREATE
	ipv6FlShareAny  = 255 // IPV6_FL_S_ANY: other sockets may lease it too
)

// leaseFlowLabel asks the kernel for label on the socket. The label is
// shared (IPV6_FL_S_ANY) so every socket of the link, and of other links,
// can hold it; the lease lives as long as the socket. The kernel limits
// leases (32 per socket without CAP_NET_ADMIN, 4096 per host).
func leaseFlowLabel(rc syscall.RawConn, label uint32, dst netip.Addr) error {
	req := in6FlowlabelReq{action: ipv6FlActionGet, share: ipv6FlShareAny, flags: ipv6FlFCreate}
	req.dst = dst.As16()
	binary.BigEndian.PutUint32((*[4]byte)(unsafe.Pointer(&req.label))[:], label)
	var serr syscall.Errno
	err := rc.Control(func(fd uintptr) {
		_, _, serr = unix.Syscall6(unix.SYS_SETSOCKOPT, fd, unix.IPPROTO_IPV6, ipv6FlowlabelMgr,
			uintptr(unsafe.Pointer(&req)), unsafe.Sizeof(req), 0)
	})
	if err != nil {
		return err
	}
	if serr != 0 {
		return serr
	}
	return nil
}

// putName encodes ap as a sockaddr for this socket's family (with flow as
// the IPv6 flow label) and returns its length.
func (u *UDP) putName(b *[sockaddrLen]byte, ap netip.AddrPort, flow uint32) (int, error) {
	a := ap.Addr()
	if !u.is6 {
		a = a.Unmap()
		if !a.Is4() {
			return 0, fmt.Errorf("link: write from %v to %v: %w", u.local, ap, syscall.EAFNOSUPPORT)
		}
		binary.NativeEndian.PutUint16(b[0:2], unix.AF_INET)
		binary.BigEndian.PutUint16(b[2:4], ap.Port())
		a4 := a.As4()
		copy(b[4:8], a4[:])
		clear(b[8:unix.SizeofSockaddrInet4])
		return unix.SizeofSockaddrInet4, nil
	}
	if !a.Is6() || a.Is4In6() {
		return 0, fmt.Errorf("link: write from %v to %v: %w", u.local, ap, syscall.EAFNOSUPPORT)
	}
	binary.NativeEndian.PutUint16(b[0:2], unix.AF_INET6)
	binary.BigEndian.PutUint16(b[2:4], ap.Port())
	binary.BigEndian.PutUint32(b[4:8], flow)
	a16 := a.As16()
	copy(b[8:24], a16[:])
	var scope uint32
	if z := a.Zone(); z != "" {
		scope = u.zoneIndex(z)
	} else if needsZone(a) {
		// A GID carries no zone: an unzoned link-local peer is on our own link.
		scope = u.zoneIdx
		if scope == 0 && a.IsMulticast() {
			scope = uint32(u.ifindex)
		}
	}
	binary.NativeEndian.PutUint32(b[24:28], scope)
	return unix.SizeofSockaddrInet6, nil
}

package transport

import (
	"encoding/binary"
	"net/netip"

	"github.com/goroce/goroce/bth"
	"github.com/goroce/goroce/dcqcn"
	"github.com/goroce/goroce/link"
)

// Segment trains. A run of output packets of one UDP flow (source port,
// destination and IP header fields), all of one size but the last, which may
// be shorter, goes to the Link as one train (link.Message.SegSize), which a
// UDP link sends as UDP GSO super-datagrams: one trip through the kernel for
// up to 64 datagrams. Windows of traffic are made of such runs: the MIDDLEs
// and LAST of a WRITE or SEND (a FIRST carries a RETH or is longer, so it goes
// alone), consecutive equal-size ONLYs, READ response MIDDLEs (a LAST is
// longer by its AETH).

// trainEnd returns the end, at most hi, of the train that starts at out[i]:
// out[i:end] share the UDP flow (joins) and out[i]'s size, but the last may be
// shorter. A shorter packet that heads a run of its own size stays with that
// run, so a FIRST longer than its MIDDLEs goes alone. end is i+1 when trains
// are off or no packet joins.
func (s *shard) trainEnd(i, hi int) int {
	j := i + 1
	if !s.e.offloads.GSO {
		return j
	}
	seg := s.out[i].n
	for j < hi && s.joins(i, j) {
		if n := s.out[j].n; n < seg {
			if j+1 < hi && s.joins(i, j+1) && s.out[j+1].n == n {
				break // out[j] starts a run of its own
			}
			return j + 1
		}
		j++
	}
	return j
}

// ackBehind lets the ACK at out[i] ride at the end of the train that follows
// it, if the Link delivers that train whole (link.WholeTrainer): it moves the
// ACK behind the train's packets when they are requests, the ACK joins their
// flow, the train's last packet is full size and the whole fits one GSO
// datagram, so the ACK ends it. On loopback an ACK and the reply after it
// then cost one trip through the kernel, not two, and the peer has both at
// once: a ping-pong's round trip is two such trips shorter. The receiver
// handles a train's trailing ACK first (reader.lead), so its program still
// sees its send complete before the reply arrives (see pollSlice).
//
// The train's datagrams share one IP header, so an ACK that differs from the
// requests only in its ECN field (Not-ECT beside their ECT(0): packetTOS)
// rides with theirs. The reason ACKs are Not-ECT, a switch that would mark
// the reverse direction's feedback, has no place on loopback, and a CE mark
// on the train reaches its requests anyway. Token holder only.
func (s *shard) ackBehind(i, hi int) {
	if s.e.whole == nil || i+1 >= hi || bth.Opcode(s.out[i].buf[0]) != bth.RCAck {
		return
	}
	ack, head := s.out[i], &s.out[i+1]
	if ack.tos^head.tos == dcqcn.ECT0 && head.tos&dcqcn.ECT0 != 0 {
		ack.tos = head.tos // Not-ECT beside ECT(0): the DSCP agrees
	}
	if !joinsTrain(head, &ack) || !bth.Opcode(head.buf[0]).IsRequest() || !s.e.whole.WholeTrains(ack.dst) {
		return
	}
	k := s.trainEnd(i+1, hi)
	seg := head.n
	if s.out[k-1].n != seg || k-i > link.GSOSegments(seg) {
		return
	}
	for x := i + 2; x < k; x++ {
		if !bth.Opcode(s.out[x].buf[0]).IsRequest() {
			return // responses stay behind the ACK (reader.lead)
		}
	}
	orig := s.out[i]
	copy(s.out[i:k-1], s.out[i+1:k])
	s.out[k-1] = ack
	if s.trainEnd(i, hi) != k {
		// The ACK would head a run of its own size after all (ACKs of the
		// same flow follow it): put it back in front.
		copy(s.out[i+1:k], s.out[i:k-1])
		s.out[i] = orig
		return
	}
	s.e.cfg.Stats.TxTrailingACKs.Add(1)
}

// joins reports whether out[j] may ride in the train that starts at out[i]:
// same UDP flow and IP header fields (a train's datagrams share one header),
// not longer. QPs that share a source port (the link's own, or a per-QP port
// once QPs outnumber ports) share trains: each segment is its own datagram,
// which the receiver hands to its QP by the BTH.
func (s *shard) joins(i, j int) bool { return joinsTrain(&s.out[i], &s.out[j]) }

// joinsTrain reports whether o may ride in the train that p heads (joins).
func joinsTrain(p, o *txPacket) bool {
	return o.q.wport == p.q.wport && o.dst == p.dst && o.n <= p.n && o.tos == p.tos && o.ttl == p.ttl && o.flow == p.flow &&
		sameQPNRange(o.buf[:], p.buf[:])
}

// sameQPNRange reports whether two packets' DestQPs share their top 12 bits: a
// receiver that shares its address among processes steers a train by its first
// segment (package link/steer, whose smallest block is 4096 QPNs).
func sameQPNRange(a, b []byte) bool { return a[5] == b[5] && a[6]>>4 == b[6]>>4 }

// message writes the ICRCs of out[i:j] (one packet, or a train) and returns
// the Link message that sends them, with the packets' own buffers as pieces.
func (s *shard) message(i, j int) link.Message {
	e := s.e
	p := &s.out[i]
	seg := p.n
	env := bth.Envelope{Src: e.cfg.LocalAddr, Dst: p.dst, DF: true, SrcPort: p.q.srcPort(), DstPort: e.port}
	m := link.Message{Addr: netip.AddrPortFrom(p.dst, e.port), SrcPort: p.q.wport, TOS: p.tos, TTL: p.ttl, FlowLabel: p.flow}
	first := len(s.pieces)
	for k := i; k < j; k++ {
		o := &s.out[k]
		if j-i > 1 {
			env.IPID = link.TrainIPv4ID(seg, k-i)
		}
		class := classOf(bth.Opcode(o.buf[0]))
		e.cfg.Stats.SentPackets[class].Add(1)
		e.cfg.Stats.SentBytes[class].Add(uint64(o.n))
		if o.pay == nil {
			pkt := o.buf[:o.n]
			bth.PutICRC(&env, pkt)
			if j-i == 1 {
				m.Buf = pkt
				return m
			}
			s.pieces = append(s.pieces, pkt)
			continue
		}
		hdr, tail := o.buf[:o.hdr], o.buf[o.hdr:o.n-len(o.pay)]
		binary.LittleEndian.PutUint32(tail[len(tail)-bth.ICRCLen:], bth.ICRCParts(&env, hdr, o.pay, tail))
		s.pieces = append(s.pieces, hdr, o.pay, tail)
	}
	if j-i > 1 {
		e.cfg.Stats.TxTrains.Add(1)
		e.cfg.Stats.TxTrainSegments.Add(uint64(j - i))
		m.SegSize = seg
	}
	m.Pieces = s.pieces[first:len(s.pieces):len(s.pieces)]
	return m
}

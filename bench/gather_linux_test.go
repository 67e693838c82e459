package bench

import (
	"fmt"
	"testing"
)

// gatherPath is linkGSOPath sending each datagram as the engine does: a
// gather list of three pieces (a 12-byte header, 4096 payload bytes from one
// buffer, a 4-byte trailer), perCall datagrams a send call, cut into GSO
// datagrams of link.GSOSegments(size) and a shorter last one.
type gatherPath struct {
	*linkGSOPath
	payload []byte
	hdrs    []byte // 16 bytes a datagram: its header and trailer
	perCall int
}

func newGatherPath(size, perCall int) (*gatherPath, error) {
	lp, err := newLinkGSOPath(size)
	if err != nil {
		return nil, err
	}
	return &gatherPath{linkGSOPath: lp, payload: make([]byte, size-16), hdrs: make([]byte, 16*perCall), perCall: perCall}, nil
}

func (p *gatherPath) batch() int { return p.perCall }

func (p *gatherPath) send(n int) error {
	k, d := 0, 0
	for ; n > 0; k++ {
		m := &p.out[k]
		m.Buf, m.Pieces = nil, m.Pieces[:0]
		for range min(n, p.segs) {
			h := p.hdrs[16*d : 16*d+16]
			m.Pieces = append(m.Pieces, h[:12], p.payload, h[12:])
			d++
			n--
		}
	}
	_, err := p.tx.WriteBatch(p.out[:k])
	return err
}

// BenchmarkRawUDPGather is RawUDP/linkgso/4112B with the engine's gather list
// and with the number of datagrams a send call carries varied: 15 fill one GSO
// datagram, 16 are one of 15 and one of 1 (a post of 16 one-packet SENDs before
// the engine held short tails), 30 two full ones, 60 four (linkgso's shape).
// Against linkgso it prices the three pieces; across the counts, a datagram.
func BenchmarkRawUDPGather(b *testing.B) {
	for _, per := range []int{15, 16, 30, 60} {
		b.Run(fmt.Sprint(per), func(b *testing.B) {
			benchRaw(b, bigDatagram, func(n int) (rawPath, error) { return newGatherPath(n, per) })
		})
	}
}

package link

// gather walks the bytes of one message, across its pieces, in order.
type gather struct {
	one    [1][]byte // Buf, as a one-piece list
	pieces [][]byte
	pi, po int // current piece and offset in it
}

func (g *gather) reset(m *Message) {
	if len(m.Pieces) > 0 {
		g.pieces = m.Pieces
	} else {
		g.one[0] = m.Buf
		g.pieces = g.one[:]
	}
	g.pi, g.po = 0, 0
}

// skip moves past the next n bytes.
func (g *gather) skip(n int) {
	for n > 0 && g.pi < len(g.pieces) {
		k := min(n, len(g.pieces[g.pi])-g.po)
		n -= k
		g.advance(k)
	}
}

// read copies the next len(dst) bytes into dst.
func (g *gather) read(dst []byte) {
	for len(dst) > 0 && g.pi < len(g.pieces) {
		k := copy(dst, g.pieces[g.pi][g.po:])
		dst = dst[k:]
		g.advance(k)
	}
}

// advance moves k bytes on within the current piece.
func (g *gather) advance(k int) {
	if g.po += k; g.po >= len(g.pieces[g.pi]) {
		g.pi, g.po = g.pi+1, 0
	}
}

// gatherInto appends m's bytes to b.
func gatherInto(b []byte, m *Message) []byte {
	if len(m.Pieces) == 0 {
		return append(b, m.Buf...)
	}
	for _, p := range m.Pieces {
		b = append(b, p...)
	}
	return b
}

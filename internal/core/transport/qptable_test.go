package transport

import (
	"testing"
)

// tableWith returns a table holding a QP at each of qpns, the cursor at next.
func tableWith(next uint32, qpns ...uint32) *qpTable {
	t := new(qpTable)
	t.init()
	for _, n := range qpns {
		t.insert(n, &QP{qpn: n})
	}
	if next != 0 {
		t.next = next
	}
	return t
}

func TestQPTableAlloc(t *testing.T) {
	fullChunk := func(ci uint32) []uint32 {
		var out []uint32
		for i := uint32(0); i < qpnChunkSize; i++ {
			out = append(out, ci<<qpnChunkBits|i)
		}
		return out
	}
	tests := []struct {
		name string
		tab  *qpTable
		want []uint32 // successive allocations
	}{
		{"empty starts at 0x11", tableWith(0), []uint32{0x11, 0x12, 0x13}},
		{"skips taken", tableWith(0, 0x11, 0x13), []uint32{0x12, 0x14}},
		{"QP 1 does not matter", tableWith(0, 1), []uint32{0x11}},
		{"wraps to 0x11", tableWith(maxQPN), []uint32{maxQPN, 0x11, 0x12}},
		{"wraps past taken", tableWith(maxQPN, maxQPN, 0x11), []uint32{0x12}},
		{"skips a full chunk", tableWith(0x1000, fullChunk(1)...), []uint32{0x2000, 0x2001}},
		{"word boundary", tableWith(0x3F, 0x3F, 0x40), []uint32{0x41}},
		{"cursor in a partly used chunk", tableWith(0x1005, 0x1000, 0x1006), []uint32{0x1005, 0x1007}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			for i, w := range tc.want {
				got := tc.tab.alloc()
				if got != w {
					t.Fatalf("allocation %d = %#x, want %#x", i, got, w)
				}
				tc.tab.insert(got, &QP{qpn: got})
			}
		})
	}
}

func TestQPTableFull(t *testing.T) {
	tab := tableWith(0)
	tab.n = maxQPN + 1 - firstQPN // as if every QPN were taken
	if got := tab.alloc(); got != 0 {
		t.Fatalf("alloc on a full table = %#x, want 0", got)
	}
}

func TestQPTableLookupRemove(t *testing.T) {
	tab := tableWith(0)
	a, b := &QP{qpn: 0x11}, &QP{qpn: 0x5011}
	tab.insert(a.qpn, a)
	tab.insert(b.qpn, b)
	for _, tc := range []struct {
		qpn  uint32
		want *QP
	}{{0x11, a}, {0x5011, b}, {0x12, nil}, {0x6000, nil}, {maxQPN + 1, nil}, {^uint32(0), nil}} {
		if got := tab.lookup(tc.qpn); got != tc.want {
			t.Errorf("lookup(%#x) = %p, want %p", tc.qpn, got, tc.want)
		}
	}
	if got := len(tab.all()); got != 2 {
		t.Fatalf("all: %d QPs, want 2", got)
	}
	tab.remove(&QP{qpn: 0x11}) // another QP with the same number: not removed
	if tab.lookup(0x11) != a {
		t.Fatal("remove of a stranger took the QP out")
	}
	tab.remove(b)
	if tab.lookup(0x5011) != nil || tab.chunks[5].Load() != nil || tab.spare == nil {
		t.Fatal("the emptied chunk is not released to the spare")
	}
	tab.remove(a)
	if tab.n != 0 || len(tab.all()) != 0 {
		t.Fatalf("table not empty: n=%d", tab.n)
	}
	// The spare chunk serves the next range and holds nothing stale.
	c := &QP{qpn: 0x7123}
	tab.insert(c.qpn, c)
	if tab.lookup(0x7011) != nil || tab.lookup(0x7123) != c {
		t.Fatal("reused chunk has stale entries")
	}
}

// TestQPTableChurn creates and destroys QPs in a pattern that leaves holes and
// checks the table against a map.
func TestQPTableChurn(t *testing.T) {
	tab := tableWith(0)
	ref := map[uint32]*QP{}
	var live []*QP
	for i := range 20000 {
		if i%3 == 2 && len(live) > 0 {
			k := (i * 7919) % len(live)
			q := live[k]
			live[k] = live[len(live)-1]
			live = live[:len(live)-1]
			tab.remove(q)
			delete(ref, q.qpn)
			continue
		}
		n := tab.alloc()
		if ref[n] != nil || n < firstQPN {
			t.Fatalf("alloc gave %#x, taken or reserved", n)
		}
		q := &QP{qpn: n}
		tab.insert(n, q)
		ref[n] = q
		live = append(live, q)
	}
	if tab.n != len(ref) || len(tab.all()) != len(ref) {
		t.Fatalf("table holds %d (%d listed), want %d", tab.n, len(tab.all()), len(ref))
	}
	for n, q := range ref {
		if tab.lookup(n) != q {
			t.Fatalf("lookup(%#x) wrong", n)
		}
	}
}

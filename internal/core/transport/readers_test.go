package transport

import (
	"bytes"
	"testing"
	"time"

	"github.com/goroce/goroce/internal/core/verbs"
	"github.com/goroce/goroce/link"
)

// TestEngineReadsEveryReceivePath: over a link with several receive paths
// (link.Receivers, as a UDP link with Config.Readers > 1 has), the engine
// runs a reader on each. The link spreads the QPs' source ports over the
// paths, so RC WRITEs on 8 QPs complete only if every path is read.
func TestEngineReadsEveryReceivePath(t *testing.T) {
	la, lb := link.NewPipe(addrA, addrB, link.PipeConfig{Readers: 3}, link.PipeConfig{Readers: 3})
	a, b := newNode(t, la, 2), newNode(t, lb, 2)
	defer a.close(t)
	defer b.close(t)
	const qps, size = 8, 3000
	src := a.mem.reg(1, pattern(size, 7), verbs.AccessLocalWrite)
	var dsts []*Region
	for i := range qps {
		qa, _ := rcPair(t, a, b, rcOpts{})
		dst := b.mem.reg(1, make([]byte, size), verbs.AccessLocalWrite|verbs.AccessRemoteWrite)
		dsts = append(dsts, dst)
		if _, err := qa.PostSend([]verbs.SendWR{{WRID: uint64(i), Opcode: verbs.WRRDMAWrite, Flags: verbs.SendSignaled,
			SGL: []verbs.SGE{src.sge(0, size)}, RemoteAddr: dst.Addr, RKey: dst.RKey}}); err != nil {
			t.Fatal(err)
		}
	}
	for _, wc := range waitWC(t, a.scq, qps, 5*time.Second) {
		if wc.Status != 0 {
			t.Fatalf("completion %s", wcString(wc))
		}
	}
	for i, d := range dsts {
		if !bytes.Equal(d.Buf, src.Buf) {
			t.Fatalf("QP %d: data differs", i)
		}
	}
}

// TestTrainRefsDropPerRun: a slice's releases drop one reference per segment,
// a run of one train's segments at once, and release a lone datagram's
// buffer as it comes.
func TestTrainRefsDropPerRun(t *testing.T) {
	t1, t2 := new(rxTrain), new(rxTrain)
	t1.refs.Store(5) // the reader's own and four segments'
	t2.refs.Store(3)
	dg := rxItem{buf: link.GetBuffer()}
	items := []rxItem{{train: t1}, {train: t1}, {train: t2}, dg, {train: t1}, {train: t2}, {train: t1}}
	var rel trainRefs
	for i := range items {
		rel.release(&items[i])
		if items[i].train != nil || items[i].buf != nil {
			t.Fatalf("item %d still holds its buffer after release", i)
		}
	}
	rel.flush()
	if n1, n2 := t1.refs.Load(), t2.refs.Load(); n1 != 1 || n2 != 1 {
		t.Fatalf("references left: %d and %d, want the readers' own (1 each)", n1, n2)
	}
	rel.flush() // nothing counted: no effect
	if t1.refs.Load() != 1 {
		t.Fatal("an empty flush dropped a reference")
	}
}

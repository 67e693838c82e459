package transport

import (
	"bytes"
	"testing"
	"testing/synctest"
	"time"

	"github.com/goroce/goroce/internal/core/verbs"
	"github.com/goroce/goroce/link/impair"
)

// TestReadWindowSlowerThanTimeout: a window of one-packet READs, each of its
// own remote bytes, over a wire whose round trip is longer than the QP's
// timeout, so that every round times out, probes, and the answers to the
// first transmission arrive after the rewind. Every READ must complete, in
// order, with its own bytes. In virtual time.
//
// It stalled for good after two READs (roce-perftest read_bw under -race with
// GOMAXPROCS 1 hit the same: "130/300 posted and 2 completed"): the answer
// to the second READ's first transmission completed it while the probe had
// only started it, and the requester went on to the third WQE at the second
// one's PSN; the answers to the rest moved the completer's PSN past WQEs
// that were rewound and never completed. From then on every retransmitted
// READ carried the PSN of the one before it, the responder found no saved
// READ with that PSN and range and dropped it, and the probe repeated
// forever.
func TestReadWindowSlowerThanTimeout(t *testing.T) {
	for _, tc := range []struct {
		name string
		loss impair.LossConfig
	}{
		{"delay", impair.LossConfig{Delay: 50 * time.Millisecond}},
		{"delay+dup+reorder/1", impair.LossConfig{Seed: 1, Dup: 0.05, Reorder: 0.05, Delay: 50 * time.Millisecond}},
		{"delay+dup+reorder/2", impair.LossConfig{Seed: 2, Dup: 0.05, Reorder: 0.05, Delay: 50 * time.Millisecond}},
		{"delay+dup+reorder/3", impair.LossConfig{Seed: 3, Dup: 0.05, Reorder: 0.05, Delay: 50 * time.Millisecond}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) { readWindow(t, tc.loss) })
		})
	}
}

func readWindow(t *testing.T, loss impair.LossConfig) {
	const n, window, size = 300, 16, 64
	a, b := pair(t, &loss)
	defer a.close(t)
	defer b.close(t)
	qa, _ := rcPair(t, a, b, rcOpts{timeout: 12, maxRD: window}) // 16.8 ms, a third of one way
	remote := b.mem.reg(1, pattern(n*size, 9), verbs.AccessRemoteRead)
	local := a.mem.reg(1, make([]byte, n*size), verbs.AccessLocalWrite)
	buf := make([]verbs.WC, 64)
	posted, done := 0, 0
	// Each READ takes a few round trips at most; a minute of virtual time
	// without a completion is a stall.
	for deadline := time.Now().Add(time.Minute); done < n; time.Sleep(time.Millisecond) {
		for posted < n && posted-done < window {
			wr := verbs.SendWR{WRID: uint64(posted), Opcode: verbs.WRRDMARead, Flags: verbs.SendSignaled,
				RemoteAddr: remote.Addr + uint64(posted*size), RKey: remote.RKey, SGL: []verbs.SGE{local.sge(posted*size, size)}}
			if _, err := qa.PostSend([]verbs.SendWR{wr}); err != nil {
				t.Fatal(err)
			}
			posted++
		}
		enginePoll(a.scq)
		k, _ := a.scq.Poll(buf)
		for _, w := range buf[:k] {
			if w.Status != verbs.WCSuccess || w.WRID != uint64(done) {
				t.Fatalf("completion %s, want wr %d success", wcString(w), done)
			}
			done++
			deadline = time.Now().Add(time.Minute)
		}
		if k == 0 && time.Now().After(deadline) {
			st := a.e.Stats()
			t.Fatalf("stalled after %d of %d READs (%d posted): %d timeouts, %d retransmissions; the peer counted %d duplicates",
				done, n, posted, st.Timeouts.Load(), st.Retransmits.Load(), b.e.Stats().DuplicateRequests.Load())
		}
	}
	if !bytes.Equal(local.Buf, remote.Buf) {
		t.Fatal("the READs placed other bytes than the peer's")
	}
}

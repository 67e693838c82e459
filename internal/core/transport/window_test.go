package transport

import (
	"testing"

	"github.com/goroce/goroce/bth"
)

// win is a send window for the rule tables: WQEs head and next, PSNs at
// headPSN, nextPSN and maxPSN (near the 24-bit wrap, so every rule is
// checked across it).
func win(head, next uint64, headPSN, nextPSN, maxPSN int) sendWindow {
	base := bth.PSN(bth.PSNMask - 10)
	return sendWindow{head: head, next: next, headPSN: base.Add(headPSN), nextPSN: base.Add(nextPSN), maxPSN: base.Add(maxPSN)}
}

func psnAt(off int) bth.PSN { return bth.PSN(bth.PSNMask - 10).Add(off) }

// TestSendWindowRules: the go-back-N rules the requester and completer
// share, one row each: the window before, the rule applied, the window
// after and what the rule reported.
func TestSendWindowRules(t *testing.T) {
	probing := func(w sendWindow) sendWindow { w.probing = true; return w }
	retrying := func(w sendWindow) sendWindow { w.needRetry = true; return w }
	off := func(w sendWindow, n uint32) sendWindow { w.nextOff = n; return w }
	for _, tc := range []struct {
		name   string
		before sendWindow
		rule   func(w *sendWindow) bool
		after  sendWindow
		want   bool
	}{
		{"full: 127 PSNs unacknowledged leave room", win(0, 1, 0, 127, 127), (*sendWindow).full, win(0, 1, 0, 127, 127), false},
		{"full: 128 PSNs unacknowledged (RXE_MAX_UNACKED_PSNS)", win(0, 1, 0, 128, 128), (*sendWindow).full, win(0, 1, 0, 128, 128), true},
		{"full: a probe out holds the window", probing(win(0, 1, 0, 1, 40)), (*sendWindow).full, probing(win(0, 1, 0, 1, 40)), true},
		{"full: a probe may go out", probing(win(0, 0, 5, 5, 40)), (*sendWindow).full, probing(win(0, 0, 5, 5, 40)), false},
		{"sent: a new packet moves maxPSN", win(0, 0, 0, 3, 3), func(w *sendWindow) bool { return w.sent(1, 1024, true) },
			off(win(0, 0, 0, 4, 4), 1024), false},
		{"sent: a resent packet is a retransmission", win(0, 0, 0, 3, 9), func(w *sendWindow) bool { return w.sent(1, 1024, true) },
			off(win(0, 0, 0, 4, 9), 1024), true},
		{"sent: a READ takes a PSN per response packet", win(0, 0, 0, 0, 0), func(w *sendWindow) bool { return w.sent(16, 0, true) },
			win(0, 0, 0, 16, 16), false},
		{"sent: UC never resends", win(0, 0, 0, 3, 9), func(w *sendWindow) bool { return w.sent(1, 8, false) },
			off(win(0, 0, 0, 4, 4), 8), true},
		{"nextWQE", off(win(0, 0, 0, 4, 4), 9), func(w *sendWindow) bool { w.nextWQE(); return false }, win(0, 1, 0, 4, 4), false},
		{"ghost: the first PSN never sent", win(0, 0, 0, 5, 5), func(w *sendWindow) bool { return w.ghost(psnAt(5)) }, win(0, 0, 0, 5, 5), true},
		{"ghost: the last PSN sent", win(0, 0, 0, 5, 5), func(w *sendWindow) bool { return w.ghost(psnAt(4)) }, win(0, 0, 0, 5, 5), false},
		{"clampSent: nothing acknowledges a PSN never sent", win(0, 0, 0, 5, 5), func(w *sendWindow) bool { return w.clampSent(psnAt(9)) == psnAt(5) },
			win(0, 0, 0, 5, 5), true},
		{"ack: forward", win(0, 1, 0, 5, 5), func(w *sendWindow) bool { return w.ack(psnAt(3)) }, win(0, 1, 3, 5, 5), true},
		{"ack: never back", win(0, 1, 3, 5, 5), func(w *sendWindow) bool { return w.ack(psnAt(2)) }, win(0, 1, 3, 5, 5), false},
		{"retireHead: the requester is ahead", win(2, 5, 3, 9, 9), func(w *sendWindow) bool { w.retireHead(); return false }, win(3, 5, 3, 9, 9), false},
		{"retireHead: a probe had restarted the completed WQE", off(win(2, 2, 8, 4, 9), 512), func(w *sendWindow) bool { w.retireHead(); return false },
			win(3, 3, 8, 8, 9), false},
		{"flushed", off(win(4, 6, 3, 9, 9), 100), func(w *sendWindow) bool { w.flushed(); return false }, win(4, 4, 3, 9, 9), false},
		{"goBack: to the head WQE's start", retrying(off(win(2, 5, 3, 9, 9), 7)), func(w *sendWindow) bool { w.goBack(false, 0, 1024); return false },
			win(2, 2, 3, 3, 9), false},
		{"goBack: into the head WQE, acknowledged up to its third packet", retrying(win(2, 5, 3, 9, 9)),
			func(w *sendWindow) bool { w.goBack(true, psnAt(1), 1024); return false }, off(win(2, 2, 3, 3, 9), 2048), false},
		{"ackedInside: the head PSN past the WQE's first", win(0, 1, 3, 9, 9), func(w *sendWindow) bool { return w.ackedInside(psnAt(1), psnAt(6)) },
			win(0, 1, 3, 9, 9), true},
		{"ackedInside: at the WQE's first", win(0, 1, 1, 9, 9), func(w *sendWindow) bool { return w.ackedInside(psnAt(1), psnAt(6)) },
			win(0, 1, 1, 9, 9), false},
		{"ackedInside: past the WQE's last", win(0, 1, 7, 9, 9), func(w *sendWindow) bool { return w.ackedInside(psnAt(1), psnAt(6)) },
			win(0, 1, 7, 9, 9), false},
		{"busy", win(0, 1, 0, 1, 1), (*sendWindow).busy, win(0, 1, 0, 1, 1), true},
		{"not busy", win(1, 1, 1, 1, 1), (*sendWindow).busy, win(1, 1, 1, 1, 1), false},
		{"startAt", probing(retrying(win(3, 7, 1, 9, 9))), func(w *sendWindow) bool { w.startAt(5, psnAt(2)); return false },
			win(5, 5, 2, 2, 2), false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			w := tc.before
			if got := tc.rule(&w); got != tc.want {
				t.Errorf("reported %v, want %v", got, tc.want)
			}
			if w != tc.after {
				t.Errorf("window %+v, want %+v", w, tc.after)
			}
		})
	}
}

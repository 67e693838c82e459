package cq

import (
	"errors"
	"testing"

	"github.com/goroce/goroce/internal/core/verbs"
)

// FuzzQueueOps drives a CQ with a byte-coded sequence of Push, Poll, Resize
// and ReqNotify and checks it against a plain-slice model: same completions
// in the same order, overrun exactly when the model is full, one event per
// arm at most.
func FuzzQueueOps(f *testing.F) {
	f.Add(byte(3), []byte{0, 0, 0, 1, 2, 0, 0, 0, 0})             // fill, poll, overrun
	f.Add(byte(1), []byte{3, 0, 2, 0x40, 0, 0, 1, 5, 0})          // arm, resize up, push
	f.Add(byte(8), []byte{0, 0, 0, 0, 0, 2, 0x21, 1, 0, 4, 0, 1}) // shrink below held, solicited arm
	f.Fuzz(func(t *testing.T, size byte, ops []byte) {
		const maxCQE = 64
		q, err := New(int(size), maxCQE)
		if size < 1 || size > maxCQE {
			if err == nil {
				t.Fatalf("New(%d) accepted", size)
			}
			return
		}
		if err != nil {
			t.Fatal(err)
		}
		var model []uint64
		capacity := int(size)
		armed := 0 // 0 none, 1 solicited, 2 next
		overran := false
		next := uint64(0)
		out := make([]verbs.WC, 8)
		for i := 0; i < len(ops); i++ {
			op, arg := ops[i]&3, int(ops[i]>>2)
			switch op {
			case 0: // push; arg bit 0 = solicited, bit 1 = error status
				wc := verbs.WC{WRID: next}
				if arg&2 != 0 {
					wc.Status = verbs.WCRemOpErr
				}
				err := q.Push(&wc, arg&1 != 0)
				switch {
				case overran:
					if err == nil || errors.Is(err, ErrOverrun) {
						t.Fatalf("push after overrun: %v", err)
					}
				case len(model) == capacity:
					if !errors.Is(err, ErrOverrun) {
						t.Fatalf("push into full CQ: %v", err)
					}
					overran = true
					armed = 0
					<-q.Notify()
				default:
					if err != nil {
						t.Fatalf("push: %v", err)
					}
					model = append(model, next)
					fire := armed == 2 || (armed == 1 && (arg&1 != 0 || wc.Status != verbs.WCSuccess))
					if got := notified(q); got != fire {
						t.Fatalf("push %d: event %v, want %v", next, got, fire)
					}
					if fire {
						armed = 0
					}
				}
				next++
			case 1: // poll up to arg%9
				n, err := q.Poll(out[:arg%9])
				want := min(arg%9, len(model))
				if n != want {
					t.Fatalf("poll %d: got %d, want %d", arg%9, n, want)
				}
				for k := 0; k < n; k++ {
					if out[k].WRID != model[k] {
						t.Fatalf("poll: got wr_id %d, want %d", out[k].WRID, model[k])
					}
				}
				model = model[n:]
				if (err != nil) != (overran && n == 0 && arg%9 > 0) {
					t.Fatalf("poll err %v (overran %v, n %d)", err, overran, n)
				}
			case 2: // resize to arg
				got, err := q.Resize(arg, maxCQE)
				ok := !overran && arg >= 1 && arg >= len(model)
				if (err == nil) != ok {
					t.Fatalf("resize %d with %d held (overran %v): %v", arg, len(model), overran, err)
				}
				if ok {
					if got < arg {
						t.Fatalf("resize %d gave %d", arg, got)
					}
					capacity = got
				}
			case 3: // arm; arg bit 0 = solicited only
				err := q.ReqNotify(arg&1 != 0)
				if (err != nil) != overran {
					t.Fatalf("ReqNotify: %v (overran %v)", err, overran)
				}
				if err == nil {
					if arg&1 == 0 {
						armed = 2
					} else if armed != 2 {
						armed = 1
					}
				}
			}
			if q.Len() != len(model) || q.Cap() != capacity {
				t.Fatalf("Len %d Cap %d, model %d %d", q.Len(), q.Cap(), len(model), capacity)
			}
		}
	})
}

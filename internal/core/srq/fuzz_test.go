package srq

import (
	"errors"
	"syscall"
	"testing"

	"github.com/goroce/goroce/internal/core/verbs"
)

// FuzzQueueOps drives a queue with a byte-coded sequence of PostRecv, Pop,
// resize and arm and checks it against a plain-slice model: same WRs and
// SGEs in the same order, the same errnos, one limit event per crossing.
func FuzzQueueOps(f *testing.F) {
	f.Add(byte(4), byte(2), []byte{0x04, 0x04, 0x09, 0x01, 0x01, 0x0e, 0x03})
	f.Add(byte(2), byte(1), []byte{0x00, 0x00, 0x00, 0x2a, 0x1e, 0x01, 0x01, 0x01})
	f.Add(byte(8), byte(3), []byte{0x0c, 0x08, 0x12, 0x07, 0x01, 0x01, 0x01, 0x01, 0x02})
	f.Fuzz(func(t *testing.T, maxWR, maxSGE byte, ops []byte) {
		caps := Caps{MaxWR: 32, MaxSGE: 4, Resize: true}
		q, err := New(&verbs.SRQAttr{MaxWR: uint32(maxWR), MaxSGE: uint32(maxSGE)}, caps)
		if maxWR < 1 || uint32(maxWR) > caps.MaxWR || maxSGE < 1 || uint32(maxSGE) > caps.MaxSGE {
			if !errors.Is(err, syscall.EINVAL) {
				t.Fatalf("New(%d, %d) = %v, want EINVAL", maxWR, maxSGE, err)
			}
			return
		}
		if err != nil {
			t.Fatal(err)
		}
		events := 0
		q.SetLimitHandler(func() { events++ })
		var model []verbs.RecvWR
		capacity, limit, wantEvents := int(maxWR), 0, 0
		crossed := func() {
			if limit > 0 && len(model) < limit {
				limit = 0
				wantEvents++
			}
		}
		next := uint64(0)
		var dst verbs.RecvWR
		for _, b := range ops {
			op, arg := b&3, int(b>>2)
			switch op {
			case 0: // post arg%3+1 WRs with arg%6 SGEs each
				wrs := make([]verbs.RecvWR, arg%3+1)
				for i := range wrs {
					wrs[i] = wr(next+uint64(i), arg%6)
				}
				n, err := q.PostRecv(wrs)
				want := len(wrs)
				var errno syscall.Errno
				if arg%6 > int(maxSGE) {
					want, errno = 0, syscall.EINVAL
				} else if room := capacity - len(model); room < want {
					want, errno = room, syscall.ENOMEM
				}
				if n != want || (errno == 0) != (err == nil) || (errno != 0 && !errors.Is(err, errno)) {
					t.Fatalf("post %d WRs of %d SGEs: %d, %v; want %d, %v", len(wrs), arg%6, n, err, want, errno)
				}
				model = append(model, wrs[:n]...)
				next += uint64(len(wrs))
			case 1: // pop
				ok := q.Pop(&dst)
				if ok != (len(model) > 0) {
					t.Fatalf("pop = %v with %d in model", ok, len(model))
				}
				if ok {
					w := model[0]
					model = model[1:]
					if dst.WRID != w.WRID || len(dst.SGL) != len(w.SGL) {
						t.Fatalf("pop got %+v, want %+v", dst, w)
					}
					for i := range w.SGL {
						if dst.SGL[i] != w.SGL[i] {
							t.Fatalf("pop SGE %d: %+v, want %+v", i, dst.SGL[i], w.SGL[i])
						}
					}
					crossed()
				}
			case 2: // resize to arg
				a := verbs.SRQAttr{MaxWR: uint32(arg)}
				err := q.Modify(&a, verbs.SRQMaxWR)
				ok := arg >= 1 && arg <= int(caps.MaxWR) && arg >= len(model) && arg >= limit
				if (err == nil) != ok {
					t.Fatalf("resize %d (held %d, limit %d): %v", arg, len(model), limit, err)
				}
				if ok {
					capacity = int(a.MaxWR)
				}
			case 3: // arm with arg
				err := q.Modify(&verbs.SRQAttr{Limit: uint32(arg)}, verbs.SRQLimit)
				if (err == nil) != (arg <= capacity) {
					t.Fatalf("arm %d with max_wr %d: %v", arg, capacity, err)
				}
				if err == nil {
					limit = arg
					crossed()
				}
			}
			a, err := q.Query()
			if err != nil || q.Len() != len(model) || int(a.MaxWR) != capacity || int(a.Limit) != limit || events != wantEvents {
				t.Fatalf("state: len %d attr %+v events %d (%v); model len %d cap %d limit %d events %d",
					q.Len(), a, events, err, len(model), capacity, limit, wantEvents)
			}
		}
	})
}

package srq

import (
	"syscall"
	"testing"

	"github.com/goroce/goroce/internal/core/verbs"
)

// Tests named after the rules of ibv_modify_srq(3) and its companion page
// (libibverbs man page and Dotan Barak's ibv_modify_srq() page).

func TestModifySRQ_MaxWRRangeIsOneToDeviceMax(t *testing.T) {
	for _, tc := range []struct {
		name  string
		maxWR uint32
		ok    bool
	}{
		{"zero", 0, false},
		{"one", 1, true},
		{"device max", testCaps.MaxWR, true},
		{"above device max", testCaps.MaxWR + 1, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			q := newQueue(t, 8, 1, testCaps)
			a := verbs.SRQAttr{MaxWR: tc.maxWR}
			err := q.Modify(&a, verbs.SRQMaxWR)
			if tc.ok {
				if err != nil {
					t.Fatalf("Modify(max_wr=%d): %v", tc.maxWR, err)
				}
				if got := mustQuery(t, q).MaxWR; got < tc.maxWR {
					t.Fatalf("max_wr = %d, want >= %d", got, tc.maxWR)
				}
				return
			}
			wantErrno(t, err, syscall.EINVAL)
			if got := mustQuery(t, q).MaxWR; got != 8 {
				t.Fatalf("max_wr changed to %d after failed Modify", got)
			}
		})
	}
}

func TestModifySRQ_LimitRangeIsZeroToMaxWR(t *testing.T) {
	for _, tc := range []struct {
		limit uint32
		ok    bool
	}{{0, true}, {1, true}, {8, true}, {9, false}, {1 << 31, false}} {
		q := newQueue(t, 8, 1, testCaps)
		err := q.Modify(&verbs.SRQAttr{Limit: tc.limit}, verbs.SRQLimit)
		if tc.ok && err != nil {
			t.Errorf("limit %d: %v", tc.limit, err)
		}
		if !tc.ok {
			wantErrno(t, err, syscall.EINVAL)
		}
	}
}

func TestModifySRQ_LimitAboveMaxWRIsEINVAL_NothingChanges(t *testing.T) {
	q := newQueue(t, 8, 1, testCaps)
	post(t, q, 1, 2, 3)
	if err := q.Modify(&verbs.SRQAttr{Limit: 2}, verbs.SRQLimit); err != nil {
		t.Fatal(err)
	}
	before := mustQuery(t, q)
	err := q.Modify(&verbs.SRQAttr{Limit: 9}, verbs.SRQLimit)
	wantErrno(t, err, syscall.EINVAL)
	if after := mustQuery(t, q); after != before {
		t.Fatalf("attrs changed: %+v -> %+v", before, after)
	}
	if q.Len() != 3 {
		t.Fatalf("Len = %d, want 3", q.Len())
	}
}

func TestModifySRQ_LimitIsCheckedAgainstNewMaxWRWhenBothAreSet(t *testing.T) {
	q := newQueue(t, 8, 1, testCaps)
	wantErrno(t, q.Modify(&verbs.SRQAttr{MaxWR: 4, Limit: 5}, verbs.SRQMaxWR|verbs.SRQLimit), syscall.EINVAL)
	if a := mustQuery(t, q); a.MaxWR != 8 {
		t.Fatalf("max_wr changed to %d", a.MaxWR)
	}
	// 12 is above the old max_wr 8 but within the new 16.
	fired := limitCounter(q)
	if err := q.Modify(&verbs.SRQAttr{MaxWR: 16, Limit: 12}, verbs.SRQMaxWR|verbs.SRQLimit); err != nil {
		t.Fatalf("limit 12 with new max_wr 16: %v", err)
	}
	if a := mustQuery(t, q); a.MaxWR != 16 || *fired != 1 {
		t.Fatalf("Query = %+v, fired %d; want max_wr 16 and the event (0 outstanding < 12)", a, *fired)
	}
}

func TestModifySRQ_MaskZeroChangesNothing(t *testing.T) {
	q := newQueue(t, 8, 2, testCaps)
	post(t, q, 1, 2)
	before := mustQuery(t, q)
	a := verbs.SRQAttr{MaxWR: 1, MaxSGE: 9, Limit: 7}
	if err := q.Modify(&a, 0); err != nil {
		t.Fatalf("Modify(mask 0): %v", err)
	}
	if after := mustQuery(t, q); after != before || q.Len() != 2 {
		t.Fatalf("mask 0 changed the SRQ: %+v -> %+v, len %d", before, after, q.Len())
	}
	if a != (verbs.SRQAttr{MaxWR: 1, MaxSGE: 9, Limit: 7}) {
		t.Fatalf("mask 0 wrote attr: %+v", a)
	}
}

func TestModifySRQ_UnknownMaskBitIsEINVAL(t *testing.T) {
	q := newQueue(t, 8, 1, testCaps)
	wantErrno(t, q.Modify(&verbs.SRQAttr{Limit: 1}, verbs.SRQLimit|4), syscall.EINVAL)
	if mustQuery(t, q).Limit != 0 {
		t.Fatal("limit armed despite invalid mask")
	}
}

func TestModifySRQ_MaskBitsCanBeCombined(t *testing.T) {
	q := newQueue(t, 8, 1, testCaps)
	post(t, q, seq(1, 6)...)
	a := verbs.SRQAttr{MaxWR: 32, Limit: 3}
	if err := q.Modify(&a, verbs.SRQMaxWR|verbs.SRQLimit); err != nil {
		t.Fatal(err)
	}
	if got := mustQuery(t, q); got.MaxWR != 32 || got.Limit != 3 {
		t.Fatalf("Query = %+v", got)
	}
}

func TestModifySRQ_ResizeWithoutDeviceSupportIsENOSYS(t *testing.T) {
	q := newQueue(t, 8, 1, Caps{MaxWR: 64, MaxSGE: 4, Resize: false})
	wantErrno(t, q.Modify(&verbs.SRQAttr{MaxWR: 16}, verbs.SRQMaxWR), syscall.ENOSYS)
	if mustQuery(t, q).MaxWR != 8 {
		t.Fatal("max_wr changed")
	}
	// Setting only the limit needs no resize support.
	if err := q.Modify(&verbs.SRQAttr{Limit: 4}, verbs.SRQLimit); err != nil {
		t.Fatalf("limit without resize support: %v", err)
	}
}

func TestModifySRQ_ResizeWritesActualAttrsBack(t *testing.T) {
	q := newQueue(t, 8, 3, testCaps)
	a := verbs.SRQAttr{MaxWR: 20, MaxSGE: 0}
	if err := q.Modify(&a, verbs.SRQMaxWR); err != nil {
		t.Fatal(err)
	}
	got := mustQuery(t, q)
	if a.MaxWR != got.MaxWR || a.MaxSGE != got.MaxSGE || a.MaxWR < 20 || a.MaxSGE != 3 {
		t.Fatalf("written back %+v, queue has %+v", a, got)
	}
}

func TestModifySRQ_MaxSGEIsIgnored(t *testing.T) {
	// ibv_modify_srq(3): max_sge is "irrelevant for ibv_modify_srq".
	q := newQueue(t, 8, 2, testCaps)
	a := verbs.SRQAttr{MaxWR: 8, MaxSGE: testCaps.MaxSGE + 10}
	if err := q.Modify(&a, verbs.SRQMaxWR); err != nil {
		t.Fatal(err)
	}
	if mustQuery(t, q).MaxSGE != 2 {
		t.Fatal("max_sge changed")
	}
}

func TestModifySRQ_ResizeBelowOutstandingIsEINVAL(t *testing.T) {
	q := newQueue(t, 8, 1, testCaps)
	post(t, q, seq(1, 5)...)
	wantErrno(t, q.Modify(&verbs.SRQAttr{MaxWR: 4}, verbs.SRQMaxWR), syscall.EINVAL)
	if a := mustQuery(t, q); a.MaxWR != 8 || q.Len() != 5 {
		t.Fatalf("after failed resize: %+v len %d", a, q.Len())
	}
	if err := q.Modify(&verbs.SRQAttr{MaxWR: 5}, verbs.SRQMaxWR); err != nil {
		t.Fatalf("resize to exactly the outstanding count: %v", err)
	}
}

func TestModifySRQ_ResizeBelowArmedLimitIsEINVAL(t *testing.T) {
	q := newQueue(t, 8, 1, testCaps)
	post(t, q, seq(1, 6)...)
	if err := q.Modify(&verbs.SRQAttr{Limit: 6}, verbs.SRQLimit); err != nil {
		t.Fatal(err)
	}
	wantErrno(t, q.Modify(&verbs.SRQAttr{MaxWR: 5}, verbs.SRQMaxWR), syscall.EINVAL)
}

func TestModifySRQ_ResizeKeepsOutstandingWRsInOrder(t *testing.T) {
	q := newQueue(t, 4, 2, testCaps)
	post(t, q, 1, 2, 3, 4)
	popIDs(t, q, 2) // move head off slot 0 so the ring wraps
	if _, err := q.PostRecv([]verbs.RecvWR{wr(5, 2), wr(6, 2)}); err != nil {
		t.Fatal(err)
	}
	for _, n := range []uint32{16, 4} { // grow, then shrink back
		if err := q.Modify(&verbs.SRQAttr{MaxWR: n}, verbs.SRQMaxWR); err != nil {
			t.Fatal(err)
		}
	}
	var got []verbs.RecvWR
	var dst verbs.RecvWR
	for q.Pop(&dst) {
		got = append(got, verbs.RecvWR{WRID: dst.WRID, SGL: append([]verbs.SGE(nil), dst.SGL...)})
	}
	want := []verbs.RecvWR{wr(3, 1), wr(4, 1), wr(5, 2), wr(6, 2)}
	if len(got) != len(want) {
		t.Fatalf("got %d WRs, want %d", len(got), len(want))
	}
	for i := range want {
		if got[i].WRID != want[i].WRID || len(got[i].SGL) != len(want[i].SGL) {
			t.Fatalf("WR %d = %+v, want %+v", i, got[i], want[i])
		}
		for j := range want[i].SGL {
			if got[i].SGL[j] != want[i].SGL[j] {
				t.Fatalf("WR %d SGE %d = %+v, want %+v", i, j, got[i].SGL[j], want[i].SGL[j])
			}
		}
	}
}

func TestModifySRQ_ResizeGrowsRoomForMorePosts(t *testing.T) {
	q := newQueue(t, 2, 1, testCaps)
	post(t, q, 1, 2)
	if _, err := q.PostRecv([]verbs.RecvWR{wr(3, 1)}); err == nil {
		t.Fatal("third post into max_wr 2 succeeded")
	}
	if err := q.Modify(&verbs.SRQAttr{MaxWR: 3}, verbs.SRQMaxWR); err != nil {
		t.Fatal(err)
	}
	post(t, q, 3)
	if got := drainIDs(q); !equalIDs(got, []uint64{1, 2, 3}) {
		t.Fatalf("ids %v", got)
	}
}

func TestModifySRQ_AnyInvalidAttributeChangesNothing(t *testing.T) {
	for _, tc := range []struct {
		name string
		caps Caps
		attr verbs.SRQAttr
		mask verbs.SRQAttrMask
		want syscall.Errno
	}{
		{"valid limit, max_wr zero", testCaps, verbs.SRQAttr{MaxWR: 0, Limit: 1}, verbs.SRQMaxWR | verbs.SRQLimit, syscall.EINVAL},
		{"valid limit, max_wr above device", testCaps, verbs.SRQAttr{MaxWR: 65, Limit: 1}, verbs.SRQMaxWR | verbs.SRQLimit, syscall.EINVAL},
		{"valid limit, max_wr below outstanding", testCaps, verbs.SRQAttr{MaxWR: 2, Limit: 1}, verbs.SRQMaxWR | verbs.SRQLimit, syscall.EINVAL},
		{"valid max_wr, limit above it", testCaps, verbs.SRQAttr{MaxWR: 16, Limit: 17}, verbs.SRQMaxWR | verbs.SRQLimit, syscall.EINVAL},
		{"valid limit, resize unsupported", Caps{MaxWR: 64, MaxSGE: 4}, verbs.SRQAttr{MaxWR: 16, Limit: 1}, verbs.SRQMaxWR | verbs.SRQLimit, syscall.ENOSYS},
		{"valid both, unknown bit", testCaps, verbs.SRQAttr{MaxWR: 16, Limit: 1}, verbs.SRQMaxWR | verbs.SRQLimit | 8, syscall.EINVAL},
	} {
		t.Run(tc.name, func(t *testing.T) {
			q := newQueue(t, 8, 1, tc.caps)
			post(t, q, 1, 2, 3)
			fired := limitCounter(q)
			if err := q.Modify(&verbs.SRQAttr{Limit: 2}, verbs.SRQLimit); err != nil {
				t.Fatal(err)
			}
			before := mustQuery(t, q)
			a := tc.attr
			wantErrno(t, q.Modify(&a, tc.mask), tc.want)
			if after := mustQuery(t, q); after != before {
				t.Fatalf("attrs changed: %+v -> %+v", before, after)
			}
			if a != tc.attr {
				t.Fatalf("failed Modify wrote attr: %+v", a)
			}
			if *fired != 0 {
				t.Fatal("failed Modify raised the limit event")
			}
			if got := drainIDs(q); !equalIDs(got, []uint64{1, 2, 3}) {
				t.Fatalf("WRs changed: %v", got)
			}
		})
	}
}

func TestModifySRQ_ArmedLimitCanBeChanged(t *testing.T) {
	q := newQueue(t, 16, 1, testCaps)
	post(t, q, seq(1, 10)...)
	fired := limitCounter(q)
	if err := q.Modify(&verbs.SRQAttr{Limit: 3}, verbs.SRQLimit); err != nil {
		t.Fatal(err)
	}
	if err := q.Modify(&verbs.SRQAttr{Limit: 8}, verbs.SRQLimit); err != nil {
		t.Fatal(err)
	}
	if got := mustQuery(t, q).Limit; got != 8 {
		t.Fatalf("limit = %d, want 8", got)
	}
	popIDs(t, q, 2) // 8 left: not below 8
	if *fired != 0 {
		t.Fatal("event at 8 outstanding with limit 8")
	}
	popIDs(t, q, 1) // 7 < 8
	if *fired != 1 {
		t.Fatalf("fired %d times, want 1 (the new limit 8 applies, not 3)", *fired)
	}
}

func TestModifySRQ_LimitAboveOutstandingRaisesEventImmediately(t *testing.T) {
	q := newQueue(t, 16, 1, testCaps)
	post(t, q, 1, 2, 3)
	fired := limitCounter(q)
	if err := q.Modify(&verbs.SRQAttr{Limit: 4}, verbs.SRQLimit); err != nil {
		t.Fatal(err)
	}
	if *fired != 1 {
		t.Fatalf("fired %d times, want 1 at once", *fired)
	}
	if got := mustQuery(t, q).Limit; got != 0 {
		t.Fatalf("limit after immediate event = %d, want 0 (disarmed)", got)
	}
}

func TestModifySRQ_LimitOnEmptySRQRaisesEventImmediately(t *testing.T) {
	q := newQueue(t, 16, 1, testCaps)
	fired := limitCounter(q)
	if err := q.Modify(&verbs.SRQAttr{Limit: 1}, verbs.SRQLimit); err != nil {
		t.Fatal(err)
	}
	if *fired != 1 {
		t.Fatalf("fired %d times, want 1", *fired)
	}
}

func TestModifySRQ_LimitEqualToOutstandingWaitsForNextTake(t *testing.T) {
	q := newQueue(t, 16, 1, testCaps)
	post(t, q, 1, 2, 3)
	fired := limitCounter(q)
	if err := q.Modify(&verbs.SRQAttr{Limit: 3}, verbs.SRQLimit); err != nil {
		t.Fatal(err)
	}
	if *fired != 0 {
		t.Fatal("limit equal to outstanding fired at once")
	}
	popIDs(t, q, 1)
	if *fired != 1 {
		t.Fatalf("fired %d times after dropping to 2, want 1", *fired)
	}
}

func TestModifySRQ_LimitZeroDisarms(t *testing.T) {
	q := newQueue(t, 16, 1, testCaps)
	post(t, q, seq(1, 5)...)
	fired := limitCounter(q)
	if err := q.Modify(&verbs.SRQAttr{Limit: 3}, verbs.SRQLimit); err != nil {
		t.Fatal(err)
	}
	if err := q.Modify(&verbs.SRQAttr{Limit: 0}, verbs.SRQLimit); err != nil {
		t.Fatal(err)
	}
	drainIDs(q)
	if *fired != 0 {
		t.Fatalf("disarmed SRQ fired %d times", *fired)
	}
}

func TestModifySRQ_LimitZeroNeverRaisesEventEvenWhenEmpty(t *testing.T) {
	q := newQueue(t, 16, 1, testCaps)
	fired := limitCounter(q)
	if err := q.Modify(&verbs.SRQAttr{Limit: 0}, verbs.SRQLimit); err != nil {
		t.Fatal(err)
	}
	post(t, q, 1)
	drainIDs(q)
	if *fired != 0 {
		t.Fatalf("limit 0 fired %d times", *fired)
	}
}

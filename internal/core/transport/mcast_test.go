package transport

import (
	"errors"
	"net/netip"
	"syscall"
	"testing"
	"testing/synctest"

	"github.com/goroce/goroce/internal/core/verbs"
	"github.com/goroce/goroce/link"
)

// plainLink hides every optional interface of a Link (no Multicaster).
type plainLink struct{ link.Link }

// TestAttachMcastRules: ib_attach_mcast's rules at the engine: a UD QP and a
// multicast address (EINVAL otherwise); a Link that cannot join groups is
// ENOSYS; attaching twice is not an error; detaching a QP not attached is
// EINVAL; the last QP to leave (by detach or by destroy) leaves the group on
// the Link, so it can be joined again, and the group's receive path ends
// without the device-fatal event a dying Link raises.
func TestAttachMcastRules(t *testing.T) {
	synctest.Test(t, attachMcastRules)
}

// attachMcastRules runs in a bubble, so synctest.Wait can tell when the
// receive path of a group that was left has ended.
func attachMcastRules(t *testing.T) {
	la, lb := link.Pipe(addrA, addrB)
	t.Cleanup(func() { lb.Close() })
	n := newNode(t, la, 2)
	t.Cleanup(func() { n.close(t) })
	g := netip.MustParseAddr("239.0.0.9")
	ud := n.createQP(t, verbs.QPTypeUD, rcOpts{})
	rc := n.createQP(t, verbs.QPTypeRC, rcOpts{})
	wantErrno := func(err error, want syscall.Errno) {
		t.Helper()
		if !errors.Is(err, want) {
			t.Fatalf("got %v, want %v", err, want)
		}
	}
	wantErrno(rc.AttachMcast(g), syscall.EINVAL)
	wantErrno(ud.AttachMcast(netip.MustParseAddr("10.0.0.7")), syscall.EINVAL)
	wantErrno(ud.DetachMcast(g), syscall.EINVAL)
	if err := ud.AttachMcast(g); err != nil {
		t.Fatal(err)
	}
	if err := ud.AttachMcast(g); err != nil {
		t.Fatalf("second attach: %v", err)
	}
	if err := ud.DetachMcast(g); err != nil {
		t.Fatal(err)
	}
	wantErrno(ud.DetachMcast(g), syscall.EINVAL)

	// Detach and destroy leave the group on the Link: joining again works
	// (a Pipe refuses a group joined twice with EEXIST).
	ud2 := n.createQP(t, verbs.QPTypeUD, rcOpts{})
	for _, q := range []*QP{ud, ud2} {
		if err := q.AttachMcast(g); err != nil {
			t.Fatal(err)
		}
	}
	if err := ud.Destroy(); err != nil {
		t.Fatal(err)
	}
	if got := n.e.mcastTable()[g]; len(got) != 1 || got[0] != ud2 {
		t.Fatalf("group members after destroy: %v", got)
	}
	wantErrno(ud.AttachMcast(g), syscall.EINVAL)
	if err := ud2.Destroy(); err != nil {
		t.Fatal(err)
	}
	ud3 := n.createQP(t, verbs.QPTypeUD, rcOpts{})
	if err := ud3.AttachMcast(g); err != nil {
		t.Fatalf("attach after the group was left: %v", err)
	}
	synctest.Wait() // the left group's reader returned (net.ErrClosed) or never will
	if n.hasEvent(verbs.EventDeviceFatal) || n.e.fatal.Load() {
		t.Fatal("a group's receive path ending was taken for the Link dying")
	}

	lp, lq := link.Pipe(netip.MustParseAddrPort("10.0.0.3:4791"), netip.MustParseAddrPort("10.0.0.4:4791"))
	t.Cleanup(func() { lq.Close() })
	m := newNode(t, plainLink{lp}, 1)
	t.Cleanup(func() { m.close(t) })
	wantErrno(m.createQP(t, verbs.QPTypeUD, rcOpts{}).AttachMcast(g), syscall.ENOSYS)
}

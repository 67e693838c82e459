package transport

import (
	"fmt"
	"net"
	"net/netip"
	"syscall"
	"time"

	"github.com/goroce/goroce/dcqcn"
	"github.com/goroce/goroce/internal/core/cq"
	"github.com/goroce/goroce/internal/core/srq"
	"github.com/goroce/goroce/internal/core/verbs"
	"github.com/goroce/goroce/internal/core/verbserr"
	"github.com/goroce/goroce/link"
)

// Region is a registered memory region as the engine sees it: the bytes, the
// I/O virtual address of Buf[0], the protection domain and the access rights.
// Buffer ownership: Buf belongs to the user; the engine reads and writes it
// only while executing a work request, like a NIC doing DMA.
type Region struct {
	PD     uint32
	Addr   uint64 // iova of Buf[0]
	Buf    []byte
	Access verbs.Access
	LKey   uint32
	RKey   uint32
	// QPN, when not 0, is the only QP that may use the region: a type 2B
	// memory window is bound to the QP that bound it (IBA 10.6.7.2.4).
	QPN uint32
}

// slice returns the bytes [addr, addr+n) of r, or nil when the range is not
// inside the region (the mr_check_range analogue). n == 0 yields an empty,
// non-nil slice for any addr inside or at the end of the region.
func (r *Region) slice(addr uint64, n uint64) []byte {
	if addr < r.Addr {
		return nil
	}
	off := addr - r.Addr
	size := uint64(len(r.Buf))
	if off > size || n > size-off {
		return nil
	}
	return r.Buf[off : off+n : off+n]
}

// Memory resolves memory keys for the engine. roce implements it with its
// PD/MR registry; tests use a fake. LocalRegion and RemoteRegion return nil
// for an unknown key; the engine performs the PD, QP, access-flag and range
// checks itself, so an implementation only looks the key up. BindMW and
// Invalidate execute the local operations of a send queue (BIND_MW,
// LOCAL_INV) and the invalidation a SEND_WITH_INV asks for, and return an
// error when a rule of the IBA forbids them; the engine turns that into the
// completion status. Every method is called from shard goroutines
// concurrently.
type Memory interface {
	LocalRegion(lkey uint32) *Region
	RemoteRegion(rkey uint32) *Region
	BindMW(b *MWBind) error
	Invalidate(rkey, qpn, pd uint32) error
}

// MWBind is a memory window bind as a send queue executes it (rxe_bind_mw):
// the window named by its current rkey gets the key byte of NewRKey and
// grants Access to [Addr, Addr+Length) of the MR named by MRLKey (nothing when
// Length is 0). QPN and PD are the executing QP's.
type MWBind struct {
	MWRKey, NewRKey, MRLKey uint32
	Addr, Length            uint64
	Access                  verbs.Access
	QPN, PD                 uint32
}

// QPInitAttr holds the creation attributes of a QP (struct ibv_qp_init_attr).
// PD is the protection domain number memory accesses are checked against.
type QPInitAttr struct {
	Type     verbs.QPType
	SendCQ   *cq.Queue
	RecvCQ   *cq.Queue
	SRQ      *srq.Queue
	Cap      verbs.QPCap
	SQSigAll bool
	PD       uint32
}

// Event is an asynchronous event raised by the engine. It names its object.
type Event struct {
	Type verbs.EventType
	QPN  uint32
	CQ   *cq.Queue
	SRQ  *srq.Queue
}

// Clock gives the engine the time and its timers. Timers only kick shards,
// so a fake clock (or testing/synctest's virtual time) drives every
// retransmission deterministically.
type Clock interface {
	Now() time.Time
	AfterFunc(d time.Duration, f func()) Timer
}

// Timer is a timer a Clock returns (the subset of *time.Timer the engine uses).
type Timer interface {
	Stop() bool
	Reset(d time.Duration) bool
}

type realClock struct{}

func (realClock) Now() time.Time                            { return time.Now() }
func (realClock) AfterFunc(d time.Duration, f func()) Timer { return time.AfterFunc(d, f) }

// Config configures an Engine. NewEngine fills in the defaults the comments
// name, in one place (normalize), and Engine.Config returns the result. The
// Link's offloads (link.Offloads) decide segment trains and GRO.
type Config struct {
	Link      link.Link
	Memory    Memory
	Stats     *Stats      // nil: a private Stats
	Shards    int         // 0: GOMAXPROCS
	Clock     Clock       // nil: the real clock
	OnEvent   func(Event) // async events; called from shard goroutines, must not block
	LocalAddr netip.Addr  // source address of our packets (the GID); zero: Link.LocalAddr
	MaxQPWR   int         // device max_qp_wr (0: 16384)
	MaxSGE    int         // device max_sge (0: 32)
	MaxInline int         // device max_inline_data (0: 256)
	// MaxRDAtomic and MaxDestRDAtomic are the device's max_qp_init_rd_atom and
	// max_qp_rd_atom, the limits of a QP's max_rd_atomic and max_dest_rd_atomic
	// (0: 128 each).
	MaxRDAtomic, MaxDestRDAtomic int
	// RunToCompletion makes the goroutine that has the work do it when the
	// QP's shard is idle, instead of handing it to the shard goroutine
	// (rtc.go).
	RunToCompletion bool
	// PortMTU is the port's active MTU (0: MTU1024, what rxe derives from a
	// 1500-byte Ethernet). A UD QP has no path MTU of its own: its messages
	// may be up to this size.
	PortMTU verbs.MTU
	// RetryRate and RetryBurst are the device-wide budget of retransmission
	// timeouts acted on, a token bucket (0: 10000 per second, 1000 deep;
	// RetryRate < 0: unlimited). A timeout without a token waits for one.
	RetryRate, RetryBurst int
	// CC is congestion control (DCQCN, package dcqcn). The zero value is
	// off: the traffic class goes on the wire as given, CE marks are only
	// counted, CNPs are ignored and nothing is paced, as rxe does.
	CC dcqcn.Config
	// FirstQPN and LastQPN bound the QPNs CreateQP hands out (both 0: from
	// 0x11, as rxe, to 0xFFFFFF): the block roced grants a process that
	// shares its address, whose socket receives only that block's
	// datagrams.
	FirstQPN, LastQPN uint32
}

// newErr is the error of verb op on QP qpn (0 when there is no QP yet): the
// verbs' one error type, roce.Error.
func newErr(op string, qpn uint32, errno syscall.Errno, format string, args ...any) *verbserr.Error {
	return verbserr.Newf("transport", op, qpObj(qpn), errno, format, args...)
}

// closedErr is the error of a verb after Engine.Close; it matches net.ErrClosed.
func closedErr(op string, qpn uint32) *verbserr.Error {
	return verbserr.New("transport", op, qpObj(qpn), syscall.EINVAL, "engine closed").With(errClosed)
}

// adoptErr hands an error of cq or srq up as the error of verb op on QP qpn.
func adoptErr(err error, op string, qpn uint32) error {
	return verbserr.Adopt(err, "transport", op, qpObj(qpn), -1)
}

// qpObj names QP qpn as the error messages of every layer do.
func qpObj(qpn uint32) string {
	if qpn == 0 {
		return ""
	}
	return fmt.Sprintf("qp %#x", qpn)
}

var errClosed = net.ErrClosed

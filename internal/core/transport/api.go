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

// Region is a registered memory region as the engine sees it. Buf belongs to
// the user; the engine reads and writes it only while executing a work
// request, like a NIC doing DMA.
type Region struct {
	PD     uint32
	Addr   uint64 // iova of Buf[0]
	Buf    []byte
	Access verbs.Access
	LKey   uint32
	RKey   uint32
	// QPN, if not 0, is the only QP that may use the region: a type 2B memory
	// window is bound to the QP that bound it (IBA 10.6.7.2.4).
	QPN uint32
}

// slice returns the bytes [addr, addr+n) of r, or nil outside the region
// (mr_check_range); n == 0 gives an empty, non-nil slice.
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

// Memory resolves memory keys for the engine (roce's MR registry, or a test
// fake). LocalRegion and RemoteRegion only look the key up (nil when unknown):
// the engine checks PD, QP, access and range itself. BindMW and Invalidate
// execute BIND_MW, LOCAL_INV and a SEND_WITH_INV's invalidation, failing when
// an IBA rule forbids them. Called from shard goroutines concurrently.
type Memory interface {
	LocalRegion(lkey uint32) *Region
	RemoteRegion(rkey uint32) *Region
	BindMW(b *MWBind) error
	Invalidate(rkey, qpn, pd uint32) error
}

// MWBind is a memory window bind as a send queue executes it (rxe_bind_mw):
// the window named by MWRKey gets NewRKey's key byte and grants Access to
// [Addr, Addr+Length) of the MR named by MRLKey; QPN and PD are the QP's.
type MWBind struct {
	MWRKey, NewRKey, MRLKey uint32
	Addr, Length            uint64
	Access                  verbs.Access
	QPN, PD                 uint32
}

// QPInitAttr holds the creation attributes of a QP (struct ibv_qp_init_attr);
// PD is the protection domain memory accesses are checked against.
type QPInitAttr struct {
	Type     verbs.QPType
	SendCQ   *cq.Queue
	RecvCQ   *cq.Queue
	SRQ      *srq.Queue
	Cap      verbs.QPCap
	SQSigAll bool
	PD       uint32
}

// Event is an asynchronous event, naming its object.
type Event struct {
	Type verbs.EventType
	QPN  uint32
	CQ   *cq.Queue
	SRQ  *srq.Queue
}

// Clock gives the engine the time and its timers, which only kick shards: a
// fake clock (or testing/synctest) drives every retransmission
// deterministically.
type Clock interface {
	Now() time.Time
	AfterFunc(d time.Duration, f func()) Timer
}

// Timer is the subset of *time.Timer the engine uses.
type Timer interface {
	Stop() bool
	Reset(d time.Duration) bool
}

type realClock struct{}

func (realClock) Now() time.Time                            { return time.Now() }
func (realClock) AfterFunc(d time.Duration, f func()) Timer { return time.AfterFunc(d, f) }

// Config configures an Engine. NewEngine fills in the defaults named here, in
// one place (normalize); Engine.Config returns the result. Trains and GRO are
// the Link's offloads (link.Offloads).
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
	// max_qp_rd_atom (0: 128 each).
	MaxRDAtomic, MaxDestRDAtomic int
	// RunToCompletion: see rtc.go.
	RunToCompletion bool
	// readerDrives overrides when a reader runs the shards it fed (tests):
	// 0 by the scheduler (Engine.readerDrives), driveNever or driveAlways.
	readerDrives int8
	// PortMTU is the port's active MTU (0: MTU1024, rxe's for 1500-byte
	// Ethernet), the limit of a UD message.
	PortMTU verbs.MTU
	// RetryRate and RetryBurst are the device-wide retry budget (retry.go; 0:
	// 10000 per second, 1000 deep; RetryRate < 0: unlimited).
	RetryRate, RetryBurst int
	// CC is congestion control (cc.go, package dcqcn); the zero value is off.
	CC dcqcn.Config
	// FirstQPN and LastQPN bound the QPNs CreateQP hands out (both 0: 0x11 to
	// 0xFFFFFF): the block roced grants a process that shares its address.
	FirstQPN, LastQPN uint32
}

// newErr is the error of verb op on QP qpn (0: no QP yet), a roce.Error.
func newErr(op string, qpn uint32, errno syscall.Errno, format string, args ...any) *verbserr.Error {
	return verbserr.Newf("transport", op, qpObj(qpn), errno, format, args...)
}

// closedErr is the error of a verb after Engine.Close; it matches net.ErrClosed.
func closedErr(op string, qpn uint32) *verbserr.Error {
	return verbserr.New("transport", op, qpObj(qpn), syscall.EINVAL, "engine closed").With(errClosed)
}

// adoptErr makes an error of cq or srq the error of verb op on QP qpn.
func adoptErr(err error, op string, qpn uint32) error {
	return verbserr.Adopt(err, "transport", op, qpObj(qpn), -1)
}

// qpObj names QP qpn as every layer's errors do.
func qpObj(qpn uint32) string {
	if qpn == 0 {
		return ""
	}
	return fmt.Sprintf("qp %#x", qpn)
}

var errClosed = net.ErrClosed

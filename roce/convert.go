package roce

import (
	"unsafe"

	"github.com/goroce/goroce/internal/core/cq"
	"github.com/goroce/goroce/internal/core/srq"
	"github.com/goroce/goroce/internal/core/transport"
)

// The verbs types of types.go are twins of the types the engine stores: the same
// fields, in the same order, of the same types or of twins. A twin whose fields are
// all of one type on both sides has the same underlying type as its engine form, so
// a Go conversion crosses the boundary; the compiler accepts these only while both
// declarations agree.
var (
	_ = cq.WorkCompletion(WC{})
	_ = srq.SGE(SGE{})
	_ = srq.Attr(SRQAttr{})
	_ = transport.AddressVector(AddressVector{})
	_ = transport.QPCap(QPCap{})
	_ = transport.QPInfo(QPInfo{})
	_ = transport.MWBindWR(MWBindWR{})
	_ = transport.FlushWR(FlushWR{})
)

// A twin that holds a twin (SendWR and RecvWR hold []SGE, SendWR an
// *AddressVector, QPAttr an AddressVector and a QPCap), and a slice of twins, has no
// Go conversion; it has the same memory layout, so the functions below reinterpret
// it in place, which unsafe.Pointer allows for types of equivalent layout. Nothing is
// copied, so PostSend, PostRecv and Poll cost what the engine's own calls cost. The
// sizes are checked here at compile time and TestVerbsTypesAreTheirEngineTwins
// checks every field's name, offset and type.
var (
	_ [unsafe.Sizeof(SendWR{}) - unsafe.Sizeof(transport.SendWR{})]struct{}
	_ [unsafe.Sizeof(transport.SendWR{}) - unsafe.Sizeof(SendWR{})]struct{}
	_ [unsafe.Sizeof(RecvWR{}) - unsafe.Sizeof(srq.RecvWR{})]struct{}
	_ [unsafe.Sizeof(srq.RecvWR{}) - unsafe.Sizeof(RecvWR{})]struct{}
	_ [unsafe.Sizeof(QPAttr{}) - unsafe.Sizeof(transport.QPAttr{})]struct{}
	_ [unsafe.Sizeof(transport.QPAttr{}) - unsafe.Sizeof(QPAttr{})]struct{}
)

// asTwins views a slice of one twin type as a slice of the other (same array).
func asTwins[To, From any](s []From) []To {
	return unsafe.Slice((*To)(unsafe.Pointer(unsafe.SliceData(s))), len(s))
}

func engineSendWRs(wrs []SendWR) []transport.SendWR { return asTwins[transport.SendWR](wrs) }

func engineRecvWRs(wrs []RecvWR) []srq.RecvWR { return asTwins[srq.RecvWR](wrs) }

func engineWCs(wc []WC) []cq.WorkCompletion { return asTwins[cq.WorkCompletion](wc) }

func engineQPAttr(a *QPAttr) *transport.QPAttr { return (*transport.QPAttr)(unsafe.Pointer(a)) }

func userQPAttr(a *transport.QPAttr) *QPAttr { return (*QPAttr)(unsafe.Pointer(a)) }

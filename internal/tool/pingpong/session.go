package pingpong

import (
	"errors"
	"net"

	"github.com/goroce/goroce/oob"
	"github.com/goroce/goroce/roce"
)

// Kind is the stock tool whose QPs a session has.
type Kind uint8

const (
	RC  Kind = iota // ibv_rc_pingpong: one RC QP
	UC              // ibv_uc_pingpong: one UC QP
	UD              // ibv_ud_pingpong: one UD QP
	SRQ             // ibv_srq_pingpong: RC QPs on one SRQ
)

func (k Kind) String() string { return [...]string{"rc", "uc", "ud", "srq"}[k] }

// GRH is the room a UD receive buffer leaves in front of the message for the
// GRH its completion carries (40 bytes, the IPv6 header size, on RoCE too).
const GRH = 40

// Spec shapes a session: Slots receive slots of SlotLen bytes at the start of
// its buffer, then Extra bytes; per QP SendWR send and RecvWR receive WRs
// (with an SRQ, the SRQ holds Slots instead); a CQ of CQE entries.
type Spec struct {
	Kind                  Kind
	QPs                   int
	Slots, SlotLen, Extra int
	SendWR, RecvWR, CQE   int
}

// Session is the verbs objects of one pingpong session, as the stock tools'
// pp_init_ctx makes them: one PD, one buffer registered for local write, one
// CQ for sends and receives, the SRQ of srq mode, and QPs in INIT.
// cmd/roce-pingpong's client and server and cmd/roced's responder sessions
// all run on it.
type Session struct {
	Spec
	PD  *roce.PD
	Buf []byte
	MR  *roce.MR
	CQ  *roce.CQ
	SRQ *roce.SRQ
	QPs []*roce.QP
	AHs []*roce.AH // UD: each QP's address handle to its peer, once connected
}

// Open makes a session on dev. On an error, Close releases what was made.
func Open(dev *roce.Device, spec Spec) (*Session, error) {
	s := &Session{Spec: spec, Buf: make([]byte, spec.Slots*spec.SlotLen+spec.Extra)}
	var err error
	if s.PD, err = dev.AllocPD(); err != nil {
		return s, err
	}
	if s.MR, err = s.PD.RegMR(s.Buf, roce.AccessLocalWrite); err != nil {
		return s, err
	}
	if s.CQ, err = dev.CreateCQ(spec.CQE); err != nil {
		return s, err
	}
	init := roce.QPInitAttr{Type: roce.QPTypeRC, SendCQ: s.CQ, RecvCQ: s.CQ,
		Cap: roce.QPCap{MaxSendWR: uint32(spec.SendWR), MaxSendSGE: 1, MaxRecvWR: uint32(spec.RecvWR), MaxRecvSGE: 1}}
	switch spec.Kind {
	case UC:
		init.Type = roce.QPTypeUC
	case UD:
		init.Type = roce.QPTypeUD
	case SRQ:
		if s.SRQ, err = s.PD.CreateSRQ(roce.SRQInitAttr{Attr: roce.SRQAttr{MaxWR: uint32(spec.Slots), MaxSGE: 1}}); err != nil {
			return s, err
		}
		init.SRQ = s.SRQ
		init.Cap.MaxRecvWR, init.Cap.MaxRecvSGE = 0, 0
	}
	for range spec.QPs {
		qp, err := s.PD.CreateQP(init)
		if err != nil {
			return s, err
		}
		s.QPs = append(s.QPs, qp)
		if err := qp.Init(&roce.ConnectAttr{QKey: QKey}); err != nil {
			return s, err
		}
	}
	s.AHs = make([]*roce.AH, len(s.QPs))
	return s, nil
}

// SGE is n bytes at off in slot i (i == Slots: the Extra bytes).
func (s *Session) SGE(i, off, n int) roce.SGE {
	return roce.SGE{Addr: s.MR.Addr() + uint64(i*s.SlotLen+off), Length: uint32(n), LKey: s.MR.LKey()}
}

// PostRecv posts wrs to the SRQ, or to QP qp's own receive queue.
func (s *Session) PostRecv(qp int, wrs []roce.RecvWR) (int, error) {
	if s.SRQ != nil {
		return s.SRQ.PostRecv(wrs)
	}
	return s.QPs[qp].PostRecv(wrs)
}

// Connect moves QP i to RTR and RTS towards remote with the stock tools'
// attributes (ConnectAttr), and makes a UD QP's address handle.
func (s *Session) Connect(i int, localPSN uint32, remote oob.Dest, sgidIndex int, mtu roce.MTU) error {
	a := ConnectAttr(localPSN, remote, sgidIndex, mtu)
	if err := s.QPs[i].Connect(&a); err != nil || s.Kind != UD {
		return err
	}
	var err error
	s.AHs[i], err = s.PD.CreateAH(a.AV)
	return err
}

// Close releases every object in reverse order of creation. Errors that
// say an object or its device is already closed are not errors here.
func (s *Session) Close() error {
	var errs []error
	keep := func(err error) {
		if err != nil && !errors.Is(err, net.ErrClosed) {
			errs = append(errs, err)
		}
	}
	for _, ah := range s.AHs {
		if ah != nil {
			keep(ah.Close())
		}
	}
	for _, qp := range s.QPs {
		keep(qp.Close())
	}
	if s.SRQ != nil {
		keep(s.SRQ.Close())
	}
	if s.CQ != nil {
		keep(s.CQ.Close())
	}
	if s.MR != nil {
		keep(s.MR.Close())
	}
	if s.PD != nil {
		keep(s.PD.Close())
	}
	return errors.Join(errs...)
}

package roce

import (
	"syscall"
	"testing"
	"time"
)

// TestConnect connects a pair of QPs of each type with Connect, from RESET and
// from INIT, checks the attributes each QP reports, and moves one SEND across.
func TestConnect(t *testing.T) {
	for _, tt := range []struct {
		name     string
		typ      QPType
		fromInit bool
	}{
		{"rc from reset", QPTypeRC, false},
		{"rc from init", QPTypeRC, true},
		{"uc from reset", QPTypeUC, false},
		{"ud from init", QPTypeUD, true},
	} {
		t.Run(tt.name, func(t *testing.T) {
			a, b := pipePair(t)
			type end struct {
				dev *Device
				pd  *PD
				mr  *MR
				cq  *CQ
				qp  *QP
				buf []byte
			}
			open := func(d *Device) *end {
				e := &end{dev: d, buf: make([]byte, 4096)}
				e.pd = must[*PD](t)(d.AllocPD())
				e.mr = must[*MR](t)(e.pd.RegMR(e.buf, AccessLocalWrite))
				e.cq = must[*CQ](t)(d.CreateCQ(8))
				e.qp = must[*QP](t)(e.pd.CreateQP(QPInitAttr{Type: tt.typ, SendCQ: e.cq, RecvCQ: e.cq,
					Cap: QPCap{MaxSendWR: 2, MaxRecvWR: 2, MaxSendSGE: 1, MaxRecvSGE: 1}}))
				return e
			}
			ea, eb := open(a), open(b)
			attr := func(self, peer *end, sq, rq uint32) *ConnectAttr {
				return &ConnectAttr{AccessFlags: AccessRemoteWrite, QKey: 0x11111111,
					AV:      AddressVector{DGID: peer.dev.Addr(), SGIDIndex: uint8(self.dev.GIDIndex()), HopLimit: 1, IsGlobal: true},
					PathMTU: MTU1024, DestQPN: peer.qp.QPN(), RQPSN: rq, MaxDestRDAtomic: 1, MinRNRTimer: 12,
					SQPSN: sq, Timeout: 14, RetryCnt: 7, RNRRetry: 7, MaxRDAtomic: 1}
			}
			aa, ab := attr(ea, eb, 0x100, 0x200), attr(eb, ea, 0x200, 0x100)
			if tt.fromInit {
				noErr(t, ea.qp.Init(aa))
				noErr(t, eb.qp.Init(ab))
			}
			// The receiver posts before it connects, as the stock tools do.
			_, err := eb.qp.PostRecv([]RecvWR{{WRID: 7, SGL: []SGE{{Addr: eb.mr.Addr(), Length: 4096, LKey: eb.mr.LKey()}}}})
			if !tt.fromInit {
				wantErrno(t, err, syscall.EINVAL) // RESET takes no receives
				noErr(t, eb.qp.Init(ab))
				_, err = eb.qp.PostRecv([]RecvWR{{WRID: 7, SGL: []SGE{{Addr: eb.mr.Addr(), Length: 4096, LKey: eb.mr.LKey()}}}})
			}
			noErr(t, err)
			noErr(t, ea.qp.Connect(aa))
			noErr(t, eb.qp.Connect(ab))

			got := must[QPAttr](t)(ea.qp.Query())
			if got.State != QPSRTS || got.SQPSN != 0x100 {
				t.Errorf("state %v sq_psn %#x", got.State, got.SQPSN)
			}
			switch tt.typ {
			case QPTypeUD:
				if got.QKey != 0x11111111 {
					t.Errorf("qkey %#x", got.QKey)
				}
			default:
				if got.DestQPN != eb.qp.QPN() || got.RQPSN != 0x200 || got.PathMTU != MTU1024 || got.AccessFlags != AccessRemoteWrite {
					t.Errorf("dest_qpn %#x rq_psn %#x mtu %v access %v", got.DestQPN, got.RQPSN, got.PathMTU, got.AccessFlags)
				}
			}
			if tt.typ == QPTypeRC && (got.Timeout != 14 || got.RetryCnt != 7 || got.RNRRetry != 7 || got.MaxRDAtomic != 1 ||
				got.MaxDestRDAtomic != 1 || got.MinRNRTimer != 12) {
				t.Errorf("rc timers %+v", got)
			}

			wr := SendWR{WRID: 1, Opcode: WRSend, Flags: SendSignaled, SGL: []SGE{{Addr: ea.mr.Addr(), Length: 64, LKey: ea.mr.LKey()}}}
			if tt.typ == QPTypeUD {
				ah := must[*AH](t)(ea.pd.CreateAH(aa.AV))
				wr.AH, wr.RemoteQPN, wr.RemoteQKey = ah.AV(), eb.qp.QPN(), 0x11111111
			}
			_, err = ea.qp.PostSend([]SendWR{wr})
			noErr(t, err)
			if wc := pollN(t, eb.cq, 1, 5*time.Second); wc[0].Status != WCSuccess || wc[0].WRID != 7 {
				t.Errorf("receive %+v", wc[0])
			}

			// Connect is RESET/INIT→RTS only: from RTS it is ibv_modify_qp's EINVAL.
			wantErrno(t, ea.qp.Connect(aa), syscall.EINVAL)
		})
	}
}

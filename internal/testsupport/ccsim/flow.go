package ccsim

import (
	"fmt"
	"sync/atomic"

	"github.com/goroce/goroce/roce"
)

// Flow is one RC QP streaming RDMA WRITEs into its own MR at a receiver
// device. The real-kernel congestion test in interop/ runs these too.
type Flow struct {
	dev        *roce.Device
	pd, rpd    *roce.PD
	cq, rcq    *roce.CQ
	qp, rqp    *roce.QP
	mr, rmr    *roce.MR
	depth, msg int
	done       atomic.Uint64 // bytes of WRITEs completed
	err        error         // first failed completion
}

// Connect creates the QP pair between dev and the receiver rdev, each
// keeping depth WRITEs of msgSize bytes outstanding, and moves both to RTS
// with the local ACK timeout timeout (4.096 µs · 2^timeout): it must exceed
// the longest queueing delay of the path, or every long queue is a loss.
func Connect(dev, rdev *roce.Device, mtu roce.MTU, msgSize, depth int, timeout uint8) (*Flow, error) {
	cfg := Config{MTU: mtu, MsgSize: msgSize, Depth: depth}
	f := &Flow{dev: dev, depth: cfg.Depth, msg: cfg.MsgSize}
	var err error
	if f.pd, err = dev.AllocPD(); err != nil {
		return nil, err
	}
	if f.rpd, err = rdev.AllocPD(); err != nil {
		return nil, err
	}
	if f.mr, err = f.pd.RegMR(make([]byte, cfg.MsgSize), roce.AccessLocalWrite); err != nil {
		return nil, err
	}
	if f.rmr, err = f.rpd.RegMR(make([]byte, cfg.MsgSize), roce.AccessLocalWrite|roce.AccessRemoteWrite); err != nil {
		return nil, err
	}
	if f.cq, err = dev.CreateCQ(cfg.Depth * 2); err != nil {
		return nil, err
	}
	if f.rcq, err = rdev.CreateCQ(4); err != nil {
		return nil, err
	}
	attr := func(cq *roce.CQ) roce.QPInitAttr {
		return roce.QPInitAttr{Type: roce.QPTypeRC, SendCQ: cq, RecvCQ: cq,
			Cap: roce.QPCap{MaxSendWR: uint32(cfg.Depth), MaxRecvWR: 1, MaxSendSGE: 1, MaxRecvSGE: 1}}
	}
	if f.qp, err = f.pd.CreateQP(attr(f.cq)); err != nil {
		return nil, err
	}
	if f.rqp, err = f.rpd.CreateQP(attr(f.rcq)); err != nil {
		return nil, err
	}
	if err := toRTS(f.qp, f.rqp.QPN(), rdev, cfg.MTU, timeout); err != nil {
		return nil, err
	}
	if err := toRTS(f.rqp, f.qp.QPN(), dev, cfg.MTU, timeout); err != nil {
		return nil, err
	}
	return f, nil
}

// toRTS moves q through INIT and RTR to RTS toward QP rqpn on peer.
func toRTS(q *roce.QP, rqpn uint32, peer *roce.Device, mtu roce.MTU, timeout uint8) error {
	err := q.Modify(&roce.QPAttr{State: roce.QPSInit, PortNum: 1, AccessFlags: roce.AccessRemoteWrite},
		roce.QPAttrState|roce.QPAttrPKeyIndex|roce.QPAttrPort|roce.QPAttrAccessFlags)
	if err != nil {
		return err
	}
	err = q.Modify(&roce.QPAttr{State: roce.QPSRTR, PathMTU: mtu, DestQPN: rqpn, RQPSN: 0,
		MaxDestRDAtomic: 1, MinRNRTimer: 12,
		AV: roce.AddressVector{IsGlobal: true, DGID: peer.GID().Addr(), SGIDIndex: uint8(peer.GIDIndex()), HopLimit: 64}},
		roce.QPAttrState|roce.QPAttrAV|roce.QPAttrPathMTU|roce.QPAttrDestQPN|roce.QPAttrRQPSN|
			roce.QPAttrMaxDestRDAtomic|roce.QPAttrMinRNRTimer)
	if err != nil {
		return err
	}
	return q.Modify(&roce.QPAttr{State: roce.QPSRTS, Timeout: timeout, RetryCnt: 7, RNRRetry: 7, SQPSN: 0, MaxRDAtomic: 1},
		roce.QPAttrState|roce.QPAttrTimeout|roce.QPAttrRetryCnt|roce.QPAttrRNRRetry|roce.QPAttrSQPSN|roce.QPAttrMaxQPRDAtomic)
}

// Run keeps depth WRITEs outstanding until stop is closed or one fails.
func (f *Flow) Run(stop <-chan struct{}) {
	wr := roce.SendWR{Opcode: roce.WRRDMAWrite, Flags: roce.SendSignaled,
		SGL:        []roce.SGE{{Addr: f.mr.Addr(), Length: uint32(f.msg), LKey: f.mr.LKey()}},
		RemoteAddr: f.rmr.Addr(), RKey: f.rmr.RKey()}
	wrs := make([]roce.SendWR, f.depth)
	for i := range wrs {
		wrs[i] = wr
	}
	if _, err := f.qp.PostSend(wrs); err != nil {
		f.err = err
		return
	}
	wc := make([]roce.WC, f.depth)
	armed := false
	for {
		n, err := f.cq.Poll(wc)
		if err != nil {
			f.err = err
			return
		}
		for _, c := range wc[:n] {
			if c.Status != roce.WCSuccess {
				f.err = fmt.Errorf("WRITE completed with %v", c.Status)
				return
			}
			f.done.Add(uint64(f.msg))
		}
		if n > 0 {
			armed = false
			if _, err := f.qp.PostSend(wrs[:n]); err != nil {
				f.err = err
				return
			}
			continue
		}
		if !armed {
			// Arm, then poll once more before sleeping (ibv_req_notify_cq).
			if err := f.cq.ReqNotify(false); err != nil {
				f.err = err
				return
			}
			armed = true
			continue
		}
		select {
		case <-f.cq.Notify():
			armed = false
		case <-stop:
			return
		}
	}
}

// Done is the number of bytes of WRITEs completed so far.
func (f *Flow) Done() uint64 { return f.done.Load() }

// Err is the first failure, once Run has returned.
func (f *Flow) Err() error { return f.err }

// QPN is the sending QP's number.
func (f *Flow) QPN() uint32 { return f.qp.QPN() }

// Close destroys both QPs and their resources (not the devices).
func (f *Flow) Close() {
	f.qp.Close()
	f.rqp.Close()
	f.cq.Close()
	f.rcq.Close()
	f.mr.Close()
	f.rmr.Close()
	f.pd.Close()
	f.rpd.Close()
}

package roce_test

import (
	"fmt"
	"log"
	"net/netip"
	"time"

	"github.com/goroce/goroce/roce"
)

// pingpongEnd is what ibv_rc_pingpong keeps per side: context, PD, MR, CQ, QP.
type pingpongEnd struct {
	dev *roce.Device
	pd  *roce.PD
	buf []byte
	mr  *roce.MR
	cq  *roce.CQ
	qp  *roce.QP
}

// dest is what the two sides exchange out of band (LID:QPN:PSN:GID in pingpong).
type dest struct {
	qpn uint32
	psn uint32
	gid roce.GID
}

func setup(addr string, port uint16, size int) *pingpongEnd {
	dev, err := roce.Open(netip.MustParseAddr(addr), roce.WithPort(port))
	if err != nil {
		log.Fatal(err)
	}
	e := &pingpongEnd{dev: dev, buf: make([]byte, size)}
	if e.pd, err = dev.AllocPD(); err != nil {
		log.Fatal(err)
	}
	if e.mr, err = e.pd.RegMR(e.buf, roce.AccessLocalWrite); err != nil {
		log.Fatal(err)
	}
	if e.cq, err = dev.CreateCQ(2); err != nil {
		log.Fatal(err)
	}
	e.qp, err = e.pd.CreateQP(roce.QPInitAttr{Type: roce.QPTypeRC, SendCQ: e.cq, RecvCQ: e.cq,
		Cap: roce.QPCap{MaxSendWR: 1, MaxRecvWR: 1, MaxSendSGE: 1, MaxRecvSGE: 1}})
	if err != nil {
		log.Fatal(err)
	}
	err = e.qp.Modify(&roce.QPAttr{State: roce.QPSInit, PKeyIndex: 0, PortNum: 1},
		roce.QPAttrState|roce.QPAttrPKeyIndex|roce.QPAttrPort|roce.QPAttrAccessFlags)
	if err != nil {
		log.Fatal(err)
	}
	return e
}

func (e *pingpongEnd) my(psn uint32) dest { return dest{qpn: e.qp.QPN(), psn: psn, gid: e.dev.GID()} }

// connect is pp_connect_ctx: RTR towards the remote, then RTS.
func (e *pingpongEnd) connect(myPSN uint32, rem dest) {
	err := e.qp.Modify(&roce.QPAttr{State: roce.QPSRTR, PathMTU: roce.MTU1024, DestQPN: rem.qpn, RQPSN: rem.psn,
		MaxDestRDAtomic: 1, MinRNRTimer: 12,
		AV: roce.AddressVector{IsGlobal: true, DGID: rem.gid.Addr(), SGIDIndex: uint8(e.dev.GIDIndex()), HopLimit: 1}},
		roce.QPAttrState|roce.QPAttrAV|roce.QPAttrPathMTU|roce.QPAttrDestQPN|roce.QPAttrRQPSN|
			roce.QPAttrMaxDestRDAtomic|roce.QPAttrMinRNRTimer)
	if err != nil {
		log.Fatal(err)
	}
	err = e.qp.Modify(&roce.QPAttr{State: roce.QPSRTS, Timeout: 14, RetryCnt: 7, RNRRetry: 7, SQPSN: myPSN, MaxRDAtomic: 1},
		roce.QPAttrState|roce.QPAttrTimeout|roce.QPAttrRetryCnt|roce.QPAttrRNRRetry|roce.QPAttrSQPSN|roce.QPAttrMaxQPRDAtomic)
	if err != nil {
		log.Fatal(err)
	}
}

func (e *pingpongEnd) postRecv() {
	if _, err := e.qp.PostRecv([]roce.RecvWR{{WRID: 1, SGL: []roce.SGE{{Addr: e.mr.Addr(), Length: uint32(len(e.buf)), LKey: e.mr.LKey()}}}}); err != nil {
		log.Fatal(err)
	}
}

func (e *pingpongEnd) postSend() {
	if _, err := e.qp.PostSend([]roce.SendWR{{WRID: 2, Opcode: roce.WRSend, Flags: roce.SendSignaled,
		SGL: []roce.SGE{{Addr: e.mr.Addr(), Length: uint32(len(e.buf)), LKey: e.mr.LKey()}}}}); err != nil {
		log.Fatal(err)
	}
}

// wait blocks on the completion channel until one completion arrives, like
// pingpong's -e mode: arm, poll once more to close the race, then sleep.
func (e *pingpongEnd) wait() roce.WC {
	var wc [1]roce.WC
	for {
		if n, err := e.cq.Poll(wc[:]); err != nil {
			log.Fatal(err)
		} else if n == 1 {
			if wc[0].Status != roce.WCSuccess {
				log.Fatalf("wr %d: %v", wc[0].WRID, wc[0].Status)
			}
			return wc[0]
		}
		if err := e.cq.ReqNotify(false); err != nil {
			log.Fatal(err)
		}
		if n, _ := e.cq.Poll(wc[:]); n == 1 {
			return wc[0]
		}
		select {
		case <-e.cq.Notify():
		case <-time.After(5 * time.Second):
			log.Fatal("no completion")
		}
	}
}

func (e *pingpongEnd) close() {
	e.qp.Close()
	e.cq.Close()
	e.mr.Close()
	e.pd.Close()
	e.dev.Close()
}

// Example_rcPingpong is ibv_rc_pingpong between two devices on 127.0.0.1 and
// 127.0.0.2: the server posts a receive, the client sends, the server answers, for a
// few iterations.
func Example_rcPingpong() {
	const port, size, iters = 47913, 64, 5
	server := setup("127.0.0.1", port, size)
	defer server.close()
	client := setup("127.0.0.2", port, size)
	defer client.close()

	// The out-of-band exchange of pingpong, done in memory here.
	srvDest, cliDest := server.my(0x100), client.my(0x200)
	server.postRecv()
	client.postRecv()
	server.connect(srvDest.psn, cliDest)
	client.connect(cliDest.psn, srvDest)

	for i := 0; i < iters; i++ {
		copy(client.buf, fmt.Sprintf("ping %d", i))
		client.postSend()
		client.wait() // send completion
		wc := server.wait()
		server.postRecv()
		copy(server.buf, "pong"+string(server.buf[4:wc.ByteLen]))
		server.postSend()
		server.wait()
		client.wait() // the pong
		client.postRecv()
		fmt.Printf("%s\n", client.buf[:len("pong 0")])
	}
	// Output:
	// pong 0
	// pong 1
	// pong 2
	// pong 3
	// pong 4
}

// Package pingpong is how the rdma-core pingpong examples (ibv_rc_pingpong,
// ibv_uc_pingpong, ibv_ud_pingpong, ibv_srq_pingpong) set up their QPs, in one
// place for the two goroce programs that stand in for them: cmd/roce-pingpong
// and cmd/roced's pingpong responders: the verbs objects of a session
// (Session) and the attributes that connect its QPs to an address exchanged
// with package oob.
package pingpong

import (
	"net/netip"

	"github.com/goroce/goroce/oob"
	"github.com/goroce/goroce/roce"
)

// QKey is the Q_Key ibv_ud_pingpong gives its QP and every send.
const QKey = 0x11111111

// The RC attributes of pp_connect_ctx: min_rnr_timer 12, timeout 14, retry_cnt
// and rnr_retry 7, one READ/atomic either way.
const (
	minRNRTimer = 12
	timeout     = 14
	retryCnt    = 7
	rnrRetry    = 7
	rdAtomic    = 1
)

// AV is pp_connect_ctx's address vector towards remote, with a GRH (is_global)
// when the GID's interface ID, its low 8 bytes, is not zero. The stock tools ask
// for hop limit 1, but on RoCE the kernel replaces a unicast AV's hop limit with
// the route's (ib_resolve_unicast_gid_dmac), so their packets leave with TTL 64;
// goroce sends the hop limit the AV names, so the recipe names 64.
func AV(remote oob.Dest, sgidIndex int) roce.AddressVector {
	var ifid [8]byte
	return roce.AddressVector{DGID: netip.AddrFrom16(remote.GID).Unmap(), SGIDIndex: uint8(sgidIndex), HopLimit: 64,
		IsGlobal: [8]byte(remote.GID[8:]) != ifid}
}

// ConnectAttr returns the attributes the stock tools give a QP of type t that
// sends from localPSN and talks to remote: no remote access (the pingpong
// tools only SEND), QKey for UD, the path MTU mtu, and pp_connect_ctx's RC
// timers. Pass it to (*roce.QP).Init and (*roce.QP).Connect; a UD sender
// makes its AH from the AV.
func ConnectAttr(localPSN uint32, remote oob.Dest, sgidIndex int, mtu roce.MTU) roce.ConnectAttr {
	return roce.ConnectAttr{QKey: QKey, AV: AV(remote, sgidIndex), PathMTU: mtu, DestQPN: remote.QPN, RQPSN: remote.PSN,
		MaxDestRDAtomic: rdAtomic, MinRNRTimer: minRNRTimer,
		SQPSN: localPSN, Timeout: timeout, RetryCnt: retryCnt, RNRRetry: rnrRetry, MaxRDAtomic: rdAtomic}
}

// Package cm is the InfiniBand Communication Manager (IBA chapter 12) as
// rdma_cm uses it over RoCEv2, so Go programs connect to and accept
// connections from Linux rdma_cm applications (rping, ucmatose, udaddy).
//
// CM messages are 256-byte MADs sent as UD SENDs to the GSI QP (QPN 1,
// Q_Key 0x80010000, P_Key 0xFFFF). The package has three layers:
//
//   - Wire format: Header (the MAD common header), the messages REQ, MRA,
//     REJ, REP, RTU, DREQ, DREP, SIDRREQ, SIDRREP with exact bit layouts
//     (Marshal, Parse; round-trips the bytes of real rxe captures), and
//     rdma_cm's private-data header (CMAHeader), service IDs (ServiceID),
//     and rdma_cm's flow label (FlowLabel; the UDP source port it gives is
//     bth.FlowLabelSourcePort).
//   - Machine: the communication-ID state machine (idle, REQ sent/received,
//     MRA, REP sent/received, established, DREQ sent/received, timewait,
//     SIDR). It is pure: time is passed in, MADs to send and events come
//     out of Drain, and it does no I/O. Lost REQ/REP/DREQ/SIDR_REQ are
//     resent every CM response timeout (4.096 µs × 2^t, plus twice the
//     packet lifetime) up to the max CM retries; duplicates are answered
//     from the saved reply (REP, RTU, DREP, REJ, MRA, SIDR_REP) and never
//     re-executed; a REQ for a service nobody listens on gets REJ reason 8.
//     Passive connections that wait for their RTU are capped per port, and
//     per peer those whose REP went unanswered in the time the peer promised
//     (a REQ over the port's cap evicts the oldest unanswered REP, as a SYN
//     cache does; one with nothing to evict or over the peer's cap is
//     dropped unanswered and counted, as cm.c drops a REQ its consumer has
//     no resources for), and withdrawn with REJ (timeout) after a pending
//     timeout, so spoofed REQs cannot pile up or lock real peers out, while a
//     peer that answers may open hundreds at once.
//   - Manager: an rdma_cm-like API over a MADConn ("send/receive MADs on
//     QP1"): Listen (with rdma_listen's backlog)/GetRequest/Accept/Reject,
//     Dial, Disconnect, ResolveUD
//     and ListenUD (SIDR), and an event stream (ConnEvent). Package cm/gsi
//     provides the MADConn of a goroce device; Pipe is an in-memory one.
//
// The negotiated QP attributes are delivered as QPParams through
// ConnParam.Ready, before REP is sent (passive side) or before RTU
// (active side), so the caller moves its RC QP INIT→RTR→RTS as librdmacm
// does. Note Linux's meaning of the REQ/REP starting PSN: each side
// advertises the PSN its own receive queue expects (rq_psn), and sends from
// the peer's (QPParams.SQPSN).
//
// Package cm/rping implements rping's protocol on top; cmd/rping-go is its
// command line. Package cm/mcast is rdma_join_multicast on RoCE, which needs
// no MADs.
package cm

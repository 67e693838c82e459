// Package cm is the InfiniBand Communication Manager (IBA chapter 12) as
// rdma_cm uses it over RoCEv2, so Go programs can connect to and accept
// connections from Linux rdma_cm applications (rping, ucmatose, udaddy).
//
// CM messages are 256-byte MADs sent as UD SENDs to the GSI QP (QPN 1,
// Q_Key 0x80010000, P_Key 0xFFFF). The package has three layers:
//
//   - Wire format: Header (the MAD common header), the messages REQ, MRA,
//     REJ, REP, RTU, DREQ, DREP, SIDRREQ, SIDRREP with exact bit layouts
//     (Marshal, Parse), and rdma_cm's private-data header (CMAHeader),
//     service IDs (ServiceID), flow label and UDP source port rules.
//   - Machine: the communication-ID state machine (idle, REQ sent/received,
//     MRA, REP sent/received, established, DREQ sent/received, timewait). It
//     is pure: time is passed in, MADs to send and events are returned, and
//     it does no I/O. Lost REQ/REP/DREQ are retransmitted after the CM
//     response timeout up to the max CM retries; duplicate MADs are answered
//     from the saved reply and never re-executed.
//   - Manager: an rdma_cm-like API (Listen, Accept, Reject, Dial,
//     Disconnect, events) that runs one Machine on one goroutine over a
//     MADConn, the "send/receive MADs on QP1" interface. A real device
//     provides MADConn with a UD QP1; tests use Pipe.
//
// The negotiated QP attributes are delivered as QPParams so the caller can
// move its RC QP INIT→RTR→RTS itself, before Accept sends REP (passive side)
// or before RTU is sent (active side), as librdmacm does.
package cm

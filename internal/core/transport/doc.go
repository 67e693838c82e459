// Package transport is the RoCEv2 engine: RC, UC and UD queue pairs over a
// link.Link (UDP port 4791), with the IBTA reliability protocol as Linux
// soft-RoCE (rdma_rxe) speaks it on the wire.
//
// Each QP has three single-threaded state machines, as in rxe: the
// requester (requester.go, rxe_req.c) turns send WQEs into request packets,
// the responder (responder.go and reply.go, rxe_resp.c) executes inbound
// requests and answers them, and the completer (completer.go, rxe_comp.c) retires
// send WQEs from ACKs and responses and drives retries. They take the time
// as an argument, never start goroutines and never send: they append their
// packets to the shard's output list (QP.emit), and the shard sends the list
// (shard.flush). So each IBA rule is testable packet in, packets out, with no
// link (wire_test.go), and the shard sees every packet of a step before it
// goes out.
//
// # Concurrency
//
// A fixed set of shard goroutines owns the QPs, by QPN. Only a QP's shard
// writes its state. PostSend and PostRecv run on the caller's goroutine:
// they validate, queue under the queue's mutex and wake the shard through a
// capacity-1 channel, so wake-ups coalesce and are never lost. Modify, Query,
// Destroy, Barrier and the debug snapshot run on the owner shard as commands.
// Timers (retransmission, RNR) only wake the shard.
//
// # Scale
//
// Nothing costs in proportion to the number of QPs per packet, per timer or
// per create and destroy. The QP table (qptable.go) is a two-level radix
// table of atomic pointers indexed by QPN, read lock-free by the readers;
// QPNs are allocated cyclically from 0x11 through a per-chunk bitmap. An idle
// QP holds its state and nothing else: the send ring, the receive WR's SGE
// storage and the responder resources are allocated on first use, and the
// buffer that gathers a payload spanning SGEs belongs to the shard.
//
// # Shard slices
//
// A shard works in bounded slices and serves its commands between them, so
// no number of busy QPs delays a command by more than one slice (shard.go).
// A slice delivers at most 256 received datagrams and serves at most 64
// ready QPs; the QPs it services emit at most 256 budgeted packets (requests
// and READ responses), one QP at most 64 in a turn, plus at most one
// acknowledgement per datagram. A QP with more to send goes to the back of
// the ready queue, so ready QPs are served round robin. A READ reply longer
// than a turn continues in the QP's next turns; requests that arrive
// meanwhile wait behind it (at most 256) so responses still leave in PSN
// order, and its R_Key is resolved again each turn.
//
// # Run to completion
//
// With Config.RunToCompletion the goroutine that has the work does it when
// the QP's shard is idle, under the shard's token (rtc.go). Without it, a post
// worth a train (to an idle send queue, or a list of WRs) still sends its own
// packets when the shard is idle (postedDefault); received batches go to the
// shard goroutine, so a bulk receiver reads and processes on two cores.
//
// # Receive flow
//
//	Link.ReadBatch ─► reader (reader.go): GRO train ─► segments ─► bth.PeekDestQP ─► QP table
//	                  ─► shard inbound ring (drop+count if full)
//	                                                        │
//	shard: bth.Parse ─► bth.AcceptICRC (one CRC pass) ─► P_Key, type, source checks
//	        │         (the next packet of the responder's WRITE: bth.AcceptICRCPlace,
//	        │          placed in the MR in the same pass; responder.placeTarget)
//	        ├─ request  ─► responder (RC and UC): checkPSN ─► checkOpSequence ─► checkOpAllowed
//	        │                 ─► checkLength ─► checkRKey ─► execute: placeSend (receive WR, else RNR)
//	        │                 / placeWrite / executeRead / executeAtomic ─► receive CQE (held)
//	        │                 ─► ACK if AckReq (held) / READ responses / atomic ACK
//	        │                 a failed check: rcFailed (NAK by class) or ucFailed (drop, resync)
//	        └─ response ─► completer: a PSN never sent is a ghost, dropped and counted
//	                          retireAcked (cumulative ACK retires WQEs) ─► send CQE
//	                          onAck: NAK seq ─► go-back-N; RNR NAK ─► wait RNR timer; others ─► ERR
//	                          onReadResponse, onAtomicAck: place the data, complete the WQE
//
// A datagram with DestQP 0xFFFFFF (McastQPN) goes to every UD QP attached to
// the multicast group it was sent to (mcast.go: a copy per QP, each checked
// as that QP's own datagram). A group's datagrams arrive on a receive path of
// their own (link.Multicaster), opened when its first QP attaches and closed
// when the last detaches.
//
// The responder holds a positive ACK until the end of the step and sends one
// cumulative ACK for the newest PSN (NAKs, READ responses and atomic ACKs
// send the held ACK first). Completions made during a slice are held too and
// pushed to their CQs only after the slice's packets are written, so an
// application never sees a receive before the peer can see its ACK, and a
// UD or UC send completes once its packets are on the wire.
//
// # Send flow
//
//	PostSend ─► validate ─► send queue slot ─► wake shard
//	shard requester: fence / max_rd_atomic / 128-PSN window / a short tail held
//	        while two datagrams are in flight (holdAt) ─► next opcode (bth.MessageOpcode)
//	        ─► bth.Append into a pooled buffer (payload gathered from the MR through Memory)
//	        ─► output list ─► end of slice: runs of one flow's equal-size packets become
//	           segment trains (train.go) ─► bth.PutICRC (IPv4 ID of the segment, DF)
//	           ─► Link.WriteBatch (a train: one UDP GSO super-datagram per up to 64 packets)
//	retransmission: nothing sent is kept; on a NAK or timeout the requester
//	rewinds to the oldest unacknowledged PSN and regenerates packets from the
//	WQE and the MR.
//
// # Retransmission
//
// A peer that stops answering cannot make the engine send without limit:
// retransmission backs off, probes and takes a device-wide budget (retry.go).
//
// # Wire behaviour matched to rxe
//
// ACKs only for AckReq (set on the last packet of a message and at least
// every 64 packets; a batch of them answered by one cumulative ACK), credit code 0x1F, MSN counting completed messages;
// duplicates re-ACKed with the last acknowledged PSN; READ and atomics saved
// in max_dest_rd_atomic responder resources and replayed, atomics never
// executed twice; retry_cnt and rnr_retry of 7 mean infinite; the
// retransmission timeout is 4.096 µs × 2^timeout.
//
// UC shares the requester with RC but sends UC opcodes without AckReq and
// completes a WQE once its last packet is sent. It shares the responder's
// checks too; only what a failed check does differs (uc.go): UC never
// acknowledges, and a PSN gap, an opcode out of sequence, a bad R_Key or
// length, or a missing receive WR drops the whole message silently, the
// responder resynchronizing at the next FIRST or ONLY.
//
// A local send error (bad lkey, a UD message above the port MTU) fails the
// WR and moves an RC QP to ERR, but a UD or UC QP to SQE: its other send WRs
// are flushed, receives go on, and ibv_modify_qp SQE→RTS resumes sending.
//
// Each QP sends from the UDP source port rxe would give it
// (bth.ConnectedSourcePort for RC and UC, bth.QPSourcePort for UD), for ECMP entropy, when
// the Link grants it (link.Link.SourcePort); otherwise from the Link's own
// port. The ICRC covers the port, so it is computed with the one used.
//
// # Congestion control
//
// With Config.CC enabled (cc.go, package dcqcn), every packet leaves with a
// TOS from its QP's or AH's traffic class: data with ECT(0), ACKs Not-ECT,
// CNPs cnp_dscp. A CE-marked packet that passes a QP's checks makes it send
// a CNP to the sender (at most one per min_time_between_cnps); a CNP
// received drives the QP's DCQCN reaction point, whose rate limits what
// takeTurn lets the QP emit through a token bucket. A QP the bucket holds
// is not queued again; its timer wakes it when credit is back. Off, the
// traffic class goes out as given, CE marks are only counted and CNPs are
// ignored, as in rxe.
package transport

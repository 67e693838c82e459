package cm

import (
	"fmt"
	"math/rand/v2"
	"net/netip"
	"time"
)

// State is the state of one communication ID (IBA 12.9.6; ib_cm.h enum
// ib_cm_state).
type State uint8

// Communication ID states.
const (
	StateIdle        State = iota
	StateREQSent           // active: REQ sent, waiting for REP (retransmitting REQ)
	StateREQRcvd           // passive: REQ received, waiting for Accept/Reject
	StateMRAREQSent        // passive: told the peer (MRA) that Accept is slow
	StateMRAREQRcvd        // active: the peer MRA'd our REQ; waiting longer
	StateREPSent           // passive: REP sent, waiting for RTU (retransmitting REP)
	StateREPRcvd           // active: REP received, waiting for ReadyToUse
	StateMRAREPRcvd        // passive: the peer MRA'd our REP
	StateEstablished       // connected
	StateDREQSent          // DREQ sent, waiting for DREP (retransmitting DREQ)
	StateDREQRcvd          // DREQ received, waiting for Disconnect to send DREP
	StateTimeWait          // disconnected or rejected; duplicates are still answered
	StateSIDRREQSent       // SIDR_REQ sent, waiting for SIDR_REP
	StateSIDRREQRcvd       // SIDR_REQ received, waiting for SIDRReply
)

var stateNames = [...]string{"idle", "REQ sent", "REQ received", "MRA REQ sent", "MRA REQ received",
	"REP sent", "REP received", "MRA REP received", "established", "DREQ sent", "DREQ received",
	"timewait", "SIDR REQ sent", "SIDR REQ received"}

// String names the state, e.g. "REQ sent".
func (s State) String() string {
	if int(s) < len(stateNames) {
		return stateNames[s]
	}
	return fmt.Sprintf("State(%d)", uint8(s))
}

// EventType says what happened to a communication ID.
type EventType uint8

// Machine events.
const (
	// EventConnectRequest: a REQ for a listened service ID arrived
	// (Event.REQ). Answer with Accept, Reject or MRA.
	EventConnectRequest EventType = iota + 1
	// EventReply: the peer accepted our REQ (Event.REP). Move the QP to
	// RTR/RTS, then call ReadyToUse (or Reject).
	EventReply
	// EventEstablished: the passive side received RTU.
	EventEstablished
	// EventRejected: the peer sent REJ (Event.Err is a *RejectError).
	EventRejected
	// EventUnreachable: a REQ, REP or SIDR_REQ got no answer (Event.Err is
	// ErrTimeout).
	EventUnreachable
	// EventDisconnectRequest: the peer sent DREQ. Call Disconnect to answer
	// with DREP.
	EventDisconnectRequest
	// EventDisconnected: the connection entered timewait (DREP received,
	// DREP sent, or DREQ unanswered); the QP should go to the error state.
	EventDisconnected
	// EventTimeWaitExit: the communication ID was released.
	EventTimeWaitExit
	// EventSIDRRequest: a SIDR_REQ for a listened service ID arrived
	// (Event.SIDRREQ). Answer with SIDRReply.
	EventSIDRRequest
	// EventSIDRReply: the answer to our SIDR_REQ (Event.SIDRREP).
	EventSIDRReply
)

var eventNames = [...]string{"", "connect request", "reply", "established", "rejected", "unreachable",
	"disconnect request", "disconnected", "timewait exit", "SIDR request", "SIDR reply"}

// String names the event type.
func (t EventType) String() string {
	if int(t) < len(eventNames) && t != 0 {
		return eventNames[t]
	}
	return fmt.Sprintf("EventType(%d)", uint8(t))
}

// Event is one output of the Machine for its owner. Message fields are set
// only for the event types that carry them.
type Event struct {
	Type    EventType
	ID      uint32     // local communication ID (SIDR: request ID)
	Peer    netip.Addr // the remote CM's address
	REQ     *REQ
	REP     *REP
	SIDRREQ *SIDRREQ
	SIDRREP *SIDRREP
	Err     error
	// PrivateData of RTU, DREQ or DREP.
	PrivateData []byte
}

// Datagram is a MAD the owner must send to QP1 at Peer.
type Datagram struct {
	Peer netip.Addr
	MAD  []byte // 256 bytes, owned by the receiver
}

// Stats counts what the Machine saw. Read it through Machine.Stats.
type Stats struct {
	RxMADs      uint64 // MADs handed to Receive
	TxMADs      uint64 // MADs emitted, retransmissions included
	Malformed   uint64 // dropped: failed Parse
	Unmatched   uint64 // dropped: no communication ID matches, or wrong state
	Duplicates  uint64 // duplicate REQ/REP/DREQ/SIDR_REQ answered from saved state
	Retransmits uint64 // REQ/REP/DREQ/SIDR_REQ resent after a timeout
	Timeouts    uint64 // retries exhausted
	RejSent     uint64
	RejRcvd     uint64
	// Refused counts REQs dropped at the pending-connection caps
	// (Config.MaxPending, MaxUnansweredPerPeer), each retransmission again.
	Refused uint64
	// Discarded counts REQs the owner had no room for (Discard: a
	// listener's full backlog), dropped unanswered and forgotten.
	Discarded uint64
	// Expired counts passive connections withdrawn because they were not
	// established within Config.PendingTimeout.
	Expired uint64
	// Evicted counts oldest unanswered REPs withdrawn to admit a REQ.
	Evicted uint64
	// REPs counts REPs sent, retransmissions included: what REQs that are
	// never answered with an RTU (a spoofed flood) cost in replies.
	REPs uint64
}

// Config tunes a Machine. The zero value is rdma_cm's behaviour.
type Config struct {
	// Rand returns random numbers for communication IDs and TIDs; nil uses
	// math/rand/v2.
	Rand func() uint32
	// TimeWait is how long a finished communication ID keeps answering
	// duplicates. Zero: twice the peer's retransmission interval (CM response
	// timeout + 2 × packet lifetime), ≈ 13 s with rdma_cm's values.
	TimeWait time.Duration
	// MRAServiceTimeout is the 5-bit service timeout sent in MRA when a
	// duplicate REQ arrives before Accept. Zero: 20 (≈ 4.3 s).
	MRAServiceTimeout uint8
	// MaxPending caps the pending passive connections: REQ received and
	// not yet established (no RTU). It bounds what REQs that are never
	// answered hold, from any number of (spoofed) addresses.
	//
	// MaxUnansweredPerPeer caps, per source address, the pending
	// connections whose REP went unanswered: no RTU within the response
	// time the peer itself promised (the REQ's local CM response timeout,
	// after which REP is resent). A peer whose RTUs come back in time
	// never counts against it, however many connections it opens at once;
	// one that stops answering gets no more than this many.
	//
	// A new REQ over MaxPending evicts the oldest unanswered REP (see
	// makeRoom); with none, or over the per-peer cap, it is dropped without
	// a REJ and counted in Stats.Refused: cm.c does not reject a REQ its
	// consumer cannot take for want of resources (cm_destroy_id with
	// -ENOMEM: "do not reject to allow future retries"), so a real peer's
	// REQ retransmission gets in once a slot frees. Zero: no cap.
	MaxPending, MaxUnansweredPerPeer int
	// MaxTimeWait caps timewait, which otherwise follows the peer's
	// timeouts (up to hours for a REQ with CM response timeout 31). Zero:
	// no cap.
	MaxTimeWait time.Duration
	// PendingTimeout withdraws a pending passive connection that is not
	// established this long after its REQ: REJ (timeout) and
	// EventUnreachable, whatever retry counts the REQ asked for. Zero:
	// only the REP retries bound it.
	PendingTimeout time.Duration
}

// entry is one communication ID.
type entry struct {
	id, remoteID uint32
	peer         netip.Addr
	state        State
	active       bool
	tid          uint64 // of the REQ (both sides); DREQ/SIDR use their own
	req          REQ    // the REQ sent or received
	rep          REP    // the REP sent or received
	lifetime     time.Duration
	// Retransmission of the last request we sent (REQ, REP, DREQ, SIDR_REQ).
	retry    []byte
	retries  int // retransmissions left
	interval time.Duration
	deadline time.Time // zero: no timer
	lastTx   time.Time // last (re)transmission of retry
	// reply is the saved answer for duplicates: MRA (to a dup REQ), RTU (to a
	// dup REP), DREP (to a dup DREQ), REJ (to a dup REQ after Reject),
	// SIDR_REP.
	reply     []byte
	dreqTID   uint64
	sidrReq   SIDRREQ
	remoteKey remoteKey
	expires   time.Time // passive pending: withdrawn then (Config.PendingTimeout)
	// unanswered: passive pending whose REP had to be resent (no RTU in
	// the peer's own response time); counted in Machine.unansweredBy.
	unanswered bool
	sched      time.Time // e's deadline in Machine.timers
	pos        int       // e's index in Machine.timers + 1; 0: not there
	// older, newer link e on Machine.replied while listed.
	older, newer *entry
	listed       bool
}

type remoteKey struct {
	peer netip.Addr
	id   uint32 // the peer's communication ID (SIDR: request ID)
	sidr bool
}

// Machine is the CM state machine for one port (one QP1). It is pure: it
// never blocks, does no I/O and reads no clock; every input carries now.
// Outputs accumulate until Drain. A Machine is not safe for concurrent use:
// exactly one goroutine owns it.
type Machine struct {
	cfg          Config
	tidHi        uint32
	byID         map[uint32]*entry
	byRemote     map[remoteKey]*entry
	listening    map[uint64]bool
	out          []Datagram
	events       []Event
	stats        Stats
	pending      int                // passive connections not yet established
	unansweredBy map[netip.Addr]int // those of them whose REP went unanswered, by peer
	timers       timers             // the entries with a deadline, earliest first
	replied      replied            // passive connections in REP sent, evictable
	touched      []*entry           // entries whose deadline may have moved since reschedule
}

// NewMachine returns an idle Machine.
func NewMachine(cfg Config) *Machine {
	if cfg.Rand == nil {
		cfg.Rand = rand.Uint32
	}
	if cfg.MRAServiceTimeout == 0 {
		cfg.MRAServiceTimeout = 20
	}
	return &Machine{cfg: cfg, tidHi: cfg.Rand(), byID: map[uint32]*entry{},
		byRemote: map[remoteKey]*entry{}, listening: map[uint64]bool{}, unansweredBy: map[netip.Addr]int{}}
}

// Stats returns the counters.
func (m *Machine) Stats() Stats { return m.stats }

// Drain returns and clears the MADs to send and the events, in order.
func (m *Machine) Drain() ([]Datagram, []Event) {
	m.reschedule()
	out, ev := m.out, m.events
	m.out, m.events = nil, nil
	return out, ev
}

// State returns the state of communication ID id (StateIdle if unknown).
func (m *Machine) State(id uint32) State {
	if e := m.byID[id]; e != nil {
		return e.state
	}
	return StateIdle
}

// Pending returns how many passive connections wait for their RTU (or for
// Accept): the number Config.MaxPending caps.
func (m *Machine) Pending() int { return m.pending }

// passivePending reports whether e is a passive connection not yet
// established: what the pending caps count.
func (e *entry) passivePending() bool {
	if e.active {
		return false
	}
	switch e.state {
	case StateREQRcvd, StateMRAREQSent, StateREPSent, StateMRAREPRcvd:
		return true
	}
	return false
}

// setState moves e to st and keeps the pending counts.
func (m *Machine) setState(e *entry, st State) {
	was := e.passivePending()
	e.state = st
	m.track(e)
	switch is := e.passivePending(); {
	case is && !was:
		m.pending++
	case was && !is:
		m.unpend(e)
	}
}

// unpend takes e, which is no longer pending, out of the pending counts.
func (m *Machine) unpend(e *entry) {
	m.pending--
	if !e.unanswered {
		return
	}
	e.unanswered = false
	if n := m.unansweredBy[e.peer] - 1; n > 0 {
		m.unansweredBy[e.peer] = n
	} else {
		delete(m.unansweredBy, e.peer)
	}
}

// markUnanswered counts e against its peer's MaxUnansweredPerPeer: its REP
// is resent because no RTU came in the time the peer promised.
func (m *Machine) markUnanswered(e *entry) {
	if e.unanswered || !e.passivePending() {
		return
	}
	e.unanswered = true
	m.unansweredBy[e.peer]++
}

// admit reports whether a new REQ from peer fits under the pending caps.
func (m *Machine) admit(peer netip.Addr) bool {
	c := &m.cfg
	if c.MaxUnansweredPerPeer > 0 && m.unansweredBy[peer] >= c.MaxUnansweredPerPeer {
		return false
	}
	return c.MaxPending <= 0 || m.pending < c.MaxPending || m.makeRoom()
}

// Unanswered returns how many pending passive connections of peer have a
// REP that went unanswered: the number Config.MaxUnansweredPerPeer caps.
func (m *Machine) Unanswered(peer netip.Addr) int { return m.unansweredBy[peer] }

// Listen accepts REQs and SIDR_REQs for serviceID.
func (m *Machine) Listen(serviceID uint64) error {
	if m.listening[serviceID] {
		return ErrInUse
	}
	m.listening[serviceID] = true
	return nil
}

// Unlisten stops accepting requests for serviceID.
func (m *Machine) Unlisten(serviceID uint64) { delete(m.listening, serviceID) }

// entry returns the entry of id (nil if unknown), touched: whatever the
// caller does to it, its timer follows.
func (m *Machine) entry(id uint32) *entry {
	e := m.byID[id]
	if e != nil {
		m.touch(e)
	}
	return e
}

// add makes e known by its ID, with its timer.
func (m *Machine) add(e *entry) {
	m.byID[e.id] = e
	m.touch(e)
}

func (m *Machine) newID() uint32 {
	for {
		id := m.cfg.Rand()
		if id != 0 && m.byID[id] == nil {
			return id
		}
	}
}

func (m *Machine) newTID(id uint32) uint64 { return uint64(m.tidHi)<<32 | uint64(id) }

func (m *Machine) emit(ev Event) { m.events = append(m.events, ev) }

// send marshals msg and queues it. Marshal errors cannot happen for messages
// the Machine builds from validated input.
func (m *Machine) send(peer netip.Addr, tid uint64, msg Message) []byte {
	b, err := Marshal(tid, msg)
	if err != nil {
		panic("cm: internal marshal error: " + err.Error())
	}
	m.resend(peer, b)
	return b
}

func (m *Machine) resend(peer netip.Addr, b []byte) {
	m.stats.TxMADs++
	m.out = append(m.out, Datagram{Peer: peer, MAD: append([]byte(nil), b...)})
}

// armRetry makes b the message retransmitted every interval, retries times.
func (e *entry) armRetry(now time.Time, b []byte, interval time.Duration, retries int) {
	e.retry, e.interval, e.retries = b, interval, retries
	e.lastTx, e.deadline = now, now.Add(interval)
}

func (e *entry) stopRetry() { e.retry, e.deadline = nil, time.Time{} }

func (m *Machine) enterTimeWait(now time.Time, e *entry) {
	m.setState(e, StateTimeWait)
	e.stopRetry()
	tw := m.cfg.TimeWait
	if tw == 0 {
		// Long enough to answer at least one retransmission of the peer's
		// last request (REQ, DREQ: every CM response timeout + 2 × packet
		// lifetime).
		t := max(e.req.LocalCMResponseTimeout, e.req.RemoteCMResponseTimeout)
		tw = 2 * (TimeoutDuration(t) + 2*e.lifetime)
	}
	if m.cfg.MaxTimeWait > 0 {
		tw = min(tw, m.cfg.MaxTimeWait)
	}
	e.deadline = now.Add(tw)
}

func (m *Machine) remove(e *entry) {
	if e.passivePending() {
		m.unpend(e)
	}
	m.replied.unlink(e)
	m.schedule(e, time.Time{})
	delete(m.byID, e.id)
	if m.byRemote[e.remoteKey] == e {
		delete(m.byRemote, e.remoteKey)
	}
}

func (m *Machine) setRemote(e *entry, id uint32) {
	e.remoteID = id
	e.remoteKey = remoteKey{peer: e.peer, id: id}
	m.byRemote[e.remoteKey] = e
}

// lifetime is the packet lifetime of a REQ's path: rdma_cm sets the local
// ACK timeout to packet lifetime + 1.
func pathLifetime(r *REQ) time.Duration {
	t := r.Primary.LocalACKTimeout
	if t > 0 {
		t--
	}
	return TimeoutDuration(t)
}

// Connect sends req (LocalCommID is assigned here) to the CM at peer and
// returns the new communication ID. REQ is retransmitted every
// RemoteCMResponseTimeout + 2 × packet lifetime, MaxCMRetries times.
func (m *Machine) Connect(now time.Time, peer netip.Addr, req REQ) (uint32, error) {
	if len(req.PrivateData) > REQPrivateDataLen {
		return 0, fmt.Errorf("%w: REQ carries at most %d bytes", ErrPrivateDataTooLong, REQPrivateDataLen)
	}
	e := &entry{id: m.newID(), peer: peer, state: StateREQSent, active: true}
	e.tid = m.newTID(e.id)
	req.LocalCommID = e.id
	e.req = req
	e.lifetime = pathLifetime(&req)
	m.add(e)
	b := m.send(peer, e.tid, &req)
	e.armRetry(now, b, TimeoutDuration(req.RemoteCMResponseTimeout)+2*e.lifetime, int(req.MaxCMRetries))
	return e.id, nil
}

// Accept answers the REQ of communication ID id with rep (comm IDs are
// filled in here). REP is retransmitted until RTU arrives.
func (m *Machine) Accept(now time.Time, id uint32, rep REP) error {
	e := m.entry(id)
	if e == nil {
		return ErrUnknownID
	}
	if e.state != StateREQRcvd && e.state != StateMRAREQSent {
		return fmt.Errorf("%w: Accept in state %v", ErrState, e.state)
	}
	if len(rep.PrivateData) > REPPrivateDataLen {
		return fmt.Errorf("%w: REP carries at most %d bytes", ErrPrivateDataTooLong, REPPrivateDataLen)
	}
	rep.LocalCommID, rep.RemoteCommID = e.id, e.remoteID
	e.rep = rep
	m.setState(e, StateREPSent)
	e.reply = nil
	m.stats.REPs++
	b := m.send(e.peer, e.tid, &rep)
	e.armRetry(now, b, TimeoutDuration(e.req.LocalCMResponseTimeout)+2*e.lifetime, int(e.req.MaxCMRetries))
	return nil
}

// Discard forgets the received REQ of id without answering it: the owner
// has no room for it (a listener's full backlog). cm.c drops such a REQ so
// that the peer retries (cm_destroy_id with -ENOMEM resets the ID to idle),
// and so does Discard: the peer's retransmission of the REQ arrives as a new
// one. Counted in Stats.Discarded.
func (m *Machine) Discard(id uint32) error {
	e := m.entry(id)
	if e == nil {
		return ErrUnknownID
	}
	if e.state != StateREQRcvd {
		return fmt.Errorf("%w: Discard in state %v", ErrState, e.state)
	}
	m.stats.Discarded++
	m.remove(e)
	return nil
}

// SendMRA tells the peer that the answer to its REQ will take up to
// serviceTimeout (a 5-bit time code), so it stops retransmitting.
func (m *Machine) SendMRA(id uint32, serviceTimeout uint8) error {
	e := m.entry(id)
	if e == nil {
		return ErrUnknownID
	}
	if e.state != StateREQRcvd && e.state != StateMRAREQSent {
		return fmt.Errorf("%w: MRA in state %v", ErrState, e.state)
	}
	m.sendMRA(e, serviceTimeout)
	return nil
}

func (m *Machine) sendMRA(e *entry, serviceTimeout uint8) {
	m.setState(e, StateMRAREQSent)
	e.reply = m.send(e.peer, e.tid, &MRA{LocalCommID: e.id, RemoteCommID: e.remoteID,
		MessageMRAed: MsgREQ, ServiceTimeout: serviceTimeout})
}

// Reject answers a received REQ (passive) or REP (active) with REJ. The
// communication ID enters timewait and answers duplicates with the same REJ.
func (m *Machine) Reject(now time.Time, id uint32, reason RejectReason, privateData []byte) error {
	e := m.entry(id)
	if e == nil {
		return ErrUnknownID
	}
	if len(privateData) > REJPrivateDataLen {
		return fmt.Errorf("%w: REJ carries at most %d bytes", ErrPrivateDataTooLong, REJPrivateDataLen)
	}
	var which uint8
	switch e.state {
	case StateREQRcvd, StateMRAREQSent:
		which = MsgREQ
	case StateREPRcvd:
		which = MsgREP
	default:
		return fmt.Errorf("%w: Reject in state %v", ErrState, e.state)
	}
	m.stats.RejSent++
	e.reply = m.send(e.peer, e.tid, &REJ{LocalCommID: e.id, RemoteCommID: e.remoteID,
		MessageRejected: which, Reason: reason, PrivateData: privateData})
	m.enterTimeWait(now, e)
	return nil
}

// ReadyToUse sends RTU after REP: the active side's QP is in RTS.
func (m *Machine) ReadyToUse(id uint32, privateData []byte) error {
	e := m.entry(id)
	if e == nil {
		return ErrUnknownID
	}
	if e.state != StateREPRcvd {
		return fmt.Errorf("%w: RTU in state %v", ErrState, e.state)
	}
	if len(privateData) > RTUPrivateDataLen {
		return fmt.Errorf("%w: RTU carries at most %d bytes", ErrPrivateDataTooLong, RTUPrivateDataLen)
	}
	e.reply = m.send(e.peer, e.tid, &RTU{LocalCommID: e.id, RemoteCommID: e.remoteID, PrivateData: privateData})
	m.setState(e, StateEstablished)
	return nil
}

// Disconnect sends DREQ on an established connection, or DREP to answer a
// received DREQ. It is also how a pending connection is abandoned: a REQ not
// yet answered is withdrawn with REJ (timeout), a received REQ or REP is
// rejected, an unanswered REP is withdrawn with REJ.
func (m *Machine) Disconnect(now time.Time, id uint32, privateData []byte) error {
	e := m.entry(id)
	if e == nil {
		return ErrUnknownID
	}
	if len(privateData) > DREPPrivateDataLen || len(privateData) > DREQPrivateDataLen && e.state != StateDREQRcvd {
		return fmt.Errorf("%w: DREQ/DREP private data", ErrPrivateDataTooLong)
	}
	switch e.state {
	case StateEstablished:
		e.dreqTID = m.newTID(e.id)
		m.setState(e, StateDREQSent)
		remoteQPN := e.rep.LocalQPN
		if !e.active {
			remoteQPN = e.req.LocalQPN
		}
		b := m.send(e.peer, e.dreqTID, &DREQ{LocalCommID: e.id, RemoteCommID: e.remoteID,
			RemoteQPN: remoteQPN, PrivateData: privateData})
		m.armRetryDREQ(now, e, b)
	case StateDREQRcvd:
		e.reply = m.send(e.peer, e.dreqTID, &DREP{LocalCommID: e.id, RemoteCommID: e.remoteID, PrivateData: privateData})
		m.enterTimeWait(now, e)
		m.emit(Event{Type: EventDisconnected, ID: e.id, Peer: e.peer})
	case StateREQSent, StateMRAREQRcvd, StateREPSent, StateMRAREPRcvd:
		// cm.c cm_destroy_id: withdraw with REJ reason timeout.
		which := uint8(MsgREQ)
		if !e.active {
			which = MsgREP
		}
		m.stats.RejSent++
		e.reply = m.send(e.peer, e.tid, &REJ{LocalCommID: e.id, RemoteCommID: e.remoteID,
			MessageRejected: which, Reason: RejTimeout})
		m.enterTimeWait(now, e)
	case StateREQRcvd, StateMRAREQSent, StateREPRcvd:
		return m.Reject(now, id, RejConsumerDefined, nil)
	case StateDREQSent, StateTimeWait:
		// Already disconnecting.
	default:
		return fmt.Errorf("%w: Disconnect in state %v", ErrState, e.state)
	}
	return nil
}

func (m *Machine) armRetryDREQ(now time.Time, e *entry, b []byte) {
	t := e.req.RemoteCMResponseTimeout
	if !e.active {
		t = e.req.LocalCMResponseTimeout
	}
	e.armRetry(now, b, TimeoutDuration(t)+2*e.lifetime, int(e.req.MaxCMRetries))
}

// ResolveService sends a SIDR_REQ for serviceID to the CM at peer (UD
// services, udaddy) and returns the request ID. The answer arrives as
// EventSIDRReply. It is retransmitted every timeout, retries times.
func (m *Machine) ResolveService(now time.Time, peer netip.Addr, req SIDRREQ, timeout time.Duration, retries int) (uint32, error) {
	if len(req.PrivateData) > SIDRREQPrivateDataLen {
		return 0, fmt.Errorf("%w: SIDR_REQ carries at most %d bytes", ErrPrivateDataTooLong, SIDRREQPrivateDataLen)
	}
	e := &entry{id: m.newID(), peer: peer, state: StateSIDRREQSent, active: true}
	e.tid = m.newTID(e.id)
	req.RequestID = e.id
	e.sidrReq = req
	m.add(e)
	b := m.send(peer, e.tid, &req)
	e.armRetry(now, b, timeout, retries)
	return e.id, nil
}

// SIDRReply answers the SIDR_REQ of id. rep.RequestID and ServiceID are
// filled in. The ID stays for a timewait to answer duplicates.
func (m *Machine) SIDRReply(now time.Time, id uint32, rep SIDRREP) error {
	e := m.entry(id)
	if e == nil {
		return ErrUnknownID
	}
	if e.state != StateSIDRREQRcvd {
		return fmt.Errorf("%w: SIDR_REP in state %v", ErrState, e.state)
	}
	if len(rep.PrivateData) > SIDRREPPrivateDataLen {
		return fmt.Errorf("%w: SIDR_REP carries at most %d bytes", ErrPrivateDataTooLong, SIDRREPPrivateDataLen)
	}
	rep.RequestID, rep.ServiceID = e.remoteID, e.sidrReq.ServiceID
	e.reply = m.send(e.peer, e.tid, &rep)
	m.enterTimeWait(now, e)
	return nil
}

// next is e's earliest timer: its retransmission or timewait deadline, or
// the end of its pending time.
func (e *entry) next() time.Time {
	if !e.expires.IsZero() && e.passivePending() && (e.deadline.IsZero() || e.expires.Before(e.deadline)) {
		return e.expires
	}
	return e.deadline
}

// expire withdraws a passive connection still pending at its
// Config.PendingTimeout, into timewait.
func (m *Machine) expire(now time.Time, e *entry) {
	m.stats.Expired++
	m.withdraw(e)
	m.enterTimeWait(now, e)
}

// withdraw rejects a pending passive connection (timeout) and tells the owner.
func (m *Machine) withdraw(e *entry) {
	m.stats.RejSent++
	which := uint8(MsgREP)
	if e.state == StateREQRcvd || e.state == StateMRAREQSent {
		which = MsgREQ
	}
	e.reply = m.send(e.peer, e.tid, &REJ{LocalCommID: e.id, RemoteCommID: e.remoteID,
		MessageRejected: which, Reason: RejTimeout})
	m.emit(Event{Type: EventUnreachable, ID: e.id, Peer: e.peer, Err: ErrTimeout})
}

// Tick runs every timer due at now: retransmissions, retry exhaustion and
// timewait exits.
func (m *Machine) Tick(now time.Time) {
	m.reschedule()
	defer m.reschedule()
	for e := m.due(now); e != nil; e = m.due(now) {
		if d := e.next(); d.IsZero() || now.Before(d) {
			continue
		}
		if e.passivePending() && !e.expires.IsZero() && !now.Before(e.expires) {
			m.expire(now, e)
			continue
		}
		if e.state == StateTimeWait {
			m.remove(e)
			m.emit(Event{Type: EventTimeWaitExit, ID: e.id, Peer: e.peer})
			continue
		}
		if e.retries > 0 && e.retry != nil {
			e.retries--
			m.stats.Retransmits++
			if attrOf(e.retry) == AttrREP {
				m.stats.REPs++
				if e.state == StateREPSent {
					m.markUnanswered(e) // an MRA for our REP said the peer is alive
				}
			}
			m.resend(e.peer, e.retry)
			e.lastTx, e.deadline = now, now.Add(e.interval)
			continue
		}
		m.stats.Timeouts++
		switch e.state {
		case StateREQSent, StateMRAREQRcvd, StateSIDRREQSent:
			m.remove(e)
			m.emit(Event{Type: EventUnreachable, ID: e.id, Peer: e.peer, Err: ErrTimeout})
		case StateREPSent, StateMRAREPRcvd:
			// No RTU: withdraw the REP (cm.c: REP error, REJ timeout).
			m.stats.RejSent++
			e.reply = m.send(e.peer, e.tid, &REJ{LocalCommID: e.id, RemoteCommID: e.remoteID,
				MessageRejected: MsgREP, Reason: RejTimeout})
			m.enterTimeWait(now, e)
			m.emit(Event{Type: EventUnreachable, ID: e.id, Peer: e.peer, Err: ErrTimeout})
		case StateDREQSent:
			m.enterTimeWait(now, e)
			m.emit(Event{Type: EventDisconnected, ID: e.id, Peer: e.peer, Err: ErrTimeout})
		default:
			e.stopRetry()
		}
	}
}

// Receive processes one MAD that arrived on QP1 from peer. Malformed MADs
// and MADs matching no communication ID are counted and dropped.
func (m *Machine) Receive(now time.Time, peer netip.Addr, mad []byte) {
	m.stats.RxMADs++
	h, msg, err := Parse(mad)
	if err != nil {
		m.stats.Malformed++
		return
	}
	switch msg := msg.(type) {
	case *REQ:
		m.onREQ(now, peer, h, msg)
	case *MRA:
		m.onMRA(now, peer, msg)
	case *REJ:
		m.onREJ(now, peer, msg)
	case *REP:
		m.onREP(peer, msg)
	case *RTU:
		m.onRTU(peer, msg)
	case *DREQ:
		m.onDREQ(now, peer, h, msg)
	case *DREP:
		m.onDREP(now, peer, msg)
	case *SIDRREQ:
		m.onSIDRREQ(peer, h, msg)
	case *SIDRREP:
		m.onSIDRREP(peer, msg)
	}
}

// lookup finds the entry a reply addresses: RemoteCommID is our ID; when
// we already know the peer's ID it must match LocalCommID.
func (m *Machine) lookup(peer netip.Addr, ours, theirs uint32) *entry {
	e := m.entry(ours)
	if e == nil || e.peer != peer || (e.remoteID != 0 && e.remoteID != theirs) {
		m.stats.Unmatched++
		return nil
	}
	return e
}

func (m *Machine) onREQ(now time.Time, peer netip.Addr, h Header, req *REQ) {
	if e := m.byRemote[remoteKey{peer: peer, id: req.LocalCommID}]; e != nil {
		// A duplicate: answer from saved state, never create a second
		// connection (IBA 12.9.6 / cm.c cm_dup_req_handler).
		m.stats.Duplicates++
		m.touch(e)
		switch e.state {
		case StateREQRcvd:
			m.sendMRA(e, m.cfg.MRAServiceTimeout)
		case StateMRAREQSent:
			if e.reply != nil {
				m.resend(peer, e.reply)
			}
		case StateTimeWait:
			if e.rejectedREQ() {
				// We rejected this very REQ: say so again.
				m.resend(peer, e.reply)
				break
			}
			// The connection this REQ set up is over (cm.c answers with
			// cm_format_rej in timewait: our ID, MessageRejected other).
			// e.reply (DREP, RTU, a REJ of the REP) is no answer to a REQ.
			m.stats.RejSent++
			m.send(peer, h.TID, &REJ{LocalCommID: e.id, RemoteCommID: e.remoteID,
				MessageRejected: MsgOther, Reason: RejStaleConn})
		case StateREPSent, StateMRAREPRcvd:
			// The peer lost our REP. Resend it now, unless our own timer
			// just did, and count it as the retransmission.
			if now.Sub(e.lastTx) >= e.interval/2 {
				m.stats.REPs++
				m.resend(peer, e.retry)
				e.lastTx = now
				e.deadline = now.Add(e.interval)
			}
		}
		return
	}
	if !m.listening[req.ServiceID] {
		m.rejectUnsolicited(peer, h.TID, req.LocalCommID, RejInvalidServiceID)
		return
	}
	if req.TransportServiceType != TransportRC && req.TransportServiceType != TransportUC {
		m.rejectUnsolicited(peer, h.TID, req.LocalCommID, RejInvalidTransportType)
		return
	}
	if !m.admit(peer) {
		m.stats.Refused++
		return
	}
	e := &entry{id: m.newID(), peer: peer, tid: h.TID, req: *req}
	e.lifetime = pathLifetime(req)
	if m.cfg.PendingTimeout > 0 {
		e.expires = now.Add(m.cfg.PendingTimeout)
	}
	m.setState(e, StateREQRcvd)
	m.add(e)
	m.setRemote(e, req.LocalCommID)
	r := *req
	m.emit(Event{Type: EventConnectRequest, ID: e.id, Peer: peer, REQ: &r})
}

// rejectedREQ reports whether e's saved reply is the REJ it sent in answer
// to the peer's REQ (Reject in REQ received or MRA REQ sent), which a
// duplicate of that REQ gets again. A REJ of a REP (MessageRejected MsgREP:
// the passive side withdrew its REP, or the active side rejected one) is not.
func (e *entry) rejectedREQ() bool {
	if e.active || len(e.reply) < MADLen || attrOf(e.reply) != AttrREJ {
		return false
	}
	return e.reply[HeaderLen+8]>>6 == MsgREQ // REJ byte 8: MessageRejected(2)
}

// rejectUnsolicited answers a REQ that creates no state (cm.c cm_issue_rej).
func (m *Machine) rejectUnsolicited(peer netip.Addr, tid uint64, remoteID uint32, reason RejectReason) {
	m.stats.RejSent++
	m.send(peer, tid, &REJ{RemoteCommID: remoteID, MessageRejected: MsgREQ, Reason: reason})
}

func (m *Machine) onMRA(now time.Time, peer netip.Addr, mra *MRA) {
	e := m.lookup(peer, mra.RemoteCommID, mra.LocalCommID)
	if e == nil {
		return
	}
	wait := TimeoutDuration(mra.ServiceTimeout) + e.lifetime
	switch {
	case mra.MessageMRAed == MsgREQ && (e.state == StateREQSent || e.state == StateMRAREQRcvd):
		m.setState(e, StateMRAREQRcvd)
	case mra.MessageMRAed == MsgREP && (e.state == StateREPSent || e.state == StateMRAREPRcvd):
		m.setState(e, StateMRAREPRcvd)
	default:
		m.stats.Unmatched++
		return
	}
	// Keep the retries but wait for the promised service time first.
	e.deadline = now.Add(wait)
}

func (m *Machine) onREJ(now time.Time, peer netip.Addr, rej *REJ) {
	e := m.entry(rej.RemoteCommID)
	if e == nil || e.peer != peer {
		m.stats.Unmatched++
		return
	}
	m.stats.RejRcvd++
	switch e.state {
	case StateREQSent, StateMRAREQRcvd, StateREPSent, StateMRAREPRcvd, StateREPRcvd, StateEstablished, StateDREQSent:
		m.remove(e)
		m.emit(Event{Type: EventRejected, ID: e.id, Peer: peer,
			Err: &RejectError{Reason: rej.Reason, PrivateData: rej.PrivateData}})
	default:
		m.stats.Unmatched++
	}
}

func (m *Machine) onREP(peer netip.Addr, rep *REP) {
	e := m.lookup(peer, rep.RemoteCommID, rep.LocalCommID)
	if e == nil {
		return
	}
	switch e.state {
	case StateREQSent, StateMRAREQRcvd:
		e.stopRetry()
		m.setRemote(e, rep.LocalCommID)
		e.rep = *rep
		m.setState(e, StateREPRcvd)
		r := *rep
		m.emit(Event{Type: EventReply, ID: e.id, Peer: peer, REP: &r})
	case StateEstablished:
		// Our RTU was lost: the peer retransmits REP. Resend RTU.
		m.stats.Duplicates++
		if e.reply != nil {
			m.resend(peer, e.reply)
		}
	case StateREPRcvd:
		m.stats.Duplicates++ // the owner has not sent RTU yet
	default:
		m.stats.Unmatched++
	}
}

func (m *Machine) onRTU(peer netip.Addr, rtu *RTU) {
	e := m.lookup(peer, rtu.RemoteCommID, rtu.LocalCommID)
	if e == nil {
		return
	}
	if e.state != StateREPSent && e.state != StateMRAREPRcvd {
		m.stats.Duplicates++
		return
	}
	e.stopRetry()
	m.setState(e, StateEstablished)
	m.emit(Event{Type: EventEstablished, ID: e.id, Peer: peer, PrivateData: rtu.PrivateData})
}

func (m *Machine) onDREQ(now time.Time, peer netip.Addr, h Header, dreq *DREQ) {
	e := m.lookup(peer, dreq.RemoteCommID, dreq.LocalCommID)
	if e == nil {
		return
	}
	switch e.state {
	case StateREPSent, StateMRAREPRcvd, StateEstablished:
		// A DREQ before RTU implies the peer was established (cm.c).
		e.stopRetry()
		e.dreqTID = h.TID
		m.setState(e, StateDREQRcvd)
		m.emit(Event{Type: EventDisconnectRequest, ID: e.id, Peer: peer, PrivateData: dreq.PrivateData})
	case StateDREQSent:
		// Both sides disconnect at once: answer and finish.
		e.dreqTID = h.TID
		e.reply = m.send(peer, h.TID, &DREP{LocalCommID: e.id, RemoteCommID: e.remoteID})
		m.enterTimeWait(now, e)
		m.emit(Event{Type: EventDisconnected, ID: e.id, Peer: peer})
	case StateTimeWait:
		m.stats.Duplicates++
		if e.reply != nil && e.dreqTID == h.TID {
			m.resend(peer, e.reply)
		}
	case StateDREQRcvd:
		m.stats.Duplicates++
	default:
		m.stats.Unmatched++
	}
}

func (m *Machine) onDREP(now time.Time, peer netip.Addr, drep *DREP) {
	e := m.lookup(peer, drep.RemoteCommID, drep.LocalCommID)
	if e == nil {
		return
	}
	if e.state != StateDREQSent {
		m.stats.Duplicates++
		return
	}
	m.enterTimeWait(now, e)
	m.emit(Event{Type: EventDisconnected, ID: e.id, Peer: peer, PrivateData: drep.PrivateData})
}

func (m *Machine) onSIDRREQ(peer netip.Addr, h Header, req *SIDRREQ) {
	key := remoteKey{peer: peer, id: req.RequestID, sidr: true}
	if e := m.byRemote[key]; e != nil {
		m.stats.Duplicates++
		if e.reply != nil {
			m.resend(peer, e.reply)
		}
		return
	}
	if !m.listening[req.ServiceID] {
		m.send(peer, h.TID, &SIDRREP{RequestID: req.RequestID, Status: SIDRUnsupported, ServiceID: req.ServiceID})
		return
	}
	e := &entry{id: m.newID(), peer: peer, state: StateSIDRREQRcvd, tid: h.TID, sidrReq: *req,
		remoteID: req.RequestID, remoteKey: key, lifetime: TimeoutDuration(DefaultPacketLifetime)}
	// SIDR_REQ carries no timeouts: keep the reply through rdma_cm's
	// retransmission interval so duplicates are answered, not re-executed.
	e.req.LocalCMResponseTimeout = DefaultCMResponseTimeout
	m.add(e)
	m.byRemote[key] = e
	r := *req
	m.emit(Event{Type: EventSIDRRequest, ID: e.id, Peer: peer, SIDRREQ: &r})
}

func (m *Machine) onSIDRREP(peer netip.Addr, rep *SIDRREP) {
	e := m.entry(rep.RequestID)
	if e == nil || e.peer != peer || e.state != StateSIDRREQSent {
		m.stats.Unmatched++
		return
	}
	m.remove(e)
	r := *rep
	m.emit(Event{Type: EventSIDRReply, ID: e.id, Peer: peer, SIDRREP: &r})
}

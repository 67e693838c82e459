package roce

import (
	"fmt"

	"github.com/goroce/goroce/internal/core/transport"
)

// AsyncEvent is an async event (struct ibv_async_event): QP, CQ or SRQ for an
// affiliated one, Port for a port event, none for DEVICE_FATAL; nothing to acknowledge
// (the GC).
type AsyncEvent struct {
	Type EventType // event_type
	QP   *QP       // QP events: COMM_EST, QP_FATAL, QP_LAST_WQE_REACHED, ...
	CQ   *CQ       // CQ_ERR
	SRQ  *SRQ      // SRQ_ERR, SRQ_LIMIT_REACHED
	Port int       // PORT_ACTIVE, PORT_ERR: the port number (1)
}

// String formats the event like ibv_asyncwatch: "SRQ_LIMIT_REACHED srq 0x3".
func (e AsyncEvent) String() string {
	switch {
	case e.QP != nil:
		return fmt.Sprintf("%s qp %#x", eventName(e.Type), e.QP.QPN())
	case e.CQ != nil:
		return fmt.Sprintf("%s cq %#x", eventName(e.Type), e.CQ.id)
	case e.SRQ != nil:
		return fmt.Sprintf("%s srq %#x", eventName(e.Type), e.SRQ.id)
	case e.Port == 0:
		return eventName(e.Type)
	}
	return fmt.Sprintf("%s port %d", eventName(e.Type), e.Port)
}

// eventName is ibv_event_type_str without the "IBV_EVENT_" prefix.
func eventName(t EventType) string {
	switch t {
	case EventCQErr:
		return "CQ_ERR"
	case EventQPFatal:
		return "QP_FATAL"
	case EventQPReqErr:
		return "QP_REQ_ERR"
	case EventQPAccessErr:
		return "QP_ACCESS_ERR"
	case EventCommEst:
		return "COMM_EST"
	case EventSQDrained:
		return "SQ_DRAINED"
	case EventDeviceFatal:
		return "DEVICE_FATAL"
	case EventPortActive:
		return "PORT_ACTIVE"
	case EventPortErr:
		return "PORT_ERR"
	case EventSRQErr:
		return "SRQ_ERR"
	case EventSRQLimitReached:
		return "SRQ_LIMIT_REACHED"
	case EventQPLastWQEReached:
		return "QP_LAST_WQE_REACHED"
	}
	return fmt.Sprintf("EVENT(%d)", uint8(t))
}

// Events is ibv_get_async_event as a channel, closed by Close. It is buffered
// (WithEventBuffer); events that do not fit are dropped and counted (DroppedEvents).
func (d *Device) Events() <-chan AsyncEvent { return d.events }

// emit queues ev without blocking.
func (d *Device) emit(ev AsyncEvent) {
	d.evMu.Lock()
	defer d.evMu.Unlock()
	if d.evClosed {
		return
	}
	select {
	case d.events <- ev:
	default:
		d.droppedEvents.Add(1)
	}
}

// onEngineEvent is the engine's OnEvent callback, on a shard goroutine: it maps the
// engine's objects to handles and queues the event.
func (d *Device) onEngineEvent(ev transport.Event) {
	out := AsyncEvent{Type: ev.Type}
	// The type decides the object (LAST_WQE_REACHED carries the QP and its SRQ). SRQ
	// events are roce's own (SRQ.limitReached, onDeviceFatal).
	d.objMu.RLock()
	switch ev.Type {
	case EventCQErr:
		out.CQ = d.cqs[ev.CQ]
	case EventPortActive, EventPortErr:
		out.Port = 1
		d.portDown.Store(ev.Type == EventPortErr)
	case EventDeviceFatal:
		d.objMu.RUnlock()
		d.onDeviceFatal()
		return
	default:
		out.QP = d.qps[ev.QPN]
	}
	d.objMu.RUnlock()
	if out.CQ == nil && out.SRQ == nil && out.QP == nil && out.Port == 0 {
		// Destroyed meanwhile, or not ours (a QP the connection manager made on the
		// engine).
		return
	}
	d.emit(out)
}

// onDeviceFatal handles the engine's catastrophic error: DEVICE_FATAL, then SRQ_ERR for
// every SRQ, put in error since no WR of it can be fetched again. The engine fails the
// QPs (QP_FATAL each); the port goes DOWN with the PORT_ERR that follows.
func (d *Device) onDeviceFatal() {
	d.emit(AsyncEvent{Type: EventDeviceFatal})
	d.objMu.RLock()
	srqs := make([]*SRQ, 0, len(d.srqs))
	for _, s := range d.srqs {
		srqs = append(srqs, s)
	}
	d.objMu.RUnlock()
	for _, s := range srqs {
		s.q.SetError()
		d.emit(AsyncEvent{Type: EventSRQErr, SRQ: s})
	}
}

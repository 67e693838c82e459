package roce

import (
	"testing"
	"time"
)

// waitEvent returns the first event of type typ, skipping others, or fails.
func waitEvent(t *testing.T, d *Device, typ EventType) AsyncEvent {
	t.Helper()
	deadline := time.After(5 * time.Second)
	for {
		select {
		case ev := <-d.Events():
			if ev.Type == typ {
				return ev
			}
		case <-deadline:
			t.Fatalf("no event %v", typ)
		}
	}
}

func TestLastWQEReachedNamesTheQP(t *testing.T) {
	d := pipeDevice(t)
	pd := must[*PD](t)(d.AllocPD())
	c := must[*CQ](t)(d.CreateCQ(16))
	s := must[*SRQ](t)(pd.CreateSRQ(SRQInitAttr{Attr: SRQAttr{MaxWR: 4, MaxSGE: 1}}))
	qp := must[*QP](t)(pd.CreateQP(QPInitAttr{Type: QPTypeRC, SendCQ: c, RecvCQ: c, SRQ: s, Cap: QPCap{MaxSendWR: 4, MaxSendSGE: 1}}))
	driveTo(t, qp, QPTypeRC, QPSRTS)
	noErr(t, qp.Modify(&QPAttr{State: QPSErr}, QPAttrState))
	ev := waitEvent(t, d, EventQPLastWQEReached)
	if ev.QP != qp || ev.CQ != nil || ev.SRQ != nil {
		t.Fatalf("event %v names the wrong object", ev)
	}
	if ev.String() == "" {
		t.Fatal("empty event string")
	}
}

func TestEventTypeNames(t *testing.T) {
	for typ, want := range map[EventType]string{EventCQErr: "CQ_ERR", EventSRQLimitReached: "SRQ_LIMIT_REACHED",
		EventQPLastWQEReached: "QP_LAST_WQE_REACHED", EventPortActive: "PORT_ACTIVE", EventCommEst: "COMM_EST", 99: "EVENT(99)"} {
		if got := eventName(typ); got != want {
			t.Errorf("eventName(%d) = %q, want %q", typ, got, want)
		}
	}
}

package roce

import (
	"testing"
	"time"
)

// TestSRQLimitEventOncePerArmingWhileQPsDrawFromIt follows the procedure of
// ibv_modify_srq(): "Arm the SRQ limit to a non-zero value that is less than the
// number of posted WRs ... When the number of outstanding WRs in the SRQ will drop
// below the limit, the asynchronous event IBV_EVENT_SRQ_LIMIT_REACHED will be
// generated", and ibv_modify_srq(3)'s one-shot rule: the event fires once per
// arming. The WRs are taken by the engine's shard on behalf of RC QPs, which come
// and go between armings: one path raises the event (roce's limit handler), so it
// is never doubled and never lost when the QPs change.
func TestSRQLimitEventOncePerArmingWhileQPsDrawFromIt(t *testing.T) {
	da, db := pipePair(t)
	pdb := must[*PD](t)(db.AllocPD())
	s := must[*SRQ](t)(pdb.CreateSRQ(SRQInitAttr{Attr: SRQAttr{MaxWR: 16, MaxSGE: 1}}))
	rcq := must[*CQ](t)(db.CreateCQ(64))
	const msgs = 6 // per round: 8 posted, limit 4, so the 5th message crosses it
	for round := 0; round < 3; round++ {
		drainEvents(db)
		a := newSide(t, da, QPTypeRC, 64, nil, nil)
		b := &side{dev: db, pd: pdb, scq: must[*CQ](t)(db.CreateCQ(4)), rcq: rcq}
		b.qp = must[*QP](t)(pdb.CreateQP(QPInitAttr{Type: QPTypeRC, SendCQ: b.scq, RecvCQ: rcq, SRQ: s,
			Cap: QPCap{MaxSendWR: 4, MaxSendSGE: 1}}))
		connectRC(t, a, b, MTU1024)
		for s.q.Len() < 8 {
			_ = must[int](t)(s.PostRecv([]RecvWR{{WRID: uint64(round)}}))
		}
		noErr(t, s.Modify(&SRQAttr{Limit: 4}, SRQLimit))
		for i := 0; i < msgs; i++ {
			_ = must[int](t)(a.qp.PostSend([]SendWR{{WRID: uint64(i), Opcode: WRSend, Flags: SendSignaled}}))
		}
		pollN(t, a.scq, msgs, wcTimeout)
		pollN(t, rcq, msgs, wcTimeout)
		if got := countEvents(db, EventSRQLimitReached, 50*time.Millisecond); got != 1 {
			t.Fatalf("round %d: %d SRQ_LIMIT_REACHED events, want 1", round, got)
		}
		if a := must[SRQAttr](t)(s.Query()); a.Limit != 0 {
			t.Fatalf("round %d: limit %d after the event, want 0 (disarmed until armed again)", round, a.Limit)
		}
		if got := db.Stats().SRQLimitEvents; got != uint64(round+1) {
			t.Fatalf("round %d: SRQLimitEvents %d, want %d", round, got, round+1)
		}
		noErr(t, b.qp.Close())
		noErr(t, b.scq.Close())
	}
}

func drainEvents(d *Device) {
	for {
		select {
		case <-d.Events():
		default:
			return
		}
	}
}

// countEvents counts the events of type typ that arrive within d.
func countEvents(dev *Device, typ EventType, d time.Duration) int {
	n := 0
	deadline := time.After(d)
	for {
		select {
		case ev := <-dev.Events():
			if ev.Type == typ {
				n++
			}
		case <-deadline:
			return n
		}
	}
}

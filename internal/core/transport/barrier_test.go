package transport

import (
	"testing"
	"testing/synctest"
	"time"

	"github.com/goroce/goroce/internal/core/verbs"
	"github.com/goroce/goroce/link"
)

// TestBarrierWaitsForStep blocks b's shard inside a step (its OnEvent
// callback for COMM_EST, raised while a packet is processed) and checks
// that Barrier returns only after that step finished, and at once after
// Close.
func TestBarrierWaitsForStep(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		la, lb := link.Pipe(addrA, addrB)
		a := newNode(t, la, 2)
		release, entered := make(chan struct{}), make(chan struct{})
		b := newNode(t, lb, 2, func(c *Config) {
			c.OnEvent = func(ev Event) {
				if ev.Type == verbs.EventCommEst {
					close(entered)
					<-release
				}
			}
		})
		defer a.close(t)
		qa := a.createQP(t, verbs.QPTypeRC, rcOpts{})
		qb := b.createQP(t, verbs.QPTypeRC, rcOpts{})
		connect(t, qa, b.addr, qb.QPN(), rcOpts{})
		connect(t, qb, a.addr, qa.QPN(), rcOpts{skipRTS: true})
		buf := a.mem.reg(1, make([]byte, 8), verbs.AccessLocalWrite)
		if _, err := qa.PostSend([]verbs.SendWR{{WRID: 1, Opcode: verbs.WRSend, SGL: []verbs.SGE{buf.sge(0, 8)}}}); err != nil {
			t.Fatal(err)
		}
		<-entered
		done := make(chan struct{})
		go func() { b.e.Barrier(); close(done) }()
		time.Sleep(10 * time.Millisecond)
		synctest.Wait()
		select {
		case <-done:
			t.Fatal("Barrier returned while a shard was inside a step")
		default:
		}
		close(release)
		<-done
		b.e.Barrier() // idle engine: returns
		b.close(t)
		b.e.Barrier() // closed engine: returns
	})
}

package interop

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/goroce/goroce/interop/labtest"
)

// A known fault of rxe on kernel 6.1 under TCG: a stock latency tool run with -e
// (sleeping on completion events) stops for good after rxe's own retransmission
// timer fired spuriously (completer_retry_err). Seen in ib_send_lat in both
// directions (once in about 370 looped runs here, and in one of four full CI
// runs): rxe's responder has taken goroce's last message (rdma_recvs is one ahead
// of rdma_sends, and rxe's ACK for it is on the wire) and goroce has nothing
// unacknowledged, but the tool stays asleep in ib_uverbs_event_read and never
// posts its answer, so neither side sends again.
//
// watchStall tells that fault apart from a stall of goroce's: it ends the run
// (errRxeStall) only when the guest's RoCE counters have not moved for
// stallQuiet after traffic began, rxe counted a retransmission timeout in this
// run, and the tool is asleep in ib_uverbs_event_read. runPerftest then runs the
// case once more and says so in the results table; a second stall fails the test,
// and any other stall runs into the usual deadline and fails it.
var errRxeStall = errors.New("rxe's tool stalled in ib_uverbs_event_read after a spurious retransmission")

const (
	stallPoll  = 2 * time.Second
	stallQuiet = 10 * time.Second
)

// stalled reports whether ctx was ended by watchStall.
func stalled(ctx context.Context) bool { return errors.Is(context.Cause(ctx), errRxeStall) }

// watchStall watches guest g while the tool named tool runs there, from the
// counters before; on the fault it writes what it saw to *why and cancels the
// run. The returned function stops the watch and waits for it.
func watchStall(ctx context.Context, g *labtest.Guest, tool string, before labtest.Counters, cancel context.CancelCauseFunc, why *string) func() {
	done := make(chan struct{})
	stop := make(chan struct{})
	go func() {
		defer close(done)
		var last labtest.Counters
		var quietSince time.Time
		tick := time.NewTicker(stallPoll)
		defer tick.Stop()
		for {
			select {
			case <-stop:
				return
			case <-ctx.Done():
				return
			case <-tick.C:
			}
			now, err := g.Counters(ctx)
			if err != nil {
				continue
			}
			moved := last == nil || now["rcvd_pkts"] != last["rcvd_pkts"] || now["sent_pkts"] != last["sent_pkts"]
			last = now
			d := now.Sub(before)
			if moved || d["rcvd_pkts"] == 0 {
				quietSince = time.Now()
				continue
			}
			if time.Since(quietSince) < stallQuiet || d["completer_retry_err"] == 0 {
				continue
			}
			r, err := g.Run(ctx, fmt.Sprintf("p=$(pidof %s) && cat /proc/$p/stack", tool))
			if err != nil || !strings.Contains(r.Out, "ib_uverbs_event_read") {
				continue
			}
			*why = fmt.Sprintf("no RoCE packet for %v, rxe counters %v, %s asleep in ib_uverbs_event_read", stallQuiet, d, tool)
			cancel(errRxeStall)
			return
		}
	}()
	return func() {
		close(stop)
		<-done
	}
}

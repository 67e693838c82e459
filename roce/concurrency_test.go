package roce

import (
	"errors"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"
)

// TestConcurrentVerbsWhileTrafficFlows posts, polls, modifies, resizes and arms from
// several goroutines at once while SENDs and WRITEs flow between two devices; every
// signaled WR completes exactly once and every receive completes exactly once.
func TestConcurrentVerbsWhileTrafficFlows(t *testing.T) {
	da, db := pipePair(t)
	a := newSide(t, da, QPTypeRC, 1<<16, nil, nil)
	pdb := must[*PD](t)(db.AllocPD())
	s := must[*SRQ](t)(pdb.CreateSRQ(SRQInitAttr{Attr: SRQAttr{MaxWR: 128, MaxSGE: 1}}))
	b := newSide(t, db, QPTypeRC, 1<<16, s, pdb)
	connectRC(t, a, b, MTU1024)

	const total = 2000
	var (
		sendDone, recvDone atomic.Int64
		posted             atomic.Int64
		stop               = make(chan struct{})
		wg                 sync.WaitGroup
		errc               = make(chan error, 16)
	)
	fail := func(err error) {
		select {
		case errc <- err:
		default:
		}
	}
	seenSend := make([]atomic.Int32, total)
	seenRecv := make([]atomic.Int32, total)
	sends := int64(total)
	recvs := int64(0) // every SEND consumes a receive WR; WRITEs do not
	for i := 0; i < total; i++ {
		if i%3 != 1 {
			recvs++
		}
	}

	// Receiver: keeps the SRQ stocked.
	wg.Add(1)
	go func() {
		defer wg.Done()
		next := 0
		for int64(next) < recvs {
			select {
			case <-stop:
				return
			default:
			}
			if int64(next)-recvDone.Load() >= 100 {
				time.Sleep(50 * time.Microsecond)
				continue
			}
			_, err := s.PostRecv([]RecvWR{{WRID: uint64(next), SGL: []SGE{{Addr: b.mr.Addr() + uint64(next%16)*1024, Length: 1024, LKey: b.mr.LKey()}}}})
			if errors.Is(err, syscall.ENOMEM) {
				time.Sleep(50 * time.Microsecond)
				continue
			}
			if err != nil {
				fail(err)
				return
			}
			next++
		}
	}()
	// Sender: alternates SEND and WRITE, every WR signaled.
	wg.Add(1)
	go func() {
		defer wg.Done()
		for i := 0; i < total; {
			select {
			case <-stop:
				return
			default:
			}
			if posted.Load()-sendDone.Load() >= 200 {
				// A send WR's slot frees when it completes, not when its
				// completion is polled: without this bound a poller that
				// lags on a loaded host lets the send CQ (256 entries at
				// its smallest) overrun, as the verbs allow.
				time.Sleep(50 * time.Microsecond)
				continue
			}
			wr := SendWR{WRID: uint64(i), Opcode: WRSend, Flags: SendSignaled,
				SGL: []SGE{{Addr: a.mr.Addr(), Length: 512, LKey: a.mr.LKey()}}}
			if i%3 == 1 {
				wr.Opcode, wr.RemoteAddr, wr.RKey = WRRDMAWrite, b.mr.Addr()+32768, b.mr.RKey()
			}
			_, err := a.qp.PostSend([]SendWR{wr})
			if errors.Is(err, syscall.ENOMEM) {
				time.Sleep(50 * time.Microsecond)
				continue
			}
			if err != nil {
				fail(err)
				return
			}
			posted.Add(1)
			i++
		}
	}()
	// Pollers, one per CQ.
	poll := func(c *CQ, seen []atomic.Int32, done *atomic.Int64, want func() int64) {
		defer wg.Done()
		buf := make([]WC, 16)
		for {
			n, err := c.Poll(buf)
			if err != nil {
				fail(err)
				return
			}
			for _, wc := range buf[:n] {
				if wc.Status != WCSuccess {
					fail(errors.New("completion " + wc.Status.String()))
					return
				}
				if seen[wc.WRID].Add(1) != 1 {
					fail(errors.New("duplicate completion"))
					return
				}
				done.Add(1)
			}
			if done.Load() >= want() {
				return
			}
			select {
			case <-stop:
				return
			default:
			}
			if n == 0 {
				time.Sleep(20 * time.Microsecond)
			}
		}
	}
	wg.Add(2)
	go poll(a.scq, seenSend, &sendDone, func() int64 { return sends })
	go poll(b.rcq, seenRecv, &recvDone, func() int64 { return recvs })
	// Disturbers: resize, arm, modify RTS->RTS, query, arm the SRQ limit.
	var dwg sync.WaitGroup
	dstop := make(chan struct{})
	disturb := func(f func(i int) error) {
		dwg.Add(1)
		go func() {
			defer dwg.Done()
			for i := 0; ; i++ {
				select {
				case <-dstop:
					return
				default:
				}
				if err := f(i); err != nil {
					fail(err)
					return
				}
				time.Sleep(100 * time.Microsecond)
			}
		}()
	}
	disturb(func(i int) error {
		_, err := a.scq.Resize(256 + (i%2)*256)
		if errors.Is(err, syscall.EINVAL) {
			return nil // below the completions held: allowed to fail, changes nothing
		}
		return err
	})
	disturb(func(i int) error { return b.rcq.ReqNotify(i%2 == 0) })
	disturb(func(i int) error {
		return a.qp.Modify(&QPAttr{State: QPSRTS, MinRNRTimer: uint8(i % 32)}, QPAttrState|QPAttrMinRNRTimer)
	})
	disturb(func(i int) error {
		if st, err := b.qp.State(); err != nil || st != QPSRTS {
			return errors.New("receiver QP left RTS")
		}
		return nil
	})
	disturb(func(i int) error { return s.Modify(&SRQAttr{Limit: uint32(1 + i%8)}, SRQLimit) })
	// Drain events so the buffer never matters.
	dwg.Add(1)
	go func() {
		defer dwg.Done()
		for {
			select {
			case <-dstop:
				return
			case <-da.Events():
			case <-db.Events():
			}
		}
	}()

	waitDone := make(chan struct{})
	go func() { wg.Wait(); close(waitDone) }()
	select {
	case <-waitDone:
	case err := <-errc:
		close(stop)
		close(dstop)
		<-waitDone
		dwg.Wait()
		t.Fatal(err)
	case <-time.After(60 * time.Second):
		close(stop)
		close(dstop)
		<-waitDone
		dwg.Wait()
		t.Fatalf("timeout: posted %d, send completions %d/%d, receive completions %d/%d",
			posted.Load(), sendDone.Load(), sends, recvDone.Load(), recvs)
	}
	close(dstop)
	dwg.Wait()
	select {
	case err := <-errc:
		t.Fatal(err)
	default:
	}
	if sendDone.Load() != sends || recvDone.Load() != recvs {
		t.Fatalf("send completions %d/%d, receive completions %d/%d", sendDone.Load(), sends, recvDone.Load(), recvs)
	}
	noMoreWC(t, a.scq, 10*time.Millisecond)
	noMoreWC(t, b.rcq, 0)
}

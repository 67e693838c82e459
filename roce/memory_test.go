package roce

import (
	"sync"
	"testing"
)

// TestLocalRegionAfterDereg: an lkey resolves to its MR's region, found last
// or not; its other key byte, or the MR's rkey, never does; once the MR is
// deregistered its lkey resolves to nothing, though it was the last found.
func TestLocalRegionAfterDereg(t *testing.T) {
	d := pipeDevice(t)
	pd := must[*PD](t)(d.AllocPD())
	mr1 := must[*MR](t)(pd.RegMR(make([]byte, 64), AccessLocalWrite))
	mr2 := must[*MR](t)(pd.RegMR(make([]byte, 64), AccessLocalWrite))
	for range 2 { // the first lookup fills the shard's last-found entry
		if d.mem.LocalRegion(mr1.LKey()) != mr1.reg || d.mem.LocalRegion(mr2.LKey()) != mr2.reg {
			t.Fatal("a live lkey does not resolve to its region")
		}
		if d.mem.LocalRegion(mr1.LKey()^1) != nil || d.mem.LocalRegion(mr1.RKey()) != nil {
			t.Fatal("a wrong key byte or an rkey resolves as an lkey")
		}
	}
	noErr(t, mr1.Close())
	if d.mem.LocalRegion(mr1.LKey()) != nil {
		t.Fatal("a deregistered lkey still resolves")
	}
	if d.mem.LocalRegion(mr2.LKey()) != mr2.reg {
		t.Fatal("another MR's lkey stopped resolving")
	}
}

// TestLocalRegionRacesDereg: lookups running while MRs come and go see a
// region only while its MR is registered (under -race, also no data race).
func TestLocalRegionRacesDereg(t *testing.T) {
	d := pipeDevice(t)
	pd := must[*PD](t)(d.AllocPD())
	for range 50 {
		mr := must[*MR](t)(pd.RegMR(make([]byte, 64), AccessLocalWrite))
		lkey := mr.LKey()
		var wg sync.WaitGroup
		stop := make(chan struct{})
		wg.Add(2)
		for range 2 {
			go func() {
				defer wg.Done()
				for {
					select {
					case <-stop:
						return
					default:
						if r := d.mem.LocalRegion(lkey); r != nil && r != mr.reg {
							t.Error("an lkey resolved to another region")
							return
						}
					}
				}
			}()
		}
		noErr(t, mr.Close())
		close(stop)
		wg.Wait()
		if d.mem.LocalRegion(lkey) != nil {
			t.Fatal("a deregistered lkey still resolves after the lookups stopped")
		}
	}
}

package roce

import (
	"sync"
	"testing"

	"github.com/goroce/goroce/internal/core/transport"
)

// keyLookups are the two lookups that keep the entry they found last: each
// resolves its own key of an MR, never the other.
var keyLookups = []struct {
	name       string
	find       func(m *memory, key uint32) *transport.Region
	own, other func(mr *MR) uint32
}{
	{"lkey", (*memory).LocalRegion, (*MR).LKey, (*MR).RKey},
	{"rkey", (*memory).RemoteRegion, (*MR).RKey, (*MR).LKey},
}

// TestRegionAfterDereg: a key resolves to its MR's region, found last or not;
// its other key byte, or the MR's other key, never does; once the MR is
// deregistered its key resolves to nothing, though it was the last found.
func TestRegionAfterDereg(t *testing.T) {
	for _, k := range keyLookups {
		t.Run(k.name, func(t *testing.T) {
			d := pipeDevice(t)
			pd := must[*PD](t)(d.AllocPD())
			mr1 := must[*MR](t)(pd.RegMR(make([]byte, 64), AccessLocalWrite|AccessRemoteWrite))
			mr2 := must[*MR](t)(pd.RegMR(make([]byte, 64), AccessLocalWrite|AccessRemoteWrite))
			for range 2 { // the first lookup fills the shard's last-found entry
				if k.find(d.mem, k.own(mr1)) != mr1.reg || k.find(d.mem, k.own(mr2)) != mr2.reg {
					t.Fatal("a live key does not resolve to its region")
				}
				if k.find(d.mem, k.own(mr1)^1) != nil || k.find(d.mem, k.other(mr1)) != nil {
					t.Fatal("a wrong key byte or the MR's other key resolves")
				}
			}
			noErr(t, mr1.Close())
			if k.find(d.mem, k.own(mr1)) != nil {
				t.Fatal("a deregistered key still resolves")
			}
			if k.find(d.mem, k.own(mr2)) != mr2.reg {
				t.Fatal("another MR's key stopped resolving")
			}
		})
	}
}

// TestRegionRacesDereg: lookups running while MRs come and go see a region
// only while its MR is registered (under -race, also no data race).
func TestRegionRacesDereg(t *testing.T) {
	for _, k := range keyLookups {
		t.Run(k.name, func(t *testing.T) {
			d := pipeDevice(t)
			pd := must[*PD](t)(d.AllocPD())
			for range 50 {
				mr := must[*MR](t)(pd.RegMR(make([]byte, 64), AccessLocalWrite|AccessRemoteWrite))
				key := k.own(mr)
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
								if r := k.find(d.mem, key); r != nil && r != mr.reg {
									t.Error("a key resolved to another region")
									return
								}
							}
						}
					}()
				}
				noErr(t, mr.Close())
				close(stop)
				wg.Wait()
				if k.find(d.mem, key) != nil {
					t.Fatal("a deregistered key still resolves after the lookups stopped")
				}
			}
		})
	}
}

package roce

import (
	"crypto/rand"
	"encoding/binary"
	"sync"
	"sync/atomic"

	"github.com/goroce/goroce/internal/core/transport"
)

// memShards spreads the key tables over locks, so shards resolving keys in parallel do
// not contend; key indexes are random, so their low bits spread evenly.
const memShards = 16

// A key is index<<8 | key byte, as on rxe: the 24-bit index names a live object (one
// lookup finds it, then the whole key is compared), the key byte is what a memory
// window bind changes (ibv_inc_rkey).
const keyByteMask = 0xff

// keyKind says what a key index belongs to.
type keyKind uint8

const (
	kindLKey   keyKind = iota + 1 // an MR's lkey
	kindRKey                      // an MR's rkey
	kindWindow                    // a memory window's rkey
)

// keyEntry is a live index: region for an MR's keys, w for a window.
type keyEntry struct {
	kind   keyKind
	key    uint32
	region *transport.Region
	w      *window
}

// memory is the device's key registry (transport.Memory): MR lkeys and rkeys, window
// rkeys. Lookups, on the engine's hot path, are an RLock and a map read (an lkey or
// MR rkey found last in its shard, one atomic load).
type memory struct {
	shards [memShards]memShard

	// keyMu guards lastKey and serialises index allocation (check, then insert).
	keyMu   sync.Mutex
	lastKey uint32

	// mwMu serialises binds, invalidations, window deallocation and MR deregistration,
	// so an MR being deregistered cannot gain a window. Taken before a shard lock.
	mwMu sync.Mutex
	// mwMu guards: boundMWs.
	boundMWs map[*transport.Region]int // MR → windows bound to it (rxe num_mw)
}

type memShard struct {
	mu sync.RWMutex
	// mu guards: keys, and the bind state of every window whose index is here.
	keys map[uint32]*keyEntry // key index → entry
	// lastLKey is the lkey entry LocalRegion found last, read without mu: a
	// stream resolves the same lkey for every packet, and the read lock and
	// map lookup were 1.3 % of a 4 KiB stream's CPU. It is set under the read
	// lock and cleared under the write lock when its key is removed, so once
	// remove returns no lookup finds the entry.
	lastLKey atomic.Pointer[keyEntry]
	// lastRKey is the same for RemoteRegion and MR rkeys (a responder resolves
	// the rkey of every WRITE packet); a window's entry is never kept here, as
	// binds and invalidations change it in place.
	lastRKey atomic.Pointer[keyEntry]
	_        [64]byte // keep shards on separate cache lines
}

var _ transport.Memory = (*memory)(nil)

func newMemory() *memory {
	m := &memory{boundMWs: make(map[*transport.Region]int)}
	for i := range m.shards {
		m.shards[i].keys = make(map[uint32]*keyEntry)
	}
	return m
}

func (m *memory) shard(key uint32) *memShard { return &m.shards[(key>>8)%memShards] }

// LocalRegion resolves an lkey; nil when no live MR has it.
func (m *memory) LocalRegion(lkey uint32) *transport.Region {
	s := m.shard(lkey)
	if e := s.lastLKey.Load(); e != nil && e.key == lkey {
		return e.region
	}
	s.mu.RLock()
	var r *transport.Region
	if e := s.keys[lkey>>8]; e != nil && e.kind == kindLKey && e.key == lkey {
		r = e.region
		s.lastLKey.Store(e)
	}
	s.mu.RUnlock()
	return r
}

// RemoteRegion resolves an rkey: an MR's, or that of a bound memory window with exactly
// this key byte, whose region is the window itself (bounds, access, PD); else nil.
func (m *memory) RemoteRegion(rkey uint32) *transport.Region {
	s := m.shard(rkey)
	if e := s.lastRKey.Load(); e != nil && e.key == rkey {
		return e.region
	}
	s.mu.RLock()
	var r *transport.Region
	if e := s.keys[rkey>>8]; e != nil {
		switch e.kind {
		case kindRKey:
			if e.key == rkey {
				r = e.region
				s.lastRKey.Store(e)
			}
		case kindWindow:
			if w := e.w; w.rkey == rkey && w.state == mwValid {
				r = w.region
			}
		}
	}
	s.mu.RUnlock()
	return r
}

// register gives r fresh keys and publishes it. Keys come from crypto/rand, so one rkey
// tells a peer nothing of the others; an index is reused only once free, 0 is never a
// key, and a key is never adjacent to the one issued before it.
func (m *memory) register(r *transport.Region) error {
	m.keyMu.Lock()
	defer m.keyMu.Unlock()
	lkey, err := m.newKeyLocked(0)
	if err != nil {
		return err
	}
	rkey, err := m.newKeyLocked(lkey)
	if err != nil {
		return err
	}
	r.LKey, r.RKey = lkey, rkey
	m.insert(&keyEntry{kind: kindLKey, key: lkey, region: r})
	m.insert(&keyEntry{kind: kindRKey, key: rkey, region: r})
	return nil
}

func (m *memory) insert(e *keyEntry) {
	s := m.shard(e.key)
	s.mu.Lock()
	s.keys[e.key>>8] = e
	s.mu.Unlock()
}

func (m *memory) remove(key uint32) {
	s := m.shard(key)
	s.mu.Lock()
	for _, last := range [...]*atomic.Pointer[keyEntry]{&s.lastLKey, &s.lastRKey} {
		if e := last.Load(); e != nil && e.key == key {
			last.Store(nil)
		}
	}
	delete(s.keys, key>>8)
	s.mu.Unlock()
}

// indexInUse reports whether a live key has the index of key.
func (m *memory) indexInUse(key uint32) bool {
	s := m.shard(key)
	s.mu.RLock()
	_, ok := s.keys[key>>8]
	s.mu.RUnlock()
	return ok
}

// newKeyLocked draws a random key with an unused nonzero index other than other's, not
// within 1 of the previous key. keyMu is held, so the index stays free until inserted.
func (m *memory) newKeyLocked(other uint32) (uint32, error) {
	var b [4]byte
	for {
		if _, err := rand.Read(b[:]); err != nil {
			return 0, err
		}
		k := binary.LittleEndian.Uint32(b[:])
		if k>>8 == 0 || k>>8 == other>>8 || k-m.lastKey <= 1 || m.lastKey-k <= 1 || m.indexInUse(k) {
			continue
		}
		m.lastKey = k
		return k, nil
	}
}

// unregister removes r's keys, or returns false, changing nothing, while windows are
// bound to r (ibv_dereg_mr). Lookups already under way may still hold r (MR.Close).
func (m *memory) unregister(r *transport.Region) bool {
	m.mwMu.Lock()
	defer m.mwMu.Unlock()
	if m.boundMWs[r] > 0 {
		return false
	}
	m.remove(r.LKey)
	m.remove(r.RKey)
	return true
}

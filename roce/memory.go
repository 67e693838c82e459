package roce

import (
	"crypto/rand"
	"encoding/binary"
	"sync"

	"github.com/goroce/goroce/transport"
)

// memShards spreads the key tables over several locks so shards resolving keys in
// parallel do not contend on one cache line. Keys are random, so their low bits
// spread evenly.
const memShards = 16

// memory is the device's MR registry: lkey and rkey → region. It implements
// transport.Memory. Lookups are on the engine's hot path: an RLock and a map read,
// no allocation.
type memory struct {
	shards [memShards]memShard

	// keyMu guards: lastKey (so consecutive keys are never adjacent).
	keyMu   sync.Mutex
	lastKey uint32
}

type memShard struct {
	mu sync.RWMutex
	// mu guards: local, remote.
	local  map[uint32]*transport.Region
	remote map[uint32]*transport.Region
	_      [64]byte // keep shards on separate cache lines
}

var _ transport.Memory = (*memory)(nil)

func newMemory() *memory {
	m := &memory{}
	for i := range m.shards {
		m.shards[i].local = make(map[uint32]*transport.Region)
		m.shards[i].remote = make(map[uint32]*transport.Region)
	}
	return m
}

func (m *memory) shard(key uint32) *memShard { return &m.shards[key%memShards] }

// LocalRegion resolves an lkey; nil when no live MR has it.
func (m *memory) LocalRegion(lkey uint32) *transport.Region {
	s := m.shard(lkey)
	s.mu.RLock()
	r := s.local[lkey]
	s.mu.RUnlock()
	return r
}

// RemoteRegion resolves an rkey; nil when no live MR has it.
func (m *memory) RemoteRegion(rkey uint32) *transport.Region {
	s := m.shard(rkey)
	s.mu.RLock()
	r := s.remote[rkey]
	s.mu.RUnlock()
	return r
}

// inUse reports whether key is an lkey or rkey of a live MR.
func (m *memory) inUse(key uint32) bool {
	s := m.shard(key)
	s.mu.RLock()
	_, l := s.local[key]
	_, r := s.remote[key]
	s.mu.RUnlock()
	return l || r
}

// register assigns r fresh keys and publishes it. Keys come from crypto/rand: a
// remote peer that learns one rkey can infer nothing about the others, and keys of a
// closed MR are not handed out again while that key is still live anywhere. 0 is
// never a key, and a key is never adjacent to the one issued just before it.
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
	ls, rs := m.shard(lkey), m.shard(rkey)
	ls.mu.Lock()
	ls.local[lkey] = r
	ls.mu.Unlock()
	rs.mu.Lock()
	rs.remote[rkey] = r
	rs.mu.Unlock()
	return nil
}

// newKeyLocked draws a random key that is unused, nonzero, different from other and
// not within 1 of the previous key. keyMu is held, so no concurrent register can take
// the same key between the check and the insert.
func (m *memory) newKeyLocked(other uint32) (uint32, error) {
	var b [4]byte
	for {
		if _, err := rand.Read(b[:]); err != nil {
			return 0, err
		}
		k := binary.LittleEndian.Uint32(b[:])
		if k == 0 || k == other || k-m.lastKey <= 1 || m.lastKey-k <= 1 || m.inUse(k) {
			continue
		}
		m.lastKey = k
		return k, nil
	}
}

// unregister removes r's keys. New lookups fail once it returns; lookups already in
// progress may still hold r (see MR.Close for the barrier).
func (m *memory) unregister(r *transport.Region) {
	ls, rs := m.shard(r.LKey), m.shard(r.RKey)
	ls.mu.Lock()
	delete(ls.local, r.LKey)
	ls.mu.Unlock()
	rs.mu.Lock()
	delete(rs.remote, r.RKey)
	rs.mu.Unlock()
}

package cm

// replied lists the passive connections in StateREPSent, oldest REP first:
// the ones a full table evicts (Config.MaxPending), in O(1).
type replied struct{ oldest, newest *entry }

func (l *replied) push(e *entry) {
	e.older, e.newer, e.listed = l.newest, nil, true
	if l.newest != nil {
		l.newest.newer = e
	} else {
		l.oldest = e
	}
	l.newest = e
}

func (l *replied) unlink(e *entry) {
	if !e.listed {
		return
	}
	if e.older != nil {
		e.older.newer = e.newer
	} else {
		l.oldest = e.newer
	}
	if e.newer != nil {
		e.newer.older = e.older
	} else {
		l.newest = e.older
	}
	e.older, e.newer, e.listed = nil, nil, false
}

// track keeps e on the replied list exactly while it is a passive
// connection in StateREPSent.
func (m *Machine) track(e *entry) {
	switch want := !e.active && e.state == StateREPSent; {
	case want && !e.listed:
		m.replied.push(e)
	case !want:
		m.replied.unlink(e)
	}
}

// makeRoom evicts the connection whose REP went out longest ago, as a SYN
// cache drops its oldest entry: under a flood of rate F a REP lives about
// MaxPending/F, time enough for a real peer's RTU. A request the owner holds
// is not evicted (rdma_accept must work on a CONNECT_REQUEST delivered; the
// backlog bounds those), nor a REP the peer MRA'd (it knew our random ID).
// REJ and EventUnreachable as on expiry, but no timewait: one per REQ.
func (m *Machine) makeRoom() bool {
	e := m.replied.oldest
	if e == nil {
		return false
	}
	m.stats.Evicted++
	m.withdraw(e)
	m.remove(e)
	return true
}

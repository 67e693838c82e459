package cm

// replied lists passive connections in StateREPSent, oldest REP first.
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

// track keeps e on m.replied exactly while it is passive in StateREPSent.
func (m *Machine) track(e *entry) {
	switch want := !e.active && e.state == StateREPSent; {
	case want && !e.listed:
		m.replied.push(e)
	case !want:
		m.replied.unlink(e)
	}
}

// makeRoom evicts the oldest unanswered REP, as a SYN cache its oldest entry:
// under a flood of rate F a REP lives ≈ MaxPending/F, time for a real RTU.
// Not requests the owner holds (rdma_accept must work on a CONNECT_REQUEST
// it got; the backlog bounds them), nor a REP the peer MRA'd (it knew our
// random ID). As on expiry but without timewait, which would keep one per REQ.
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

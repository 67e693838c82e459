package metrics

import (
	"net/netip"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/goroce/goroce/cm"
	"github.com/goroce/goroce/cm/gsi"
)

// CMSource is one device's connection manager as the CM collector reads it:
// the QP1 agent that carries the MADs and the CM that runs on it.
type CMSource struct {
	Addr netip.Addr  // the device's address: the address label's value
	GSI  *gsi.Conn   // nil: no QP1 agent
	CM   *cm.Manager // nil: no CM
}

// cmReading is one scrape's counters of a CMSource, or their sum.
type cmReading struct {
	gsi     gsi.Stats
	cm      cm.Stats
	pending int
}

// CMCollector exports the QP1 (GSI) agent's and the connection manager's
// counters: MADs in and out, every MAD dropped and why, CM retransmissions,
// timeouts and rejects, and the connections waiting for their RTU.
type CMCollector struct {
	srcs []CMSource
	rows *rows[cmReading]
}

// NewCMCollector returns a CMCollector over srcs.
func NewCMCollector(opt Options, srcs ...CMSource) *CMCollector {
	c := &CMCollector{srcs: srcs, rows: newRows[cmReading](opt)}
	row := c.rows.add
	const (
		gsiMADs  = "MADs on QP1: rx delivered to the CM, tx sent."
		gsiDrops = "QP1 datagrams dropped, by reason: malformed (not a UD SEND of a 256-byte MAD with the GSI keys), bad_icrc, overflow (the CM read too slowly)."
		cmMADs   = "MADs the connection manager handled: rx received, tx sent (retransmissions included)."
		cmDrops  = "CM MADs dropped, by reason: malformed (did not parse), unmatched (no connection, or the wrong state), pending_limit (a REQ over the pending-connection caps with no REP to evict, answered by nothing so the peer retries), backlog (a REQ a listener's full backlog had no room for, answered by nothing so the peer retries)."
		cmRejs   = "CM REJ messages sent (tx) and received (rx)."
	)
	ctr := prometheus.CounterValue
	row("roce_gsi_mads_total", gsiMADs, ctr, "direction=rx", func(r *cmReading) uint64 { return r.gsi.RxMADs })
	row("roce_gsi_mads_total", gsiMADs, ctr, "direction=tx", func(r *cmReading) uint64 { return r.gsi.TxMADs })
	row("roce_gsi_drops_total", gsiDrops, ctr, "reason=malformed", func(r *cmReading) uint64 { return r.gsi.Malformed })
	row("roce_gsi_drops_total", gsiDrops, ctr, "reason=bad_icrc", func(r *cmReading) uint64 { return r.gsi.BadICRC })
	row("roce_gsi_drops_total", gsiDrops, ctr, "reason=overflow", func(r *cmReading) uint64 { return r.gsi.Overflow })
	row("roce_cm_mads_total", cmMADs, ctr, "direction=rx", func(r *cmReading) uint64 { return r.cm.RxMADs })
	row("roce_cm_mads_total", cmMADs, ctr, "direction=tx", func(r *cmReading) uint64 { return r.cm.TxMADs })
	row("roce_cm_drops_total", cmDrops, ctr, "reason=malformed", func(r *cmReading) uint64 { return r.cm.Malformed })
	row("roce_cm_drops_total", cmDrops, ctr, "reason=unmatched", func(r *cmReading) uint64 { return r.cm.Unmatched })
	row("roce_cm_drops_total", cmDrops, ctr, "reason=pending_limit", func(r *cmReading) uint64 { return r.cm.Refused })
	row("roce_cm_drops_total", cmDrops, ctr, "reason=backlog", func(r *cmReading) uint64 { return r.cm.Discarded })
	row("roce_cm_reps_total", "REPs sent, retransmissions included: a REQ never answered with an RTU costs one per CM timeout until the pending timeout.", ctr, "",
		func(r *cmReading) uint64 { return r.cm.REPs })
	row("roce_cm_duplicates_total", "Duplicate REQ, REP, DREQ or SIDR_REQ answered from saved state.", ctr, "",
		func(r *cmReading) uint64 { return r.cm.Duplicates })
	row("roce_cm_retransmits_total", "REQ, REP, DREQ or SIDR_REQ sent again after a CM timeout.", ctr, "",
		func(r *cmReading) uint64 { return r.cm.Retransmits })
	row("roce_cm_timeouts_total", "CM exchanges that ran out of retries.", ctr, "",
		func(r *cmReading) uint64 { return r.cm.Timeouts })
	row("roce_cm_pending_expired_total", "Passive connections withdrawn (REJ timeout) because no RTU came within the pending timeout.", ctr, "",
		func(r *cmReading) uint64 { return r.cm.Expired })
	row("roce_cm_pending_evicted_total", "Passive connections withdrawn (REJ timeout) to admit a REQ while the pending cap was reached: the oldest REP with no RTU.", ctr, "",
		func(r *cmReading) uint64 { return r.cm.Evicted })
	row("roce_cm_rejects_total", cmRejs, ctr, "direction=tx", func(r *cmReading) uint64 { return r.cm.RejSent })
	row("roce_cm_rejects_total", cmRejs, ctr, "direction=rx", func(r *cmReading) uint64 { return r.cm.RejRcvd })
	row("roce_cm_pending_connections", "Passive connections waiting for their RTU (REQ received, not yet established).",
		prometheus.GaugeValue, "", func(r *cmReading) uint64 { return uint64(r.pending) })
	return c
}

// Describe implements prometheus.Collector.
func (c *CMCollector) Describe(ch chan<- *prometheus.Desc) { c.rows.describe(ch) }

// Collect implements prometheus.Collector.
func (c *CMCollector) Collect(ch chan<- prometheus.Metric) {
	rs := make([]cmReading, len(c.srcs))
	addrs := make([]string, len(c.srcs))
	for i, s := range c.srcs {
		addrs[i] = s.Addr.String()
		if s.GSI != nil {
			rs[i].gsi = s.GSI.Stats()
		}
		if s.CM != nil {
			rs[i].cm, rs[i].pending = s.CM.Stats(), s.CM.Pending()
		}
	}
	c.rows.collect(ch, rs, addrs)
}

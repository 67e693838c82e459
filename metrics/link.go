package metrics

import (
	"net/netip"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/goroce/goroce/link"
)

// LinkSource is one device's UDP link as the link collector reads it.
type LinkSource struct {
	Addr netip.Addr // the device's address: the address label's value
	Link *link.UDP
}

// LinkCollector exports the UDP links' counters: datagrams dropped for want of
// room, and the segmentation offloads (GSO, GRO) at work.
type LinkCollector struct {
	srcs []LinkSource
	rows *rows[link.Counters]
}

// NewLinkCollector returns a LinkCollector over srcs.
func NewLinkCollector(opt Options, srcs ...LinkSource) *LinkCollector {
	c := &LinkCollector{srcs: srcs, rows: newRows[link.Counters](opt)}
	ctr := prometheus.CounterValue
	c.rows.add("roce_link_drops_total", "Datagrams the UDP link dropped, by reason: truncated (larger than the read buffer).",
		ctr, "reason=truncated", func(c *link.Counters) uint64 { return c.Truncated })
	c.rows.add("roce_link_gso_sends_total", "UDP GSO super-datagrams sent.", ctr, "", func(c *link.Counters) uint64 { return c.GSOSends })
	c.rows.add("roce_link_gso_segments_total", "Datagrams sent inside UDP GSO super-datagrams.", ctr, "",
		func(c *link.Counters) uint64 { return c.GSOSegments })
	c.rows.add("roce_link_gso_fallbacks_total", "Times the kernel refused UDP GSO (the first turns it off for the link's life).", ctr, "",
		func(c *link.Counters) uint64 { return c.GSOFallbacks })
	c.rows.add("roce_link_gso_fallback_segments_total", "Train segments sent one datagram each because GSO is off.", ctr, "",
		func(c *link.Counters) uint64 { return c.GSOFallbackSegments })
	c.rows.add("roce_link_gro_trains_total", "Coalesced datagrams received (UDP GRO).", ctr, "", func(c *link.Counters) uint64 { return c.GROTrains })
	c.rows.add("roce_link_gro_segments_total", "Datagrams received inside GRO trains.", ctr, "", func(c *link.Counters) uint64 { return c.GROSegments })
	c.rows.add("roce_link_flow_label_refused_total", "IPv6 datagrams sent without the flow label they asked for (the kernel refused the lease).",
		ctr, "", func(c *link.Counters) uint64 { return c.FlowLabelRefused })
	return c
}

// Describe implements prometheus.Collector.
func (c *LinkCollector) Describe(ch chan<- *prometheus.Desc) { c.rows.describe(ch) }

// Collect implements prometheus.Collector.
func (c *LinkCollector) Collect(ch chan<- prometheus.Metric) {
	rs := make([]link.Counters, len(c.srcs))
	addrs := make([]string, len(c.srcs))
	for i, s := range c.srcs {
		addrs[i] = s.Addr.String()
		if s.Link != nil {
			rs[i] = s.Link.Counters()
		}
	}
	c.rows.collect(ch, rs, addrs)
}

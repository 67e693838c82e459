package main

import (
	"github.com/prometheus/client_golang/prometheus"
)

// responderCollector exports the built-in responders' session counters. The
// engine's series come from package metrics.
type responderCollector struct {
	// pingpong holds the responder's session counters; nil exports none.
	pingpong *ppStats
	// rping holds the rping responder's counters; nil exports none.
	rping *rpStats

	ppActive, ppStarted, ppMessages, ppFailed, ppRefused *prometheus.Desc
	rpActive, rpEnded, rpFailed, rpPings                 *prometheus.Desc
}

func newResponderCollector(pp *ppStats, rp *rpStats) *responderCollector {
	return &responderCollector{
		pingpong: pp,
		rping:    rp,
		rpActive: prometheus.NewDesc("roce_rping_sessions",
			"rping connections being served now.", nil, nil),
		rpEnded: prometheus.NewDesc("roce_rping_sessions_total",
			"rping connections that ended with the client's disconnect.", nil, nil),
		rpFailed: prometheus.NewDesc("roce_rping_session_errors_total",
			"rping connections that failed (CM accept, or a ping's RDMA READ, WRITE or SEND).", nil, nil),
		rpPings: prometheus.NewDesc("roce_rping_pings_total",
			"Pings the rping responder answered (one RDMA READ and one RDMA WRITE each).", nil, nil),
		ppActive: prometheus.NewDesc("roce_pingpong_sessions",
			"Pingpong responder sessions serving messages now, by client tool (rc, srq, ud).", []string{"kind"}, nil),
		ppStarted: prometheus.NewDesc("roce_pingpong_sessions_total",
			"Pingpong responder sessions that completed the TCP exchange, by client tool.", []string{"kind"}, nil),
		ppMessages: prometheus.NewDesc("roce_pingpong_messages_total",
			"Messages the pingpong responder echoed, by client tool.", []string{"kind"}, nil),
		ppFailed: prometheus.NewDesc("roce_pingpong_exchange_errors_total",
			"Pingpong connections whose TCP exchange failed (malformed records, timeouts, QP setup).", nil, nil),
		ppRefused: prometheus.NewDesc("roce_pingpong_refused_total",
			"Pingpong connections refused: the session limit was reached, or the client's kind is switched off.", nil, nil),
	}
}

// Describe implements prometheus.Collector.
func (c *responderCollector) Describe(ch chan<- *prometheus.Desc) {
	if c.pingpong != nil {
		for _, d := range []*prometheus.Desc{c.ppActive, c.ppStarted, c.ppMessages, c.ppFailed, c.ppRefused} {
			ch <- d
		}
	}
	if c.rping != nil {
		for _, d := range []*prometheus.Desc{c.rpActive, c.rpEnded, c.rpFailed, c.rpPings} {
			ch <- d
		}
	}
}

// Collect implements prometheus.Collector.
func (c *responderCollector) Collect(ch chan<- prometheus.Metric) {
	if pp := c.pingpong; pp != nil {
		for k := kindRC; k <= kindUD; k++ {
			ch <- prometheus.MustNewConstMetric(c.ppActive, prometheus.GaugeValue, float64(pp.active[k].Load()), k.String())
			ch <- prometheus.MustNewConstMetric(c.ppStarted, prometheus.CounterValue, float64(pp.started[k].Load()), k.String())
			ch <- prometheus.MustNewConstMetric(c.ppMessages, prometheus.CounterValue, float64(pp.messages[k].Load()), k.String())
		}
		ch <- prometheus.MustNewConstMetric(c.ppFailed, prometheus.CounterValue, float64(pp.failed.Load()))
		ch <- prometheus.MustNewConstMetric(c.ppRefused, prometheus.CounterValue, float64(pp.refused.Load()))
	}
	if rp := c.rping; rp != nil {
		ch <- prometheus.MustNewConstMetric(c.rpActive, prometheus.GaugeValue, float64(rp.active.Load()))
		ch <- prometheus.MustNewConstMetric(c.rpEnded, prometheus.CounterValue, float64(rp.ended.Load()))
		ch <- prometheus.MustNewConstMetric(c.rpFailed, prometheus.CounterValue, float64(rp.failed.Load()))
		ch <- prometheus.MustNewConstMetric(c.rpPings, prometheus.CounterValue, float64(rp.pings.Load()))
	}
}

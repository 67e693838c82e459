package main

import (
	"sync/atomic"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/goroce/goroce/internal/tool/version"
	"github.com/goroce/goroce/roce"
)

// eventTypes are the async events a device raises: the event label values of
// roce_async_events_total, every one exported from the first scrape.
var eventTypes = []roce.EventType{roce.EventCQErr, roce.EventQPFatal, roce.EventQPReqErr, roce.EventQPAccessErr,
	roce.EventCommEst, roce.EventSQDrained, roce.EventDeviceFatal, roce.EventPortActive, roce.EventPortErr,
	roce.EventSRQErr, roce.EventSRQLimitReached, roce.EventQPLastWQEReached}

// eventCounts counts async events by type (ibv_event_type values are below 32).
type eventCounts [32]atomic.Uint64

// responderCollector exports the built-in responders' session counters, the
// devices' async events and roce_build_info. The engine's and the CM's series
// come from package metrics.
//
// Every responder counts the same way: roce_X_sessions_total counts sessions
// that started (pingpong: the TCP exchange completed; rping: the connection is
// established), roce_X_active_sessions those running now, and
// roce_X_session_ends_total{reason} those that ended, so started = active +
// ended. Connections that never became sessions are counted apart: refused, or
// failed before starting (exchange or accept errors).
type responderCollector struct {
	// pingpong holds the responder's session counters; nil exports none.
	pingpong *ppStats
	// rping holds the rping responder's counters; nil exports none.
	rping *rpStats
	// events counts every device's async events.
	events *eventCounts
	evDesc *prometheus.Desc

	build                                                     prometheus.Metric
	ppActive, ppStarted, ppEnds, ppMessages, ppFailed, ppRefs *prometheus.Desc
	rpActive, rpStarted, rpEnds, rpPings, rpFailed, rpRefs    *prometheus.Desc
}

func newResponderCollector(pp *ppStats, rp *rpStats, ev *eventCounts) *responderCollector {
	v := version.Get()
	endsHelp := " sessions that ended, by reason: disconnect (the client's), idle (quiet for the idle limit), error, shutdown."
	return &responderCollector{
		pingpong: pp,
		rping:    rp,
		events:   ev,
		evDesc: prometheus.NewDesc("roce_async_events_total",
			"Asynchronous events the devices raised (ibv_event_type without IBV_EVENT_), e.g. CQ_ERR for a CQ overrun, QP_FATAL, DEVICE_FATAL.",
			[]string{"event"}, nil),
		build: prometheus.MustNewConstMetric(prometheus.NewDesc("roce_build_info",
			"Always 1: the goroce build roced runs, as its -version prints it.",
			[]string{"version", "revision", "goversion"}, nil), prometheus.GaugeValue, 1, v.Short(), v.Revision, v.GoVersion),

		ppActive: prometheus.NewDesc("roce_pingpong_active_sessions",
			"Pingpong sessions serving messages now, by client tool (rc, srq, ud).", []string{"kind"}, nil),
		ppStarted: prometheus.NewDesc("roce_pingpong_sessions_total",
			"Pingpong sessions started (TCP exchange completed), by client tool.", []string{"kind"}, nil),
		ppEnds: prometheus.NewDesc("roce_pingpong_session_ends_total",
			"Pingpong"+endsHelp, []string{"kind", "reason"}, nil),
		ppMessages: prometheus.NewDesc("roce_pingpong_messages_total",
			"Messages the pingpong responder echoed, by client tool.", []string{"kind"}, nil),
		ppFailed: prometheus.NewDesc("roce_pingpong_exchange_errors_total",
			"Pingpong connections whose TCP exchange failed (malformed records, timeouts, QP setup).", nil, nil),
		ppRefs: prometheus.NewDesc("roce_pingpong_refused_total",
			"Pingpong connections refused, by reason: sessions (every session slot taken), exchanges (too many connections mid-exchange), kind (switched off).",
			[]string{"reason"}, nil),

		rpActive: prometheus.NewDesc("roce_rping_active_sessions",
			"rping connections established and served now.", nil, nil),
		rpStarted: prometheus.NewDesc("roce_rping_sessions_total",
			"rping sessions started (connection established: RTU received).", nil, nil),
		rpEnds: prometheus.NewDesc("roce_rping_session_ends_total",
			"rping"+endsHelp, []string{"reason"}, nil),
		rpPings: prometheus.NewDesc("roce_rping_pings_total",
			"Pings the rping responder answered (one RDMA READ and one RDMA WRITE each).", nil, nil),
		rpFailed: prometheus.NewDesc("roce_rping_accept_errors_total",
			"rping connection requests that never got established (setup failed, or no RTU in time).", nil, nil),
		rpRefs: prometheus.NewDesc("roce_rping_refused_total",
			"rping connection requests rejected (REJ consumer defined) at the session limit.", nil, nil),
	}
}

// Describe implements prometheus.Collector.
func (c *responderCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- c.build.Desc()
	ch <- c.evDesc
	if c.pingpong != nil {
		for _, d := range []*prometheus.Desc{c.ppActive, c.ppStarted, c.ppEnds, c.ppMessages, c.ppFailed, c.ppRefs} {
			ch <- d
		}
	}
	if c.rping != nil {
		for _, d := range []*prometheus.Desc{c.rpActive, c.rpStarted, c.rpEnds, c.rpPings, c.rpFailed, c.rpRefs} {
			ch <- d
		}
	}
}

// Collect implements prometheus.Collector.
func (c *responderCollector) Collect(ch chan<- prometheus.Metric) {
	ch <- c.build
	counter := func(d *prometheus.Desc, v uint64, labels ...string) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.CounterValue, float64(v), labels...)
	}
	for _, t := range eventTypes {
		counter(c.evDesc, c.events[t].Load(), roce.AsyncEvent{Type: t}.String())
	}
	if pp := c.pingpong; pp != nil {
		for k := kindRC; k <= kindUD; k++ {
			ch <- prometheus.MustNewConstMetric(c.ppActive, prometheus.GaugeValue, float64(pp.active[k].Load()), k.String())
			counter(c.ppStarted, pp.started[k].Load(), k.String())
			counter(c.ppMessages, pp.messages[k].Load(), k.String())
			for e := range numEnds {
				if e != endDisconnect { // the stock clients just stop sending
					counter(c.ppEnds, pp.ends[k][e].Load(), k.String(), e.String())
				}
			}
		}
		counter(c.ppFailed, pp.failed.Load())
		for why := range numRefusals {
			counter(c.ppRefs, pp.refused[why].Load(), why.String())
		}
	}
	if rp := c.rping; rp != nil {
		ch <- prometheus.MustNewConstMetric(c.rpActive, prometheus.GaugeValue, float64(rp.active.Load()))
		counter(c.rpStarted, rp.started.Load())
		for e := range numEnds {
			counter(c.rpEnds, rp.ends[e].Load(), e.String())
		}
		counter(c.rpPings, rp.pings.Load())
		counter(c.rpFailed, rp.acceptFS.Load())
		counter(c.rpRefs, rp.refused.Load())
	}
}

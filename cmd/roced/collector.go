package main

import (
	"github.com/prometheus/client_golang/prometheus"

	"github.com/goroce/goroce/roce"
	"github.com/goroce/goroce/transport"
)

// qpStateNames are the label values of roce_qps{state}, in verbs order. Every state is
// exported, zero or not, so a PromQL query for one state never sees a gap.
var qpStateNames = []string{"reset", "init", "rtr", "rts", "sqd", "sqe", "err"}

// source is what the collector reads at scrape time. Both functions must be safe to
// call from the HTTP goroutine while the engine runs.
type source struct {
	// stats returns the engine counters, summed over every device roced serves.
	stats func() transport.StatsSnapshot
	// qpStates returns how many QPs are in each state, keyed by a qpStateNames value.
	qpStates func() map[string]int
	// queues returns how full the CQs and SRQs are, summed over every device; nil
	// exports none.
	queues func() roce.QueueOccupancy
	// pingpong holds the responder's session counters; nil exports none.
	pingpong *ppStats
	// rping holds the rping responder's counters; nil exports none.
	rping *rpStats
}

// collector is a prometheus.Collector over the engine's transport.Stats. It builds
// const metrics from one snapshot per scrape, so the data path never calls into
// Prometheus.
type collector struct {
	src source

	packets, bytes        *prometheus.Desc
	naks                  *prometheus.Desc
	qps                   *prometheus.Desc
	cqs, cqHeld, cqCap    *prometheus.Desc
	srqs, srqWRs, srqCap  *prometheus.Desc
	ackLatency            *prometheus.Desc
	scalars               []scalarCounter
	latencyBucketsSeconds []float64

	ppActive, ppStarted, ppMessages, ppFailed, ppRefused *prometheus.Desc
	rpActive, rpEnded, rpFailed, rpPings                 *prometheus.Desc
}

// scalarCounter is one label-free counter and the snapshot field it reads.
type scalarCounter struct {
	desc *prometheus.Desc
	get  func(*transport.StatsSnapshot) uint64
}

func newCollector(src source) *collector {
	c := &collector{
		src: src,
		packets: prometheus.NewDesc("roce_packets_total",
			"RoCEv2 packets sent (tx) and received (rx), by opcode class.",
			[]string{"direction", "op_class"}, nil),
		bytes: prometheus.NewDesc("roce_bytes_total",
			"UDP payload bytes of RoCEv2 packets sent (tx) and received (rx), by opcode class.",
			[]string{"direction", "op_class"}, nil),
		naks: prometheus.NewDesc("roce_naks_total",
			"NAKs sent (tx) and received (rx), by AETH kind (rnr is the RNR NAK).",
			[]string{"direction", "kind"}, nil),
		qps: prometheus.NewDesc("roce_qps",
			"Queue pairs by state.",
			[]string{"state"}, nil),
		cqs:    prometheus.NewDesc("roce_cqs", "Completion queues open.", nil, nil),
		cqHeld: prometheus.NewDesc("roce_cq_completions", "Completions held in CQs and not yet polled.", nil, nil),
		cqCap:  prometheus.NewDesc("roce_cq_capacity", "Summed capacity (cqe) of the open CQs.", nil, nil),
		srqs:   prometheus.NewDesc("roce_srqs", "Shared receive queues open.", nil, nil),
		srqWRs: prometheus.NewDesc("roce_srq_receive_wrs", "Receive WRs posted to SRQs and not yet consumed.", nil, nil),
		srqCap: prometheus.NewDesc("roce_srq_capacity", "Summed max_wr of the open SRQs.", nil, nil),
		ackLatency: prometheus.NewDesc("roce_ack_latency_seconds",
			"Time from sending an RC request to the ACK that covers it.",
			nil, nil),
	}
	c.rpActive = prometheus.NewDesc("roce_rping_sessions",
		"rping connections being served now.", nil, nil)
	c.rpEnded = prometheus.NewDesc("roce_rping_sessions_total",
		"rping connections that ended with the client's disconnect.", nil, nil)
	c.rpFailed = prometheus.NewDesc("roce_rping_session_errors_total",
		"rping connections that failed (CM accept, or a ping's RDMA READ, WRITE or SEND).", nil, nil)
	c.rpPings = prometheus.NewDesc("roce_rping_pings_total",
		"Pings the rping responder answered (one RDMA READ and one RDMA WRITE each).", nil, nil)
	c.ppActive = prometheus.NewDesc("roce_pingpong_sessions",
		"Pingpong responder sessions serving messages now, by client tool (rc, srq, ud).", []string{"kind"}, nil)
	c.ppStarted = prometheus.NewDesc("roce_pingpong_sessions_total",
		"Pingpong responder sessions that completed the TCP exchange, by client tool.", []string{"kind"}, nil)
	c.ppMessages = prometheus.NewDesc("roce_pingpong_messages_total",
		"Messages the pingpong responder echoed, by client tool.", []string{"kind"}, nil)
	c.ppFailed = prometheus.NewDesc("roce_pingpong_exchange_errors_total",
		"Pingpong connections whose TCP exchange failed (malformed records, timeouts, QP setup).", nil, nil)
	c.ppRefused = prometheus.NewDesc("roce_pingpong_refused_total",
		"Pingpong connections refused: the session limit was reached, or the client's kind is switched off.", nil, nil)
	sc := func(name, help string, get func(*transport.StatsSnapshot) uint64) {
		c.scalars = append(c.scalars, scalarCounter{prometheus.NewDesc(name, help, nil, nil), get})
	}
	sc("roce_icrc_errors_total", "Received packets dropped for a bad ICRC.",
		func(s *transport.StatsSnapshot) uint64 { return s.ICRCErrors })
	sc("roce_malformed_packets_total", "Received datagrams dropped because their headers did not parse.",
		func(s *transport.StatsSnapshot) uint64 { return s.Malformed })
	sc("roce_unknown_qp_total", "Received packets dropped because no QP has their destination QPN.",
		func(s *transport.StatsSnapshot) uint64 { return s.UnknownQP })
	sc("roce_bad_pkey_total", "Received packets dropped because their P_Key is not the port's.",
		func(s *transport.StatsSnapshot) uint64 { return s.BadPKey })
	sc("roce_bad_qkey_total", "UD datagrams dropped because their Q_Key does not match the QP's.",
		func(s *transport.StatsSnapshot) uint64 { return s.BadQKey })
	sc("roce_bad_source_total", "RC/UC packets dropped because they did not come from the QP's peer.",
		func(s *transport.StatsSnapshot) uint64 { return s.BadSource })
	sc("roce_out_of_sequence_total", "Requests received with a PSN ahead of the expected one.",
		func(s *transport.StatsSnapshot) uint64 { return s.OutOfSequence })
	sc("roce_duplicate_requests_total", "Requests received with a PSN already acknowledged.",
		func(s *transport.StatsSnapshot) uint64 { return s.DuplicateRequests })
	sc("roce_retransmits_total", "Request packets sent again after a timeout or a NAK.",
		func(s *transport.StatsSnapshot) uint64 { return s.Retransmits })
	sc("roce_timeouts_total", "Retransmission timer expiries.",
		func(s *transport.StatsSnapshot) uint64 { return s.Timeouts })
	sc("roce_retry_exceeded_total", "Send queues that ran out of transport retries (IBV_WC_RETRY_EXC_ERR).",
		func(s *transport.StatsSnapshot) uint64 { return s.RetryExceeded })
	sc("roce_rnr_retry_exceeded_total", "Send queues that ran out of RNR retries (IBV_WC_RNR_RETRY_EXC_ERR).",
		func(s *transport.StatsSnapshot) uint64 { return s.RNRRetryExceeded })
	sc("roce_rx_queue_drops_total", "Received packets dropped because an engine shard's queue was full.",
		func(s *transport.StatsSnapshot) uint64 { return s.RxQueueDrops })
	sc("roce_tx_errors_total", "Datagrams the UDP socket failed to send.",
		func(s *transport.StatsSnapshot) uint64 { return s.TxErrors })
	sc("roce_cq_overruns_total", "Completions that did not fit in their CQ (IBV_EVENT_CQ_ERR).",
		func(s *transport.StatsSnapshot) uint64 { return s.CQOverruns })
	sc("roce_srq_limit_events_total", "IBV_EVENT_SRQ_LIMIT_REACHED events raised.",
		func(s *transport.StatsSnapshot) uint64 { return s.SRQLimitEvents })

	// transport buckets count latencies below 2^i µs; the last one also takes
	// everything above, so it is the +Inf bucket and has no finite bound here.
	for i := 0; i < transport.NumLatencyBuckets-1; i++ {
		c.latencyBucketsSeconds = append(c.latencyBucketsSeconds, transport.LatencyBucketBound(i).Seconds())
	}
	return c
}

// Describe implements prometheus.Collector.
func (c *collector) Describe(ch chan<- *prometheus.Desc) {
	ch <- c.packets
	ch <- c.bytes
	ch <- c.naks
	ch <- c.qps
	ch <- c.ackLatency
	if c.src.queues != nil {
		for _, d := range []*prometheus.Desc{c.cqs, c.cqHeld, c.cqCap, c.srqs, c.srqWRs, c.srqCap} {
			ch <- d
		}
	}
	for _, s := range c.scalars {
		ch <- s.desc
	}
	if c.src.pingpong != nil {
		ch <- c.ppActive
		ch <- c.ppStarted
		ch <- c.ppMessages
		ch <- c.ppFailed
		ch <- c.ppRefused
	}
	if c.src.rping != nil {
		ch <- c.rpActive
		ch <- c.rpEnded
		ch <- c.rpFailed
		ch <- c.rpPings
	}
}

// Collect implements prometheus.Collector: one snapshot, then const metrics from it.
func (c *collector) Collect(ch chan<- prometheus.Metric) {
	s := c.src.stats()
	for i := transport.OpClass(0); i < transport.NumOpClasses; i++ {
		cl := i.String()
		ch <- prometheus.MustNewConstMetric(c.packets, prometheus.CounterValue, float64(s.SentPackets[i]), "tx", cl)
		ch <- prometheus.MustNewConstMetric(c.packets, prometheus.CounterValue, float64(s.RcvdPackets[i]), "rx", cl)
		ch <- prometheus.MustNewConstMetric(c.bytes, prometheus.CounterValue, float64(s.SentBytes[i]), "tx", cl)
		ch <- prometheus.MustNewConstMetric(c.bytes, prometheus.CounterValue, float64(s.RcvdBytes[i]), "rx", cl)
	}
	for k := transport.NAKKind(0); k < transport.NumNAKKinds; k++ {
		ch <- prometheus.MustNewConstMetric(c.naks, prometheus.CounterValue, float64(s.NAKsSent[k]), "tx", k.String())
		ch <- prometheus.MustNewConstMetric(c.naks, prometheus.CounterValue, float64(s.NAKsRcvd[k]), "rx", k.String())
	}
	for _, sc := range c.scalars {
		ch <- prometheus.MustNewConstMetric(sc.desc, prometheus.CounterValue, float64(sc.get(&s)))
	}
	states := c.src.qpStates()
	for _, st := range qpStateNames {
		ch <- prometheus.MustNewConstMetric(c.qps, prometheus.GaugeValue, float64(states[st]), st)
	}
	ch <- c.latencyHistogram(&s)
	if c.src.queues != nil {
		o := c.src.queues()
		for _, g := range []struct {
			d *prometheus.Desc
			v int
		}{{c.cqs, o.CQs}, {c.cqHeld, o.CQEntries}, {c.cqCap, o.CQCapacity}, {c.srqs, o.SRQs}, {c.srqWRs, o.SRQWRs}, {c.srqCap, o.SRQCapacity}} {
			ch <- prometheus.MustNewConstMetric(g.d, prometheus.GaugeValue, float64(g.v))
		}
	}
	if pp := c.src.pingpong; pp != nil {
		for k := kindRC; k <= kindUD; k++ {
			ch <- prometheus.MustNewConstMetric(c.ppActive, prometheus.GaugeValue, float64(pp.active[k].Load()), k.String())
			ch <- prometheus.MustNewConstMetric(c.ppStarted, prometheus.CounterValue, float64(pp.started[k].Load()), k.String())
			ch <- prometheus.MustNewConstMetric(c.ppMessages, prometheus.CounterValue, float64(pp.messages[k].Load()), k.String())
		}
		ch <- prometheus.MustNewConstMetric(c.ppFailed, prometheus.CounterValue, float64(pp.failed.Load()))
		ch <- prometheus.MustNewConstMetric(c.ppRefused, prometheus.CounterValue, float64(pp.refused.Load()))
	}
	if rp := c.src.rping; rp != nil {
		ch <- prometheus.MustNewConstMetric(c.rpActive, prometheus.GaugeValue, float64(rp.active.Load()))
		ch <- prometheus.MustNewConstMetric(c.rpEnded, prometheus.CounterValue, float64(rp.ended.Load()))
		ch <- prometheus.MustNewConstMetric(c.rpFailed, prometheus.CounterValue, float64(rp.failed.Load()))
		ch <- prometheus.MustNewConstMetric(c.rpPings, prometheus.CounterValue, float64(rp.pings.Load()))
	}
}

// latencyHistogram converts the engine's per-bucket counts into Prometheus's cumulative
// buckets.
func (c *collector) latencyHistogram(s *transport.StatsSnapshot) prometheus.Metric {
	buckets := make(map[float64]uint64, len(c.latencyBucketsSeconds))
	var cum uint64
	for i, le := range c.latencyBucketsSeconds {
		cum += s.LatencyBuckets[i]
		buckets[le] = cum
	}
	count := cum + s.LatencyBuckets[transport.NumLatencyBuckets-1]
	return prometheus.MustNewConstHistogram(c.ackLatency, count, float64(s.LatencySumNanos)/1e9, buckets)
}

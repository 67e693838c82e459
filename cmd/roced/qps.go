package main

import (
	"github.com/goroce/goroce/roce"
)

// qpJSON is one row of /debug/qps: a roce.QPInfo with names instead of enum numbers,
// so the output reads without the verbs headers at hand.
type qpJSON struct {
	Device      string `json:"device"`
	QPN         uint32 `json:"qpn"`
	Type        string `json:"type"`
	State       string `json:"state"`
	DestQPN     uint32 `json:"dest_qpn"`
	Peer        string `json:"peer,omitempty"`
	SrcPort     uint16 `json:"src_port"`
	NextPSN     uint32 `json:"next_psn"`
	AckedPSN    uint32 `json:"acked_psn"`
	ExpectedPSN uint32 `json:"expected_psn"`
	MSN         uint32 `json:"msn"`
	SendQueued  int    `json:"send_queued"`
	TxPackets   uint64 `json:"tx_packets"`
	RxPackets   uint64 `json:"rx_packets"`
	Retransmits uint64 `json:"retransmits"`
	Timeouts    uint64 `json:"timeouts"`
	PID         int    `json:"pid,omitempty"`  // the attached process that owns it; 0: roced's own
	Comm        string `json:"comm,omitempty"` // its command name
	// Congestion control (absent when off): the DCQCN rate the QP is paced
	// at and its target, in Mb/s, α (0..1), and the rate cuts so far.
	CCRateMbps   *float64 `json:"cc_rate_mbps,omitempty"`
	CCTargetMbps *float64 `json:"cc_target_rate_mbps,omitempty"`
	CCAlpha      *float64 `json:"cc_alpha,omitempty"`
	CCCuts       *uint64  `json:"cc_rate_cuts,omitempty"`
}

// debugQPs lists every QP of every device, for /debug/qps.
func (d *daemon) debugQPs() any {
	out := []qpJSON{} // an empty list, not null, when there are none
	for _, s := range d.devs {
		for _, q := range s.dev.QPs() {
			out = append(out, qpRow(s.dev, q))
		}
		if s.shared == nil {
			continue
		}
		for _, c := range s.shared.refresh(d.share) {
			r, _ := c.Report()
			for _, q := range r.QPs {
				row := qpRow(s.dev, roce.QPInfo(q))
				row.PID, row.Comm = c.PID, c.Comm
				out = append(out, row)
			}
		}
	}
	return out
}

func qpRow(dev *roce.Device, q roce.QPInfo) qpJSON {
	r := qpJSON{
		Device:      dev.Addr().String(),
		QPN:         q.QPN,
		Type:        q.Type.String(),
		State:       q.State.String(),
		DestQPN:     q.DestQPN,
		SrcPort:     q.SrcPort,
		NextPSN:     uint32(q.NextPSN),
		AckedPSN:    uint32(q.AckedPSN),
		ExpectedPSN: uint32(q.ExpectedPSN),
		MSN:         q.MSN,
		SendQueued:  q.SendQueued,
		TxPackets:   q.TxPackets,
		RxPackets:   q.RxPackets,
		Retransmits: q.Retransmits,
		Timeouts:    q.Timeouts,
	}
	if q.Peer.IsValid() {
		r.Peer = q.Peer.String()
	}
	if q.CCRate != 0 {
		rate, target, alpha, cuts := float64(q.CCRate)/1e6, float64(q.CCTargetRate)/1e6, float64(q.CCAlpha)/1024, q.CCCuts
		r.CCRateMbps, r.CCTargetMbps, r.CCAlpha, r.CCCuts = &rate, &target, &alpha, &cuts
	}
	return r
}

package attach

import (
	"encoding/json"

	"github.com/goroce/goroce/internal/core/transport"
	"github.com/goroce/goroce/internal/core/verbs"
)

// ReportQPs bounds the QPs a Report lists one by one, so that a report fits
// a message; QPStates still counts every QP.
const ReportQPs = 128

// Report is a client's answer to roced's Query, as JSON: what roced shows of
// the client's device beside its own (metrics, /debug, roce-devinfo).
type Report struct {
	Stats      transport.StatsSnapshot `json:"stats"`
	QPStates   [8]int                  `json:"qp_states"` // QPs by verbs.QPState
	QPs        []verbs.QPInfo          `json:"qps"`       // at most ReportQPs
	QPsOmitted int                     `json:"qps_omitted"`
	Queues     Queues                  `json:"queues"`
	PDs        int                     `json:"pds"`
	MRs        int                     `json:"mrs"`
	// Misrouted counts datagrams the kernel steered to this client for a
	// QPN outside its block (Link): dropped.
	Misrouted uint64 `json:"misrouted"`
}

// Queues sums a device's CQs and SRQs (the fields of roce.QueueOccupancy).
type Queues struct {
	CQs         int `json:"cqs"`
	CQEntries   int `json:"cq_entries"`
	CQCapacity  int `json:"cq_capacity"`
	SRQs        int `json:"srqs"`
	SRQWRs      int `json:"srq_wrs"`
	SRQCapacity int `json:"srq_capacity"`
}

// Encode marshals r, listing at most ReportQPs QPs.
func (r *Report) Encode() []byte {
	if n := len(r.QPs); n > ReportQPs {
		r.QPsOmitted += n - ReportQPs
		r.QPs = r.QPs[:ReportQPs]
	}
	b, err := json.Marshal(r)
	if err != nil {
		return nil
	}
	return b
}

// DecodeReport parses a Report body.
func DecodeReport(b []byte) (Report, error) {
	var r Report
	err := json.Unmarshal(b, &r)
	return r, err
}

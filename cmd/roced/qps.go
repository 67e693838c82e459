package main

import (
	"github.com/goroce/goroce/internal/tool/devapi"
	"github.com/goroce/goroce/roce"
)

// debugQPs lists every QP of every device, for /debug/qps, in the schema
// /debug/devices uses.
func (d *daemon) debugQPs() any {
	out := []devapi.QP{}
	for _, s := range d.devs {
		out = append(out, devapi.QPs(s.dev)...)
		if s.shared == nil {
			continue
		}
		for _, c := range s.shared.refresh(d.share) {
			r, _ := c.Report()
			qps := make([]roce.QPInfo, len(r.QPs))
			for i, q := range r.QPs {
				qps[i] = roce.QPInfo(q)
			}
			out = append(out, devapi.ProcessQPs(s.dev.Addr().String(), c.PID, c.Comm, qps)...)
		}
	}
	return out
}

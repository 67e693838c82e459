package main

import "github.com/goroce/goroce/internal/tool/devapi"

// debugQPs lists every QP of every device, for /debug/qps, in the schema
// /debug/devices uses.
func (d *daemon) debugQPs() any {
	out := []devapi.QP{}
	for _, s := range d.devs {
		out = append(out, devapi.QPs(s.dev)...)
	}
	return out
}

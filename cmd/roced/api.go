package main

import (
	"encoding/json"
	"net/http"

	"github.com/goroce/goroce/internal/tool/devapi"
)

// debugMux is newDebugMux with /debug/devices: every device roced serves, with
// its attributes, ports, GID table, QPs and counters (package devapi's JSON),
// for cmd/roce-devinfo. It sits under /debug/ because it shows every QP's peer,
// QPNs and PSNs, as /debug/qps does.
func (d *daemon) debugMux() *http.ServeMux {
	mux := newDebugMux(d.debugQPs, d.log)
	mux.HandleFunc("GET "+devapi.Path, func(w http.ResponseWriter, r *http.Request) {
		devs := make([]devapi.Device, 0, len(d.devs))
		for _, s := range d.devs {
			dev, err := devapi.Describe(s.dev)
			if err != nil {
				http.Error(w, err.Error(), http.StatusInternalServerError)
				return
			}
			devs = append(devs, dev)
		}
		w.Header().Set("Content-Type", "application/json")
		enc := json.NewEncoder(w)
		enc.SetIndent("", "  ")
		if err := enc.Encode(devs); err != nil {
			d.log.Debug(devapi.Path+": write failed", "err", err)
		}
	})
	return mux
}

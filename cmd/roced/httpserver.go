package main

import (
	"encoding/json"
	"log/slog"
	"net/http"
	"sync/atomic"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
)

// newRegistry returns a registry with cs, the Go runtime and process collectors and
// go_build_info. A private registry (not the global default) keeps the exposition
// exactly what roced registers.
func newRegistry(cs ...prometheus.Collector) *prometheus.Registry {
	reg := prometheus.NewRegistry()
	reg.MustRegister(cs...)
	reg.MustRegister(
		collectors.NewGoCollector(),
		collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}),
		collectors.NewBuildInfoCollector(),
	)
	return reg
}

// newMux serves /metrics, /healthz and /debug/qps.
//
// /healthz is 200 only while ready is true: roced sets it once every UDP socket is
// bound and clears it when shutdown starts, so a load balancer or systemd watchdog
// script stops sending work before the QPs go to ERR.
func newMux(reg *prometheus.Registry, ready *atomic.Bool, qps func() any, log *slog.Logger) *http.ServeMux {
	mux := http.NewServeMux()
	mux.Handle("GET /metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{
		ErrorLog:          slog.NewLogLogger(log.Handler(), slog.LevelError),
		ErrorHandling:     promhttp.ContinueOnError,
		EnableOpenMetrics: true,
	}))
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		if !ready.Load() {
			w.WriteHeader(http.StatusServiceUnavailable)
			_, _ = w.Write([]byte("not ready\n"))
			return
		}
		_, _ = w.Write([]byte("ok\n"))
	})
	mux.HandleFunc("GET /debug/qps", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		enc := json.NewEncoder(w)
		enc.SetIndent("", "  ")
		if err := enc.Encode(qps()); err != nil {
			log.Debug("debug/qps: write failed", "err", err)
		}
	})
	mux.HandleFunc("GET /{$}", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/html; charset=utf-8")
		_, _ = w.Write([]byte(`<html><head><title>roced</title></head><body><h1>roced</h1>` +
			`<p><a href="/metrics">/metrics</a> · <a href="/healthz">/healthz</a> · <a href="/debug/qps">/debug/qps</a></p></body></html>` + "\n"))
	})
	return mux
}

package main

import (
	"encoding/json"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/http/pprof"
	"runtime"
	"runtime/debug"
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

// endpoints is what the metrics listener serves.
type endpoints struct {
	reg *prometheus.Registry
	// ready is set once every socket is bound and cleared when shutdown
	// starts: roced accepts sessions.
	ready *atomic.Bool
	// health returns "" while the engine works, else why not.
	health func() string
	// debug serves /debug/*; nil answers 404 with the reason (see debugHere).
	debug http.Handler
	log   *slog.Logger
}

// newMux serves /metrics, /healthz, /readyz and /debug/*.
//
// /healthz is liveness: 503, with the reason, when an engine shard has not
// finished a pass within the deadline (the engine is wedged; restarting helps).
// /readyz is readiness: 200 only while roced accepts sessions (started, not
// shutting down, and healthy), so a load balancer stops sending clients before
// the QPs go to ERR.
func newMux(ep endpoints) *http.ServeMux {
	mux := http.NewServeMux()
	mux.Handle("GET /metrics", promhttp.HandlerFor(ep.reg, promhttp.HandlerOpts{
		ErrorLog:          slog.NewLogLogger(ep.log.Handler(), slog.LevelError),
		ErrorHandling:     promhttp.ContinueOnError,
		EnableOpenMetrics: true,
	}))
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, r *http.Request) {
		status(w, ep.health(), "ok")
	})
	mux.HandleFunc("GET /readyz", func(w http.ResponseWriter, r *http.Request) {
		why := ep.health()
		if why == "" && !ep.ready.Load() {
			why = "not accepting sessions: starting or shutting down"
		}
		status(w, why, "ready")
	})
	if ep.debug != nil {
		mux.Handle("/debug/", ep.debug)
	} else {
		mux.HandleFunc("/debug/", func(w http.ResponseWriter, r *http.Request) {
			http.Error(w, "/debug/* is served only on a loopback -metrics address, or on -debug: it shows every QP's peer, QPN and PSNs", http.StatusNotFound)
		})
	}
	mux.HandleFunc("GET /{$}", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/html; charset=utf-8")
		_, _ = w.Write([]byte(`<html><head><title>roced</title></head><body><h1>roced</h1>` +
			`<p><a href="/metrics">/metrics</a> · <a href="/healthz">/healthz</a> · <a href="/readyz">/readyz</a>` +
			` · <a href="/debug/qps">/debug/qps</a></p></body></html>` + "\n"))
	})
	return mux
}

// status answers 200 with ok when why is empty, else 503 with why.
func status(w http.ResponseWriter, why, ok string) {
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	if why != "" {
		w.WriteHeader(http.StatusServiceUnavailable)
		_, _ = w.Write([]byte(why + "\n"))
		return
	}
	_, _ = w.Write([]byte(ok + "\n"))
}

// newDebugMux serves /debug/qps (every QP with its peer, QPNs and PSNs),
// /debug/gc and the Go profiler under /debug/pprof/. Whoever reads /debug/qps and can spoof the peer's address can inject
// packets the QP accepts as in sequence, and /debug/gc costs a full collection
// per request, so the mux is served only on loopback unless -debug says where.
func newDebugMux(qps func() any, log *slog.Logger) *http.ServeMux {
	mux := http.NewServeMux()
	// POST /debug/gc collects garbage and returns memory to the OS, then reports
	// the live heap: what a leak check compares against its baseline.
	mux.HandleFunc("POST /debug/gc", func(w http.ResponseWriter, r *http.Request) {
		runtime.GC()
		debug.FreeOSMemory()
		var ms runtime.MemStats
		runtime.ReadMemStats(&ms)
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		fmt.Fprintf(w, "heap_alloc_bytes %d\nheap_inuse_bytes %d\nheap_objects %d\ngoroutines %d\n",
			ms.HeapAlloc, ms.HeapInuse, ms.HeapObjects, runtime.NumGoroutine())
	})
	// The Go profiler (go tool pprof http://ADDR/debug/pprof/heap).
	mux.HandleFunc("GET /debug/pprof/", pprof.Index)
	mux.HandleFunc("GET /debug/pprof/cmdline", pprof.Cmdline)
	mux.HandleFunc("GET /debug/pprof/profile", pprof.Profile)
	mux.HandleFunc("GET /debug/pprof/symbol", pprof.Symbol)
	mux.HandleFunc("GET /debug/pprof/trace", pprof.Trace)
	mux.HandleFunc("GET /debug/qps", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		enc := json.NewEncoder(w)
		enc.SetIndent("", "  ")
		if err := enc.Encode(qps()); err != nil {
			log.Debug("debug/qps: write failed", "err", err)
		}
	})
	return mux
}

// debugHere reports whether /debug/* may be served on the -metrics address:
// only when it is a loopback address (or localhost).
func debugHere(metrics string) bool {
	host, _, err := net.SplitHostPort(metrics)
	if err != nil {
		return false
	}
	if host == "localhost" {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

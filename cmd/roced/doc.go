// Command roced runs the goroce RoCEv2 engine as a service on a host without an RDMA
// NIC: it owns UDP 4791 on its addresses, serves built-in responders that the stock
// rdma-core tools talk to (ibv_rc_pingpong, ibv_srq_pingpong, ibv_ud_pingpong; rping
// through the connection manager on QP1), and exports the engine's counters to
// Prometheus.
//
// With no flags it serves 127.0.0.1 (UDP 4791, pingpong on TCP 18515 and 18516, rping on
// rdma_cm port 7174) with metrics on http://127.0.0.1:9464/metrics, and prints one line
// per endpoint.
//
// Layout: run (run.go) is the whole daemon behind a testable function; config.go
// parses and validates flags; package metrics exports the engine's, the CM's and the
// link's counters (one snapshot per device per scrape: the data path never calls
// Prometheus) and collector.go the responders' session counters, the async events and
// roce_build_info; health.go watches the engine shards; notify.go speaks systemd's
// sd_notify protocol; httpserver.go serves /metrics, /healthz, /readyz and the
// loopback-only /debug/* (api.go adds /debug/devices); pingpong.go is the pingpong
// responder over the oob exchange; rping.go is the rping responder (cm.Manager on the
// gsi agent, cm/rping). Every responder session has an idle limit and a cap. See
// README.md in this directory for operating it.
package main

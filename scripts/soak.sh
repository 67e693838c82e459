#!/usr/bin/env bash
# Soak: roced under good clients (roce-pingpong rc/srq/ud, some with --loss, rping-go,
# roce-perftest pairs next to it), clients killed mid-run by PID, and malformed traffic
# (junk datagrams to UDP 4791, junk MADs to QP1, REQs that never send an RTU), for
# SOAK_DURATION (default 5m; hours by hand: SOAK_DURATION=4h scripts/soak.sh).
# Asserts no lost or extra completion for the good clients, /healthz and /debug/qps
# answering throughout, every session, QP and CQ gone after the load, and the live heap
# and goroutines back to their baseline; prints a summary table.
# Everything runs on 127.0.0.x (roced on 127.0.0.10, UDP 4791).
set -euo pipefail
cd "$(dirname "$0")/.."
dur=${SOAK_DURATION:-5m}
go vet -tags soak ./cmd/roced
# The test's own timeout: the load, then up to a minute of draining, builds and slack.
case "$dur" in
  *h) secs=$(( ${dur%h} * 3600 )) ;;
  *m) secs=$(( ${dur%m} * 60 )) ;;
  *s) secs=${dur%s} ;;
  *) echo "soak.sh: SOAK_DURATION=$dur: want a whole number of s, m or h (e.g. 5m)" >&2; exit 2 ;;
esac
exec go test -tags soak -run '^TestSoak$' -count=1 -v -timeout "$((secs + 600))s" ./cmd/roced -args -soak.duration="$dur"

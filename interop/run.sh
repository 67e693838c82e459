#!/usr/bin/env bash
# interop/run.sh - the interop stage of scripts/test.sh: goroce against real Linux rxe.
#
# Installs what it needs with apt (qemu-system-x86, tcpdump; the guest's .debs with
# apt-get download), builds the guest image (cached in interop/cache and interop/out),
# boots two rxe guests in netns goroce-lab, runs the Go interop tests with GOROCE_INTEROP=1,
# and always tears the lab down: on success, failure, timeout or interrupt.
#
# It fails, with the reason, when the lab cannot run (not root, no qemu, no network
# namespaces). Outside CI (CI unset) and when not root it prints SKIP and exits 0 instead,
# so a developer's `scripts/test.sh` still works without privileges.
#
# Env: GOROCE_INTEROP_RUN=REGEXP passes -run to go test; GOROCE_INTEROP_TIMEOUT (default
# 600 s) bounds the Go tests; GOROCE_INTEROP_KEEP=1 leaves the lab up afterwards.
set -euo pipefail
HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
ROOT=$(dirname "$HERE")
T0=$(date +%s)
log() { echo "[interop] $(($(date +%s) - T0))s $*" >&2; }
fail() { echo "[interop] FAIL: $*" >&2; exit 1; }

if [ "$(id -u)" != 0 ]; then
  if [ "${CI:-}" = true ] || [ "${GOROCE_INTEROP:-}" = 1 ]; then
    fail "the interop lab needs root (network namespaces, taps, qemu); CI must run it as root"
  fi
  echo "[interop] SKIP: not root, so no lab (set CI=true to make this an error)" >&2
  exit 0
fi

cleanup() {
  local rc=$?
  if [ "${GOROCE_INTEROP_KEEP:-}" = 1 ]; then
    log "GOROCE_INTEROP_KEEP=1: lab left up (interop/lab down)"
  else
    "$HERE/lab" down || true
  fi
  log "done (exit $rc)"
  exit $rc
}
trap cleanup EXIT

# Every long step runs in a process group of its own, in the background, so that a
# signal (a CI timeout, ^C) reaches this script at once - bash runs traps only between
# foreground commands - and ends the step's whole group before the lab is torn down.
step_pid=
step() {
  setsid "$@" &
  step_pid=$!
  local rc=0
  wait "$step_pid" || rc=$?
  step_pid=
  return $rc
}
on_signal() {
  log "interrupted"
  if [ -n "$step_pid" ]; then
    kill -TERM -- "-$step_pid" 2>/dev/null || true
    sleep 1
    kill -KILL -- "-$step_pid" 2>/dev/null || true
  fi
  exit 130
}
trap on_signal INT TERM

# apt lists: refreshed once per run on a fresh machine, and when older than a day.
stamp=/var/lib/apt/lists/partial/.goroce-updated
if [ -z "$(find "$stamp" -mmin -1440 2>/dev/null)" ] ||
  ! apt-cache show --no-all-versions busybox-static >/dev/null 2>&1; then
  log "apt-get update"
  step timeout 300 apt-get update -q >/dev/null || fail "apt-get update failed"
  touch "$stamp" 2>/dev/null || true
fi

log "build the guest image"
step timeout 600 "$HERE/lab" build || fail "guest image build failed (see above)"
"$HERE/lab" down >/dev/null 2>&1 || true # a lab left over from an interrupted run
log "boot 2 guests"
step timeout 300 "$HERE/lab" up 2 || fail "the lab did not come up (see above)"

cd "$ROOT"
for cmd in roce-pingpong roce-perftest rping-go roced; do
  log "build cmd/$cmd"
  step go build -o "$HERE/run/$cmd" "./cmd/$cmd" || fail "go build ./cmd/$cmd failed"
done
log "go test ./interop/..."
export GOROCE_INTEROP=1 GOROCE_LAB_ENV=$HERE/run/lab.env GOROCE_PINGPONG=$HERE/run/roce-pingpong
export GOROCE_RPING=$HERE/run/rping-go GOROCE_ROCED=$HERE/run/roced GOROCE_PERFTEST=$HERE/run/roce-perftest
export GOROCE_INTEROP_RESULTS=$HERE/run/results.tsv
rm -f "$GOROCE_INTEROP_RESULTS" "$HERE"/run/pcap/*.pcap
args=(-count=1 -v -timeout "${GOROCE_INTEROP_TIMEOUT:-600}s")
[ -n "${GOROCE_INTEROP_RUN:-}" ] && args+=(-run "$GOROCE_INTEROP_RUN")
rc=0
step bash -c 'go test "$@" ./interop/... 2>&1 | tee "$0"; exit "${PIPESTATUS[0]}"' \
  "$HERE/run/go-test.log" "${args[@]}" || rc=$?
# cmd/roced's own lab tests (TestRxe*: stock tools against the daemon), unless -run
# selects none of them.
if [ -z "${GOROCE_INTEROP_RUN:-}" ] || [[ TestRxePingpong =~ $GOROCE_INTEROP_RUN ]]; then
  log "go test -run '^TestRxe' ./cmd/roced"
  step bash -c 'go test "$@" ./cmd/roced 2>&1 | tee -a "$0"; exit "${PIPESTATUS[0]}"' \
    "$HERE/run/go-test.log" -count=1 -v -timeout "${GOROCE_INTEROP_TIMEOUT:-600}s" -run '^TestRxe' || rc=$?
fi
if [ -s "$GOROCE_INTEROP_RESULTS" ]; then
  echo "== interop results (tool, direction, transport, options, verdict, usec/iter, rxe hw_counters | goroce counters)"
  column -t -s $'\t' "$GOROCE_INTEROP_RESULTS" 2>/dev/null || cat "$GOROCE_INTEROP_RESULTS"
fi
[ "$rc" = 0 ] || fail "interop tests failed (log: interop/run/go-test.log, captures of failed runs: interop/run/pcap/)"
log "PASS"

#!/usr/bin/env bash
# The project's test command (README "Run the tests"). CI runs exactly this.
# Stages: gofmt, go vet, go test -race, a short fuzz smoke of every fuzz target,
# then the interop suite against real Linux rxe in a QEMU VM (interop/), when present.
set -euo pipefail
cd "$(dirname "$0")/.."
export GOFLAGS=${GOFLAGS:-}

# Each stage's duration is printed in a table at the end, after a failure too (the
# EXIT trap), where a CI log cut to its tail still shows where the time went.
# Next to each duration: how busy the host's CPUs were during the stage (from /proc/stat),
# which tells a stage that waits from one that needs more cores.
names=() secs=() busy=() stage= stage_t0=0 stage_cpu= T0=$(date +%s)
cpu_ticks() { awk '/^cpu /{ print $2+$3+$4+$7+$8+$9, $5+$6; exit }' /proc/stat 2>/dev/null || true; }
end_stage() {
  [ -n "$stage" ] || return 0
  names+=("$stage$1") secs+=($(($(date +%s) - stage_t0)))
  busy+=("$(echo "$stage_cpu $(cpu_ticks)" | awk 'NF == 4 && $3 + $4 > $1 + $2 { printf "%d%%", 100 * ($3 - $1) / ($3 + $4 - $1 - $2) }')")
  stage=
}
begin() { # begin NAME: ends the stage running, starts NAME
  end_stage ""
  stage=$1 stage_t0=$(date +%s) stage_cpu=$(cpu_ticks)
  echo "== $1"
}
durations() {
  local rc=$? i
  end_stage " (FAILED)"
  if [ -n "${prep_pid:-}" ]; then
    # A stage failed before the interop stage: end the lab being prepared for it.
    kill -TERM "$prep_pid" 2>/dev/null || true
    wait "$prep_pid" 2>/dev/null || true
    interop/lab down >/dev/null 2>&1 || true
  fi
  echo "== stage durations (seconds; CPU busy, all cores)"
  for i in "${!names[@]}"; do printf '%6d %5s  %s\n' "${secs[$i]}" "${busy[$i]:--}" "${names[$i]}"; done
  printf '%6d %5s  total (exit %d)\n' $(($(date +%s) - T0)) "" "$rc"
  exit "$rc"
}
trap durations EXIT

begin "gofmt"
bad=$(gofmt -l $(git ls-files '*.go' 2>/dev/null || find . -name '*.go'))
if [ -n "$bad" ]; then echo "gofmt would change:"; echo "$bad"; exit 1; fi

begin "go vet"
go vet ./...
# deploy/kubernetes is its own module (k8s.io stays out of the main one's dependencies).
(cd deploy/kubernetes && go vet ./...)

# What the stages install, when we can (root with apt), as CI does, all before the lab
# is prepared in the background (its apt steps would otherwise wait on dpkg's lock):
# - a real Prometheus server and promtool for the roced end-to-end tests;
# - tshark, which checks that Wireshark decodes our captures as InfiniBand;
# - rdma-core's headers and Debian's own binaries (ibverbs-utils, perftest, rdmacm-utils),
#   which cabi builds against and runs.
if [ "$(id -u)" = 0 ] || [ "${CI:-}" = true ]; then
  begin "install prometheus, tshark, rdma-core's headers and tools"
  bash cmd/roced/testdata/install-prometheus.sh
  missing=()
  command -v tshark >/dev/null || missing+=(tshark)
  for p in libibverbs-dev librdmacm-dev ibverbs-utils perftest rdmacm-utils; do
    dpkg -s "$p" >/dev/null 2>&1 || missing+=("$p")
  done
  if [ ${#missing[@]} -gt 0 ]; then
    DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends "${missing[@]}" >/dev/null ||
      { apt-get update -q >/dev/null && DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends "${missing[@]}" >/dev/null; }
  fi
fi

# The interop lab (images, then two guests per lane) is prepared in the background while
# the stages that need no lab run; the interop stage then only runs its tests.
prep_pid= prep_log=
if [ -x interop/run.sh ] && [ "$(id -u)" = 0 ]; then
  prep_log=$(mktemp)
  echo "== interop: preparing the lab in the background (log: $prep_log)"
  interop/run.sh prepare >"$prep_log" 2>&1 &
  prep_pid=$!
fi

begin "go test -race"
go test -race -count=1 -timeout 20m ./...
# The Kubernetes manifests: strict decoding into the API types, and the flags they pass
# checked against the binaries built from cmd/.
(cd deploy/kubernetes && go test -race -count=1 -timeout 10m ./...)

# cabi: goroce's libibverbs.so.1 and librdmacm.so.1 for unmodified C programs, its own Go
# module (cgo stays out of the main one), with Debian's own binaries run on them.
begin "cabi (libibverbs.so.1 and librdmacm.so.1 for C programs)"
bash cabi/build.sh
(cd cabi && go vet ./... && go test -count=1 -timeout 10m ./...)

# Budgets are counts of executions, not durations: a duration -fuzztime races the fuzz
# coordinator's deadline against its workers and can fail a target with a bare "context
# deadline exceeded" on a loaded machine (golang/go#75804, unfixed in Go 1.26). A count
# has no deadline, so a failure here is a real crasher (written to testdata/fuzz, where
# it replays as a seed). The counts aim at a few seconds per target on 2 cores.
# FUZZTIME (e.g. 30s or 1000000x) overrides every budget.
fuzz_budget() { # package target
  if [ -n "${FUZZTIME:-}" ]; then echo "$FUZZTIME"; return; fi
  case "$1 $2" in
    */transport\ Fuzz*Responder | */cmd/roced\ *) echo 15000x ;;
    */cq\ * | */srq\ *) echo 40000x ;;
    *) echo 200000x ;;
  esac
}
begin "fuzz smoke"
# The targets are found in the sources: listing them through go test would build every
# package's test binary once more.
for dir in $(git ls-files '*_test.go' | grep -v '^cabi/' | xargs grep -l '^func Fuzz' | xargs -n1 dirname | sort -u); do
  pkg=./$dir
  for fz in $(grep -h '^func Fuzz' "$dir"/*_test.go | sed 's/^func \(Fuzz[A-Za-z0-9_]*\).*/\1/'); do
    budget=$(fuzz_budget "$pkg" "$fz")
    echo "-- $pkg $fz ($budget)"
    go test -run '^$' -fuzz "^${fz}\$" -fuzztime "$budget" "$pkg"
  done
done

# The soak: roced for SOAK_DURATION (5 minutes) under good clients, loss, clients
# killed mid-run and malformed traffic; it needs UDP 4791 on 127.0.0.x (skips if taken).
begin "soak (${SOAK_DURATION:-5m})"
bash scripts/soak.sh

if [ -x interop/run.sh ]; then
  begin "interop (real rxe in QEMU)"
  if [ -n "$prep_pid" ]; then
    rc=0
    wait "$prep_pid" || rc=$?
    pid=$prep_pid prep_pid=
    cat "$prep_log"
    [ "$rc" = 0 ] || { echo "interop: preparing the lab failed (pid $pid, exit $rc)"; exit 1; }
    interop/run.sh tests
  else
    interop/run.sh
  fi
fi
# A short bench set, each engine benchmark beside its raw-UDP baseline from the same
# process, with the CPU per packet, the machine's idle share and the system calls per
# 1000 packets (bench/README.md). It never fails on a timing: the machines are shared.
# It fails if a benchmark errors or allocates per packet (GOROCE_BENCH_STRICT).
begin "bench (short set: ratios and CPU per packet)"
GOROCE_BENCH_STRICT=1 go test -run '^$' -timeout 10m -count 1 -benchtime "${BENCHTIME:-1s}" \
  -bench 'RCWrite/1MiB$|RCSend/4KiB$|RCPingPong$|RCSendQPs/(1|4096)$|RawUDP/gso/4112B$|RawUDPPingPong$' ./bench
end_stage ""
echo "== all stages passed"

#!/usr/bin/env bash
# The project's test command (README "Run the tests"). CI runs exactly this.
# Stages: gofmt, go vet, go test -race, cabi, the soak, then the interop suite against real
# Linux rxe in a QEMU VM (interop/) when present, with a short fuzz smoke of every fuzz
# target in the background beside them, and last a short bench set.
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
  if [ -n "${fuzz_pid:-}" ]; then
    # A stage failed while the fuzz smoke ran in the background: end its process group.
    kill -TERM -- "-$fuzz_pid" 2>/dev/null || true
    wait "$fuzz_pid" 2>/dev/null || true
  fi
  if [ -n "${prep_pid:-}" ]; then
    # A stage failed before the interop stage: end the lab being prepared for it.
    kill -TERM "$prep_pid" 2>/dev/null || true
    wait "$prep_pid" 2>/dev/null || true
    interop/lab down >/dev/null 2>&1 || true
  fi
  echo "== stage durations (seconds; CPU busy, all cores)"
  for i in "${!names[@]}"; do printf '%6d %5s  %s\n' "${secs[$i]}" "${busy[$i]:--}" "${names[$i]}"; done
  [ -z "${fuzz_secs:-}" ] || printf '%6d %5s  (fuzz smoke, in the background at nice 19)\n' "$fuzz_secs" ""
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

# The fuzz smoke (scripts/fuzz.sh) runs in the background from here on, at nice 19, beside
# the stages that follow: they leave a third of the CPU idle waiting on their peers (the
# interop lanes wait on TCG guests), which the fuzzers take instead of running alone for
# three minutes. Niced, it takes less from those stages than the CPU hog they pass beside.
# It is waited for before the bench, which needs the CPU to itself.
# setsid gives it a session, so that a failure ends its whole process group. With
# autogroup scheduling (kernel.sched_autogroup_enabled) a session is also a task group,
# which CFS weighs equally with the others whatever its tasks' nice values, so the group's
# own nice is set too (/proc/self/autogroup, from inside the new session): without it the
# fuzzers took half the CPU from the cabi stage and doubled its time.
fuzz_log=$(mktemp)
fuzz_t0=$(date +%s)
setsid bash -c 'echo 19 >/proc/self/autogroup 2>/dev/null; exec nice -n 19 bash scripts/fuzz.sh' >"$fuzz_log" 2>&1 &
fuzz_pid=$!
echo "== fuzz smoke: started in the background (nice 19; log: $fuzz_log)"

# cabi: goroce's libibverbs.so.1 and librdmacm.so.1 for unmodified C programs, its own Go
# module (cgo stays out of the main one), with Debian's own binaries run on them.
begin "cabi (libibverbs.so.1 and librdmacm.so.1 for C programs)"
bash cabi/build.sh
(cd cabi && go vet ./... && go test -count=1 -timeout 10m ./...)

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
begin "fuzz smoke (the wait for it; it ran in the background)"
rc=0
wait "$fuzz_pid" || rc=$?
pid=$fuzz_pid fuzz_pid=
cat "$fuzz_log"
fuzz_secs=$(($(date +%s) - fuzz_t0))
[ "$rc" = 0 ] || { echo "fuzz smoke: failed (pid $pid, exit $rc)"; exit 1; }

# A short bench set, each engine benchmark beside its raw-UDP baseline from the same
# process, with the CPU per packet, the machine's idle share and the system calls per
# 1000 packets (bench/README.md). It never fails on a timing: the machines are shared.
# It fails if a benchmark errors or allocates per packet (GOROCE_BENCH_STRICT).
# Each name is anchored: go test takes the first alternative that matches a
# benchmark's name so far, so an unanchored RawUDP/gso/... ran RawUDPPingPong only
# to look for a gso sub-benchmark, and RCSendQPs/... ran RCSendQPsNoGSO and
# RCSendQPsOnePort too.
begin "bench (short set: ratios and CPU per packet)"
GOROCE_BENCH_STRICT=1 go test -run '^$' -timeout 10m -count 1 -benchtime "${BENCHTIME:-1s}" \
  -bench 'RCWrite$/^1MiB$|RCSend$/^4KiB$|RCPingPong$|RCSendQPs$/^(1|4096)$|RawUDP$/^gso$/^4112B$|RawUDPPingPong$' ./bench
end_stage ""
echo "== all stages passed"

#!/usr/bin/env bash
# interop/run.sh - the interop stage of scripts/test.sh: goroce against real Linux rxe.
#
# Installs what it needs with apt (qemu-system-x86, tcpdump, gcc; the guests' .debs with
# apt-get download, the host's own suite from its apt lists and any other from a private
# apt state), builds one guest image per suite in GOROCE_LAB_DISTS (cached in interop/cache
# and interop/out), boots two rxe guests per suite in netns goroce-lab, runs the Go interop
# tests against every lane at once with GOROCE_INTEROP=1, and always tears the lab down: on
# success, failure, timeout or interrupt.
#
# It fails, with the reason, when the lab cannot run (not root, no qemu, no network
# namespaces). Outside CI (CI unset) and when not root it prints SKIP and exits 0 instead,
# so a developer's `scripts/test.sh` still works without privileges.
#
# Env: GOROCE_INTEROP_RUN=REGEXP passes -run to go test; GOROCE_INTEROP_TIMEOUT (default
# 1800 s) bounds the Go tests of each lane: a hang guard, twice what a lane took on a
# heavily loaded 2-core host (TestPerftest alone ran 10.5 min there, where it takes 3.6–4 on a
# quiet one); GOROCE_INTEROP_KEEP=1 leaves the lab up
# afterwards; GOROCE_LAB_DISTS="bookworm" (say) runs one lane only.
#
#   interop/run.sh           all of it
#   interop/run.sh prepare   apt, images and the guests' boot only, leaving the lab up
#                            (scripts/test.sh runs it in the background, beside the
#                            stages that need no lab)
#   interop/run.sh tests     the tests on a lab `prepare` left up, then the teardown
set -euo pipefail
HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
ROOT=$(dirname "$HERE")
T0=$(date +%s)
mode=${1:-all}
case $mode in all | prepare | tests) ;; *) echo "usage: interop/run.sh [prepare|tests]" >&2; exit 2 ;; esac
reruns= # the second runs the stage needed, for its last line
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
  if [ "$mode" = prepare ] && [ "$rc" = 0 ]; then
    log "prepared: lab up for interop/run.sh tests"
    exit 0
  fi
  if [ "${GOROCE_INTEROP_KEEP:-}" = 1 ]; then
    log "GOROCE_INTEROP_KEEP=1: lab left up (interop/lab down)"
  else
    "$HERE/lab" down || true
  fi
  log "done (exit $rc${reruns:+; $reruns})"
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
  local p
  for p in $step_pid; do kill -TERM -- "-$p" 2>/dev/null || true; done
  sleep 1
  for p in $step_pid; do kill -KILL -- "-$p" 2>/dev/null || true; done
  exit 130
}
trap on_signal INT TERM

if [ "$mode" != tests ]; then
# apt lists: refreshed once per run on a fresh machine, and when older than a day.
stamp=/var/lib/apt/lists/partial/.goroce-updated
if [ -z "$(find "$stamp" -mmin -1440 2>/dev/null)" ] ||
  ! apt-cache show --no-all-versions busybox-static >/dev/null 2>&1; then
  log "apt-get update"
  step timeout 300 apt-get update -q >/dev/null || fail "apt-get update failed"
  touch "$stamp" 2>/dev/null || true
fi

. "$HERE/lab.conf"
dists=($GOROCE_LAB_DISTS)
log "build the guest images (${dists[*]})"
step timeout 900 "$HERE/lab" build || fail "guest image build failed (see above)"
"$HERE/lab" down >/dev/null 2>&1 || true # a lab left over from an interrupted run
log "boot 2 guests per lane"
GOROCE_LAB_BUILT=1 step timeout 300 "$HERE/lab" up 2 || fail "the lab did not come up (see above)"
fi
[ "$mode" = prepare ] && exit 0
. "$HERE/lab.conf"
dists=($GOROCE_LAB_DISTS)

cd "$ROOT"
RUN=$HERE/run
for cmd in roce-pingpong roce-perftest rping-go roced; do
  log "build cmd/$cmd"
  step go build -o "$RUN/$cmd" "./cmd/$cmd" || fail "go build ./cmd/$cmd failed"
done
# goroce's libibverbs and librdmacm, which the TestCABI* rows run Debian's own binaries on:
# built once here, not by each lane at the same time.
log "build cabi (libibverbs.so.1, librdmacm.so.1) and install the stock tools it runs"
pkgs=()
for p in libibverbs-dev librdmacm-dev ibverbs-utils perftest rdmacm-utils; do
  dpkg -s "$p" >/dev/null 2>&1 || pkgs+=("$p")
done
if [ ${#pkgs[@]} -gt 0 ]; then
  step env DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends "${pkgs[@]}" >/dev/null ||
    fail "apt-get install ${pkgs[*]} failed"
fi
step bash "$ROOT/cabi/build.sh" || fail "cabi/build.sh failed"
export GOROCE_CABI=$ROOT/cabi
log "build the test binaries"
step go test -c -o "$RUN/interop.test" ./interop || fail "go test -c ./interop failed"
step go test -c -o "$RUN/roced.test" ./cmd/roced || fail "go test -c ./cmd/roced failed"

# One lane per guest generation, all at once: the lanes share nothing but the netns (own
# bridge, host address, guests and TCP ports), and each runs the whole suite against its
# generation. A lane's output goes to run/DIST/go-test.log and, prefixed with the
# generation, to ours.
export GOROCE_INTEROP=1 GOROCE_PINGPONG=$RUN/roce-pingpong GOROCE_RPING=$RUN/rping-go
export GOROCE_ROCED=$RUN/roced GOROCE_PERFTEST=$RUN/roce-perftest
args=(-test.count=1 -test.v -test.timeout "${GOROCE_INTEROP_TIMEOUT:-1800}s")
[ -n "${GOROCE_INTEROP_RUN:-}" ] && args+=(-test.run "$GOROCE_INTEROP_RUN")
roced=
if [ -z "${GOROCE_INTEROP_RUN:-}" ] || [[ TestRxePingpong =~ $GOROCE_INTEROP_RUN ]]; then roced=1; fi
lane() {
  set +e # a job of its own: a failed test must not end it before it reports
  local dist=$1 dir=$RUN/$1 gen t0 rc=0
  gen=$(. "$dir/lab.env" && echo "$GOROCE_LAB_KERNEL" | cut -d. -f1,2)
  export GOROCE_LAB_ENV=$dir/lab.env GOROCE_INTEROP_RESULTS=$dir/results.tsv
  rm -rf "$GOROCE_INTEROP_RESULTS" "$dir/pcap" "$dir/go-test.log"
  t0=$(date +%s)
  (cd "$HERE" && "$RUN/interop.test" "${args[@]}") 2>&1 | tee -a "$dir/go-test.log" | sed -u "s/^/[$gen] /"
  rc=${PIPESTATUS[0]}
  # cmd/roced's own lab tests (TestRxe*: stock tools against the daemon).
  if [ -n "$roced" ]; then
    (cd "$ROOT/cmd/roced" && "$RUN/roced.test" -test.count=1 -test.v -test.timeout "${GOROCE_INTEROP_TIMEOUT:-1800}s" \
      -test.run '^TestRxe') 2>&1 | tee -a "$dir/go-test.log" | sed -u "s/^/[$gen] /"
    [ "${PIPESTATUS[0]}" = 0 ] || rc=1
  fi
  echo "$gen $dist $(($(date +%s) - t0))" >"$dir/lane.done"
  return "$rc"
}
# run_lanes DIST...: runs the lanes at once and waits for them; failed=(the lanes that failed).
# set -m: each lane is a job of its own, so on_signal can end its whole process group.
run_lanes() {
  local d i pids=()
  set -m
  for d in "$@"; do
    rm -f "$RUN/$d/lane.done"
    log "lane $d: go test ./interop/... ./cmd/roced (TestRxe*)"
    lane "$d" &
    pids+=($!)
  done
  set +m
  step_pid="${pids[*]}"
  failed=()
  for i in "${!pids[@]}"; do
    if ! wait "${pids[$i]}"; then failed+=("${@:$((i + 1)):1}"); log "lane ${*:$((i + 1)):1} FAILED"; fi
  done
  step_pid=
}

# digest DIST SUFFIX: why the run of lane DIST whose files end in SUFFIX failed: the first
# failed tests, the output of the first of them, and the lane's guests afterwards
# (run/DIST/health$SUFFIX.txt). A report, never a verdict: its pipelines stop reading early
# (head, awk's exit), and a writer that gets SIGPIPE for it must not end the script (ci61: a
# lane whose rerun passed failed the stage with exit 141 while its first run was reported).
digest() {
  local -
  set +e +o pipefail
  local d=$1 sfx=$2 log=$RUN/$1/go-test$2.log res=$RUN/$1/results$2.tsv leaf top own
  echo "== lane $d${sfx:+ (its first run)} failed: $(grep -c $'\tFAIL\t' "$res" 2>/dev/null || true) of" \
    "$(wc -l <"$res" 2>/dev/null || echo 0) rows FAIL; the first failed tests:"
  grep -E -m 8 -- '--- FAIL' "$log" | sed 's/^ */    /'
  # The first failed leaf test (-v prints a parent's --- FAIL before its subtests' lines) and
  # its own output, from its === RUN line to the next test's.
  leaf=$(grep -oE -- '--- FAIL: [^ ]+' "$log" | awk '{print $3}' |
    awk 'NR > 1 && index($0, prev "/") != 1 { print prev; exit } { prev = $0 } END { if (NR == 1) print prev }' | head -1)
  if [ -n "$leaf" ]; then
    echo "== lane $d: the output of $leaf, its first failed test ($(basename "$log")):"
    awk -v t="$leaf" '$0 ~ /^=== (RUN|CONT|PAUSE|NAME) / { on = ($3 == t) } on' "$log" | head -n 24 | cut -c1-200 |
      sed 's/^/    /'
    # Its top-level test's own lines too: a parent that failed on its own (a wait that ended
    # the run) fails its subtests with it, and says why only there.
    top=${leaf%%/*}
    own=$(awk -v t="$top" '$0 ~ /^=== (RUN|CONT|PAUSE|NAME) / { on = ($3 == t) } on' "$log" | grep -v '^=== ' |
      head -n 12 | cut -c1-200)
    if [ "$top" != "$leaf" ] && [ -n "$own" ]; then
      echo "== lane $d: the lines of $top itself:"
      echo "$own" | sed 's/^/    /'
    fi
  fi
  echo "== lane $d: its guests after the run:"
  sed 's/^/    /' "$RUN/$d/health$sfx.txt" 2>/dev/null
  # A kernel fault's first lines say what faulted (the health report has the console's tail).
  local c
  for c in "$RUN/$d"/*.console$sfx.log; do
    [ -e "$c" ] || continue
    own=$(grep -n -m 1 -E 'BUG:|Oops|general protection|Kernel panic|WARNING:|Call Trace' "$c" | cut -d: -f1)
    [ -n "$own" ] || continue
    echo "== lane $d: the first kernel fault on $(basename "$c") (line $own):"
    tail -n +"$own" "$c" | head -n 40 | cut -c1-200 | sed 's/^/    /'
  done
}

for d in "${dists[@]}"; do rm -f "$RUN/$d/go-test.1.log" "$RUN/$d/results.1.tsv" "$RUN/$d/health.1.txt" "$RUN/$d"/*.console.1.log; done
run_lanes "${dists[@]}"
# A lane whose guest died (its qemu gone, no answer, its rxe port down, or a kernel oops on
# its console) fails every row after that, rxe's own rows with ours. Such a lane is booted
# again and run once more; its first run's log, results and the guests' state are kept as
# run/DIST/*.1.* and summed up below, so a crash that repeats still fails the stage.
again=()
for d in "${failed[@]}"; do
  if ! "$HERE/lab" health "$d" >"$RUN/$d/health.1.txt" 2>&1; then again+=("$d"); fi
  cp "$RUN/$d/health.1.txt" "$RUN/$d/health.txt"
done
if [ ${#again[@]} -gt 0 ]; then
  firstfailed=("${failed[@]}")
  log "lane(s) ${again[*]}: a guest died or its rxe is down; rebooting the lane and running it once more"
  for d in "${again[@]}"; do
    mv "$RUN/$d/go-test.log" "$RUN/$d/go-test.1.log"
    mv "$RUN/$d/results.tsv" "$RUN/$d/results.1.tsv" 2>/dev/null || true
    # The reboot starts the consoles afresh: keep the ones that saw the guest die.
    for c in "$RUN/$d"/*.console.log; do [ -e "$c" ] && cp "$c" "${c%.log}.1.log"; done
    step "$HERE/lab" reboot "$d" || fail "lane $d: the reboot failed"
  done
  run_lanes "${again[@]}"
  for d in "${firstfailed[@]}"; do
    [[ " ${again[*]} " == *" $d "* ]] || failed+=("$d")
  done
  for d in "${failed[@]}"; do "$HERE/lab" health "$d" >"$RUN/$d/health.txt" 2>&1 || true; done
fi
rc=0
[ ${#failed[@]} -eq 0 ] || rc=1
for d in "${dists[@]}"; do
  read -r gen dist secs <"$RUN/$d/lane.done" 2>/dev/null || { gen=? secs=?; }
  log "lane $d (kernel $gen): ${secs}s"
  if [ -s "$RUN/$d/results.tsv" ]; then
    echo "== interop results, kernel $gen ($d): tool, direction, transport, options, verdict, usec/iter, rxe hw_counters | goroce counters"
    column -t -s $'\t' "$RUN/$d/results.tsv" 2>/dev/null || cat "$RUN/$d/results.tsv"
  fi
done
# Why a lane failed goes last, where a CI log cut to its tail still shows it.
for d in "${again[@]}"; do digest "$d" .1 || true; done
for d in "${failed[@]}"; do digest "$d" "" || true; done
# The second runs this stage needed, in its last line: a lane rebooted after a guest died,
# and a case run again after rxe's event stall (stall_test.go; each says so in its log).
stalls=0
for d in "${dists[@]}"; do
  for f in "$RUN/$d/go-test.1.log" "$RUN/$d/go-test.log"; do
    [ -f "$f" ] && stalls=$((stalls + $(grep -c 'running the case again' "$f" || true)))
  done
done
reruns="reruns: ${#again[@]} lane(s) after a guest died${again[*]:+ (${again[*]})}, $stalls case(s) after rxe's event stall"
[ "$rc" = 0 ] || fail "interop tests failed; $reruns (logs: interop/run/DIST/go-test.log, captures of failed runs: interop/run/DIST/pcap/)"
[ ${#again[@]} -eq 0 ] || log "PASS on the second run of lane(s) ${again[*]}, after a guest died in the first (above)"
log "PASS; $reruns"

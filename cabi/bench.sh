#!/usr/bin/env bash
# Unmodified perftest on goroce's libibverbs.so.1 beside goroce's own roce-perftest, on one
# host, in the same minutes: each round runs every test with both tools, server and client
# on two loopback addresses. It prints per run the result (BW average in MB/s, or t_typical
# in µs), CPU per message (user and system µs of both processes, divided by the messages),
# and at the end the median of each test and tool with the ratio stock/ours.
#
# The CPU per message is given twice: for the whole run, and for the data path alone. The
# second subtracts what a run of 5 messages costs, each round: a process's fixed costs
# (perftest calibrates its cycle counter by calling gettimeofday for a while, both Go
# runtimes start, the devices open) are not a per-message cost of the library.
#
#   bash cabi/bench.sh [ROUNDS]       (3 by default; cabi/build.sh must have run)
set -euo pipefail
cd "$(dirname "$0")"
rounds=${1:-3}
lib=$PWD/lib
[ -f "$lib/libibverbs.so.1" ] || { echo "cabi/bench.sh: run bash cabi/build.sh first" >&2; exit 1; }
for t in ib_write_bw ib_send_bw ib_send_lat; do
  command -v "$t" >/dev/null || { echo "cabi/bench.sh: $t missing: apt-get install perftest" >&2; exit 1; }
done
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
(cd .. && go build -o "$tmp/roce-perftest" ./cmd/roce-perftest)

tests=("write_bw -s 1048576 -n 2000" "send_bw -s 4096 -n 50000" "send_lat -s 64 -n 20000")
port=28700

# cpu_us FILE: user+system seconds of the `times` line a shell printed for its children, in µs.
cpu_us() {
  tail -1 "$1" | awk '{ s = 0; for (i = 1; i <= 2; i++) { split($i, a, /[ms]/); s += a[1] * 60 + a[2] }; printf "%.0f", s * 1e6 }'
}

# run TOOL TEST: one server and client pair; prints "value cpu_us messages".
run() {
  local tool=$1 test=$2 name=${2%% *} args=${2#* }
  port=$((port + 1))
  local srv cli
  if [ "$tool" = stock ]; then
    srv="env LD_LIBRARY_PATH=$lib GOROCE_DEVICES=127.0.0.61 ib_$name -d goroce0 -x 1 -F -p $port $args"
    cli="env LD_LIBRARY_PATH=$lib GOROCE_DEVICES=127.0.0.62 ib_$name -d goroce0 -x 1 -F -p $port $args 127.0.0.1"
  else
    srv="$tmp/roce-perftest $name -d 127.0.0.63 -x 1 -F -p $port $args"
    cli="$tmp/roce-perftest $name -d 127.0.0.64 -x 1 -F -p $port $args 127.0.0.1"
  fi
  bash -c "timeout 120 $srv > $tmp/srv.out 2>&1; times > $tmp/srv.times" &
  local spid=$! i
  for i in $(seq 50); do
    bash -c "timeout 120 $cli > $tmp/cli.out 2>&1; rc=\$?; times > $tmp/cli.times; exit \$rc" && break
    grep -q 'Unable to init the socket connection\|couldn.t connect' "$tmp/cli.out" || break
    sleep 0.2
  done
  wait "$spid" || true
  local row msgs value
  row=$(grep -A1 '#bytes' "$tmp/cli.out" | tail -1)
  msgs=$(echo "$row" | awk '{print $2}')
  case $name in
    *_lat) value=$(echo "$row" | awk '{print $5}') ;; # t_typical
    *) value=$(echo "$row" | awk '{print $4}') ;;     # BW average
  esac
  [ -n "$value" ] || { echo "cabi/bench.sh: $tool $test printed no result:" >&2; cat "$tmp/cli.out" "$tmp/srv.out" >&2; exit 1; }
  echo "$value $(( $(cpu_us "$tmp/srv.times") + $(cpu_us "$tmp/cli.times") )) $msgs"
}

printf '%-28s %-6s %12s %14s %16s\n' test tool result "cpu µs/msg" "data path µs/msg"
for r in $(seq "$rounds"); do
  for test in "${tests[@]}"; do
    for tool in stock ours; do
      read -r value cpu msgs < <(run "$tool" "$test")
      read -r _ cpu0 msgs0 < <(run "$tool" "$(echo "$test" | sed 's/-n [0-9]*/-n 5/')")
      printf '%-28s %-6s %12s %14.2f %16.2f\n' "$test" "$tool" "$value" \
        "$(echo "$cpu $msgs" | awk '{print $1 / $2}')" "$(echo "$cpu $msgs $cpu0 $msgs0" | awk '{print ($1 - $3) / ($2 - $4)}')"
      echo "$test|$tool|$value" >> "$tmp/all"
    done
  done
done
echo
echo "medians over $rounds rounds (stock perftest on goroce's libibverbs / roce-perftest):"
for test in "${tests[@]}"; do
  s=$(grep -F "$test|stock|" "$tmp/all" | cut -d'|' -f3 | sort -n | awk '{a[NR]=$1} END {print a[int((NR+1)/2)]}')
  o=$(grep -F "$test|ours|" "$tmp/all" | cut -d'|' -f3 | sort -n | awk '{a[NR]=$1} END {print a[int((NR+1)/2)]}')
  case $test in
    *_lat*) printf '  %-28s stock %8s µs  ours %8s µs  difference %+.2f µs\n' "$test" "$s" "$o" "$(echo "$s $o" | awk '{print $1 - $2}')" ;;
    *) printf '  %-28s stock %8s MB/s  ours %8s MB/s  ratio %.0f%%\n' "$test" "$s" "$o" "$(echo "$s $o" | awk '{print 100 * $1 / $2}')" ;;
  esac
done

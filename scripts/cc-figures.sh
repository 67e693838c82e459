#!/usr/bin/env bash
# scripts/cc-figures.sh - regenerate docs/cc/*.png: goroce RC flows through the simulated
# bottleneck (internal/testsupport/ccsim, virtual time), congestion control on and off, 2 and 8 flows.
# Each figure has the throughput of every flow through the bottleneck (top) and the
# bottleneck queue depth (bottom) over time. The runs are the acceptance tests themselves
# (go test ./internal/testsupport/ccsim -run TestCongestionControl), which write their samples as CSV.
# Needs gnuplot (apt-get install gnuplot-nox, done here as root if it is missing).
set -euo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$ROOT"
if ! command -v gnuplot >/dev/null; then
  [ "$(id -u)" = 0 ] || { echo "cc-figures: gnuplot missing (apt-get install gnuplot-nox)" >&2; exit 1; }
  DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends gnuplot-nox >&2
fi
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
go test -count=1 -run 'TestCongestionControl' ./internal/testsupport/ccsim -v -args -ccsim.csv "$tmp" | grep -E '^(=== RUN|---|\s+ccsim_test)' || true
mkdir -p docs/cc
for csv in "$tmp"/*.csv; do
  name=$(basename "$csv" .csv)
  flows=$(head -1 "$csv" | tr ',' '\n' | grep -c '^flow')
  case $name in
    cc-on-*) title="DCQCN on: $flows goroce RC flows into one 40 Gb/s port (RED 5-150 KB, 1 MiB buffer)" ;;
    *) title="Congestion control off: $flows goroce RC flows into one 40 Gb/s port (1 MiB buffer)" ;;
  esac
  gnuplot -e "in='$csv'; out='docs/cc/$name.png'; title='$title'; flows=$flows; buffer_kb=1048.576" scripts/cc-figure.gp
  echo "cc-figures: docs/cc/$name.png"
done

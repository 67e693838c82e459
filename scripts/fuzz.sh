#!/usr/bin/env bash
# A short fuzz smoke of every fuzz target in the main module (scripts/test.sh runs it in
# the background, niced, beside the stages that leave CPU idle). FUZZTIME (e.g. 30s or
# 1000000x) overrides every budget: FUZZTIME=10m scripts/fuzz.sh fuzzes in earnest.
#
# Budgets are counts of executions, not durations: a duration -fuzztime races the fuzz
# coordinator's deadline against its workers and can fail a target with a bare "context
# deadline exceeded" on a loaded machine (golang/go#75804, unfixed in Go 1.26). A count
# has no deadline, so a failure here is a real crasher (written to testdata/fuzz, where
# it replays as a seed in every go test). The counts aim at a few seconds per target on
# 2 cores.
set -euo pipefail
cd "$(dirname "$0")/.."

budget() { # package target
  if [ -n "${FUZZTIME:-}" ]; then echo "$FUZZTIME"; return; fi
  case "$1 $2" in
    */transport\ Fuzz*Responder | */cmd/roced\ *) echo 10000x ;;
    */cq\ * | */srq\ *) echo 40000x ;;
    *) echo 100000x ;;
  esac
}

# The targets are found in the sources: listing them through go test would build every
# package's test binary once more.
n=0 t0=$(date +%s)
for dir in $(git ls-files '*_test.go' | grep -v '^cabi/' | xargs grep -l '^func Fuzz' | xargs -n1 dirname | sort -u); do
  pkg=./$dir
  for fz in $(grep -h '^func Fuzz' "$dir"/*_test.go | sed 's/^func \(Fuzz[A-Za-z0-9_]*\).*/\1/'); do
    b=$(budget "$pkg" "$fz")
    echo "-- $pkg $fz ($b)"
    go test -run '^$' -fuzz "^${fz}\$" -fuzztime "$b" "$pkg"
    n=$((n + 1))
  done
done
echo "fuzz smoke: $n targets passed in $(($(date +%s) - t0)) s"

#!/usr/bin/env bash
# The project's test command (README "Run the tests"). CI runs exactly this.
# Stages: gofmt, go vet, go test -race, a short fuzz smoke of every fuzz target,
# then the interop suite against real Linux rxe in a QEMU VM (interop/), when present.
set -euo pipefail
cd "$(dirname "$0")/.."
export GOFLAGS=${GOFLAGS:-}
FUZZTIME=${FUZZTIME:-5s}

echo "== gofmt"
bad=$(gofmt -l $(git ls-files '*.go' 2>/dev/null || find . -name '*.go'))
if [ -n "$bad" ]; then echo "gofmt would change:"; echo "$bad"; exit 1; fi

echo "== go vet"
go vet ./...

# The roced end-to-end tests drive a real Prometheus server and promtool (Debian's
# prometheus package); install them when we can (root with apt), as CI does.
if [ "$(id -u)" = 0 ] || [ "${CI:-}" = true ]; then
  echo "== install prometheus (cmd/roced end-to-end tests)"
  bash cmd/roced/testdata/install-prometheus.sh
  # tshark checks that Wireshark decodes our captures as InfiniBand (roce capture test).
  if ! command -v tshark >/dev/null; then
    echo "== install tshark"
    DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends tshark >/dev/null ||
      { apt-get update -q >/dev/null && DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends tshark >/dev/null; }
  fi
fi

echo "== go test -race"
go test -race -count=1 -timeout 20m ./...

echo "== fuzz smoke ($FUZZTIME per target)"
for pkg in $(go list ./...); do
  for fz in $(go test -list '^Fuzz' "$pkg" 2>/dev/null | grep '^Fuzz' || true); do
    echo "-- $pkg $fz"
    # A real crasher is written to testdata/fuzz and replays as a seed, so a second
    # attempt fails again; only an infrastructure hiccup (a starved fuzz worker on a
    # loaded machine) passes on the retry.
    go test -run '^$' -fuzz "^${fz}\$" -fuzztime "$FUZZTIME" "$pkg" ||
      { echo "-- retry $fz once"; go test -run '^$' -fuzz "^${fz}\$" -fuzztime "$FUZZTIME" "$pkg"; }
  done
done

if [ -x interop/run.sh ]; then
  echo "== interop (real rxe in QEMU)"
  interop/run.sh
fi
echo "== all stages passed"

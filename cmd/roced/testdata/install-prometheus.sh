#!/usr/bin/env bash
# Installs the Prometheus server and promtool (Debian package `prometheus`) for the
# cmd/roced end-to-end tests, when they are missing. Idempotent; needs root and apt.
# The tests start their own prometheus process on 127.0.0.1 with a temporary config and
# data directory; the package's system service is not used (and is stopped and
# disabled here if the install started it, so it does not hold 127.0.0.1:9090).
set -euo pipefail
if command -v prometheus >/dev/null && command -v promtool >/dev/null; then
  exit 0
fi
if ! command -v apt-get >/dev/null; then
  echo "install-prometheus.sh: apt-get not found; install prometheus and promtool by hand" >&2
  exit 1
fi
export DEBIAN_FRONTEND=noninteractive
apt-get update -qq
apt-get install -y -qq --no-install-recommends prometheus >/dev/null
if command -v systemctl >/dev/null && systemctl is-active --quiet prometheus 2>/dev/null; then
  systemctl disable --now prometheus || true
fi
command -v prometheus >/dev/null && command -v promtool >/dev/null

#!/usr/bin/env bash
# The metrics test lints /metrics with promtool, from Debian's prometheus package.
set -euo pipefail
if command -v promtool >/dev/null 2>&1; then
  exit 0
fi
if [ "$(id -u)" = "0" ] && command -v apt-get >/dev/null; then
  echo "installing Debian's prometheus (for promtool) for the metrics lint test"
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq >/dev/null || true
  apt-get install -y -qq --no-install-recommends prometheus >/dev/null
else
  echo "promtool is missing: install Debian's 'prometheus' package (sudo apt-get install prometheus)" >&2
  exit 1
fi

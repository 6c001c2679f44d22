#!/usr/bin/env bash
# Browser tests drive Debian's Chromium through Playwright (never a downloaded build).
set -euo pipefail
if command -v chromium >/dev/null 2>&1; then
  exit 0
fi
if [ "$(id -u)" = "0" ] && command -v apt-get >/dev/null; then
  echo "installing Debian's chromium for the browser tests"
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq >/dev/null || true
  apt-get install -y -qq chromium >/dev/null
else
  echo "chromium is missing: install Debian's 'chromium' package (sudo apt-get install chromium)" >&2
  exit 1
fi

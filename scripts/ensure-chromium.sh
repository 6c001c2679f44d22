#!/usr/bin/env bash
# Browser tests drive Debian's Chromium through Playwright (never a downloaded build).
exec "$(dirname "$0")/ensure-debian-package.sh" chromium chromium "the browser tests"

#!/usr/bin/env bash
# The metrics test lints /metrics with promtool, from Debian's prometheus package.
exec "$(dirname "$0")/ensure-debian-package.sh" promtool prometheus "the metrics lint test"

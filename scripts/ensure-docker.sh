#!/usr/bin/env bash
# The Docker runtime's tests run real containers: Debian's docker.io (dockerd; the tests start
# a private daemon when none answers, tests/dockerd.py) and busybox-static (the test image is
# a static busybox imported with no registry). Without them those tests are skipped, naming why.
set -euo pipefail
here="$(dirname "$0")"
"$here/ensure-debian-package.sh" --optional dockerd docker.io "the Docker runtime tests"
exec "$here/ensure-debian-package.sh" --optional - busybox-static "the Docker runtime tests"

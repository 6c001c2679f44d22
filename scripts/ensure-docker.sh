#!/usr/bin/env bash
# The Docker runtime's tests run real containers: Debian's docker.io (dockerd; the tests start
# a private daemon when none answers, tests/dockerd.py) and busybox-static (the test image is
# a static busybox imported with no registry). Without them those tests are skipped, naming why.
set -euo pipefail
missing=()
command -v dockerd >/dev/null 2>&1 || missing+=(docker.io)
dpkg -s busybox-static >/dev/null 2>&1 || missing+=(busybox-static)
if [ ${#missing[@]} -eq 0 ]; then
  exit 0
fi
if [ "$(id -u)" = "0" ] && command -v apt-get >/dev/null; then
  echo "installing Debian's ${missing[*]} for the Docker runtime tests"
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq >/dev/null || true
  apt-get install -y -qq "${missing[@]}" >/dev/null
else
  echo "note: ${missing[*]} missing (sudo apt-get install ${missing[*]}): the Docker runtime tests will be skipped" >&2
fi

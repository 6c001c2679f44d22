#!/usr/bin/env bash
# ensure-debian-package.sh [--optional] COMMAND PACKAGE WHAT: install Debian's PACKAGE if
# COMMAND is missing (as root, with apt-get), else say how to and fail. COMMAND `-`: check
# that PACKAGE itself is installed (dpkg -s), for a package whose command another also
# provides. --optional: when it cannot install, only say so (those tests skip, naming why).
# The tests use Debian's builds, never downloads.
set -euo pipefail
optional=0
if [ "${1:-}" = "--optional" ]; then
  optional=1
  shift
fi
command="$1" package="$2" what="$3"
if [ "$command" = "-" ]; then
  dpkg -s "$package" >/dev/null 2>&1 && exit 0
elif command -v "$command" >/dev/null 2>&1; then
  exit 0
fi
if [ "$(id -u)" = "0" ] && command -v apt-get >/dev/null; then
  echo "installing Debian's $package for $what"
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq >/dev/null || true
  apt-get install -y -qq "$package" >/dev/null
elif [ "$optional" = 1 ]; then
  echo "note: $package missing (sudo apt-get install $package): $what will be skipped" >&2
else
  echo "${command/#-/$package} is missing: install Debian's '$package' package (sudo apt-get install $package)" >&2
  exit 1
fi

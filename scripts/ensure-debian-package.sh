#!/usr/bin/env bash
# ensure-debian-package.sh COMMAND PACKAGE WHAT: install Debian's PACKAGE if COMMAND is missing
# (as root, with apt-get), else say how to. The tests use Debian's builds, never downloads.
set -euo pipefail
command="$1" package="$2" what="$3"
if command -v "$command" >/dev/null 2>&1; then
  exit 0
fi
if [ "$(id -u)" = "0" ] && command -v apt-get >/dev/null; then
  echo "installing Debian's $package for $what"
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq >/dev/null || true
  apt-get install -y -qq "$package" >/dev/null
else
  echo "$command is missing: install Debian's '$package' package (sudo apt-get install $package)" >&2
  exit 1
fi

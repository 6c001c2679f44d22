#!/usr/bin/env bash
# The SSO tests start a real slapd (Debian's slapd, ldap-utils) and a real OpenID Connect
# provider (the npm package oidc-provider, pinned in package.json, run by node).
set -euo pipefail
cd "$(dirname "$0")/.."
if ! command -v slapd >/dev/null 2>&1 && [ ! -x /usr/sbin/slapd ]; then
  if [ "$(id -u)" = "0" ] && command -v apt-get >/dev/null; then
    echo "installing Debian's slapd and ldap-utils for the LDAP tests"
    export DEBIAN_FRONTEND=noninteractive
    apt-get update -qq >/dev/null || true
    apt-get install -y -qq slapd ldap-utils >/dev/null
  else
    echo "slapd is missing: sudo apt-get install slapd ldap-utils" >&2
    exit 1
  fi
fi
if ! command -v node >/dev/null 2>&1; then
  if [ "$(id -u)" = "0" ] && command -v apt-get >/dev/null; then
    echo "installing Debian's nodejs and npm for the OpenID Connect provider"
    export DEBIAN_FRONTEND=noninteractive
    apt-get install -y -qq nodejs npm >/dev/null
  else
    echo "node is missing: sudo apt-get install nodejs npm" >&2
    exit 1
  fi
fi
if [ ! -f node_modules/oidc-provider/package.json ]; then
  echo "installing oidc-provider from package.json"
  npm ci --no-audit --no-fund --ignore-scripts >/dev/null
fi

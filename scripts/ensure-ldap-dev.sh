#!/usr/bin/env bash
# python-ldap (for django-auth-ldap) builds against OpenLDAP's and Cyrus SASL's headers.
set -euo pipefail
if [ -e /usr/include/ldap.h ] && [ -e /usr/include/sasl/sasl.h ]; then
  exit 0
fi
if [ "$(id -u)" = "0" ] && command -v apt-get >/dev/null; then
  echo "installing libldap2-dev and libsasl2-dev to build python-ldap"
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq >/dev/null || true
  apt-get install -y -qq libldap2-dev libsasl2-dev >/dev/null
else
  echo "python-ldap needs OpenLDAP and SASL headers: sudo apt-get install libldap2-dev libsasl2-dev" >&2
  exit 1
fi

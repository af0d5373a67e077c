#!/usr/bin/env bash
# Installs everything the README's commands need on a fresh machine; cheap to run again.
#  - as root on Debian/Ubuntu: etcd-server and the RDMA/NUMA libraries the Mooncake wheel links
#  - a virtualenv (.venv, or $MC_VENV) with this package, its test tools and Mooncake 0.3.13
set -euo pipefail
cd "$(dirname "$0")/.."
VENV=${MC_VENV:-.venv}
PYTHON=${PYTHON:-python3}

missing=()
if ! command -v etcd >/dev/null 2>&1 && [ ! -x /usr/bin/etcd ]; then missing+=(etcd-server); fi
# the network-namespace lab (pytest_mooncake/lab): an sshd per node, the nodes' firewall tools
for pair in /usr/sbin/sshd:openssh-server /usr/sbin/nft:nftables /usr/sbin/iptables:iptables; do
  if [ ! -x "${pair%%:*}" ]; then missing+=("${pair##*:}"); fi
done
for pair in libibverbs.so.1:libibverbs1 librdmacm.so.1:librdmacm1 libnuma.so.1:libnuma1; do
  if ! ldconfig -p 2>/dev/null | grep -q "${pair%%:*}"; then missing+=("${pair##*:}"); fi
done
if [ ${#missing[@]} -gt 0 ]; then
  if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
    echo "setup: apt-get install ${missing[*]}"
    apt-get update -qq
    # never let a package start its service (openssh-server would listen on every address)
    own_policy=0
    if [ ! -e /usr/sbin/policy-rc.d ]; then
      printf '#!/bin/sh\nexit 101\n' > /usr/sbin/policy-rc.d && chmod +x /usr/sbin/policy-rc.d
      own_policy=1
    fi
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${missing[@]}" >/dev/null
    if [ "$own_policy" = 1 ]; then rm -f /usr/sbin/policy-rc.d; fi
  else
    echo "setup: warning: missing ${missing[*]}; install them (e.g. sudo apt-get install -y ${missing[*]})" >&2
  fi
fi

if [ ! -x "$VENV/bin/python" ]; then
  echo "setup: creating virtualenv $VENV"
  "$PYTHON" -m venv "$VENV"
fi
stamp="$VENV/.pytest-mooncake-installed"
want=$(cat pyproject.toml | sha256sum | cut -c1-16)
if [ ! -f "$stamp" ] || [ "$(cat "$stamp")" != "$want" ]; then
  echo "setup: installing pytest-mooncake[dev,mooncake] into $VENV"
  "$VENV/bin/python" -m pip install -q --upgrade pip >/dev/null
  "$VENV/bin/python" -m pip install -q -e ".[dev,mooncake]"
  echo "$want" > "$stamp"
fi

#!/usr/bin/env bash
# Installs everything the README's commands need on a fresh machine; cheap to run again.
#  - as root on Debian/Ubuntu: etcd-server, redis-server, a C compiler (the CUDA driver stand-in
#    is built with it), the lab's sshd/nft/iptables, podman + runc + debootstrap (the docker
#    target's engine and the Mooncake images built here; without them that target is n/a with the
#    reason) and the RDMA/NUMA libraries the Mooncake wheel links, only those that are missing,
#    waiting for a dpkg lock another apt run holds
#  - gcc + rdma-core's headers (libibverbs-dev) for the emulated libibverbs the plugin builds,
#    and rdma-core's pyverbs (python3-pyverbs) for the reference engine's pyverbs backend
#  - a virtualenv (.venv, or $MC_VENV) with this package, its test tools and Mooncake 0.3.13
#  - the cached environments of the Mooncake releases the tests use by version
#    ($MC_SETUP_RELEASES, default "0.3.10.post2 0.3.11.post1 0.3.12.post1 0.3.13.post1 0.3.14":
#    CI's fast subset runs on 0.3.13.post1 and 0.3.14, the harness-fault tests also start
#    0.3.11.post1 and 0.3.12.post1, the emulated-RDMA tests 0.3.10.post2 (a fortified build)
#    and 0.3.14 (one linking libmlx5); empty to skip), reused offline once there
#  - the emulated libibverbs.so.1 (pytest_mooncake/verbs), built once into the plugin's cache
#  - headless Chromium, which screenshots the dashboard in tests/docs (MC_SETUP_CHROMIUM=0 skips
#    it; the screenshot test is then skipped, saying so)
set -euo pipefail
cd "$(dirname "$0")/.."
VENV=${MC_VENV:-.venv}
PYTHON=${PYTHON:-python3}
RELEASES=${MC_SETUP_RELEASES-0.3.10.post2 0.3.11.post1 0.3.12.post1 0.3.13.post1 0.3.14}

# shellcheck source=scripts/apt-helpers.sh
source scripts/apt-helpers.sh

missing=()
if ! command -v etcd >/dev/null 2>&1 && [ ! -x /usr/bin/etcd ]; then missing+=(etcd-server); fi
# Redis for the redis:// metadata backend and Redis-backed master HA (mc_redis, --mc-metadata=redis)
if ! command -v redis-server >/dev/null 2>&1 && [ ! -x /usr/bin/redis-server ]; then missing+=(redis-server); fi
if ! command -v cc >/dev/null 2>&1 && ! command -v gcc >/dev/null 2>&1; then missing+=(gcc); fi
# the network-namespace lab (pytest_mooncake/lab): an sshd per node, the nodes' firewall tools;
# the docker target's container engine (Podman with runc, pytest_mooncake/container_engine) and the
# base of the Mooncake images built here (debootstrap, pytest_mooncake/images)
for pair in /usr/sbin/sshd:openssh-server /usr/sbin/nft:nftables /usr/sbin/iptables:iptables \
            /usr/bin/podman:podman /usr/sbin/runc:runc /usr/sbin/debootstrap:debootstrap; do
  if [ ! -x "${pair%%:*}" ]; then missing+=("${pair##*:}"); fi
done
for pair in libibverbs.so.1:libibverbs1 librdmacm.so.1:librdmacm1 libnuma.so.1:libnuma1; do
  if ! have_library "${pair%%:*}"; then missing+=("${pair##*:}"); fi
done
# rdma-core's headers: the emulated libibverbs (pytest_mooncake/verbs) is compiled against them
if [ ! -f /usr/include/infiniband/verbs.h ]; then missing+=(libibverbs-dev); fi
# rdma-core's pyverbs for the reference engine's pyverbs backend, run on an emulated device
if [ ! -d /usr/lib/python3/dist-packages/pyverbs ]; then missing+=(python3-pyverbs); fi
# headless Chromium for the dashboard's screenshots (tests/docs/test_dashboard_screenshots.py)
if [ "${MC_SETUP_CHROMIUM:-1}" != 0 ] && ! command -v chromium >/dev/null 2>&1; then missing+=(chromium); fi
if [ ${#missing[@]} -gt 0 ]; then
  if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
    echo "setup: apt-get install ${missing[*]}"
    apt_get update
    # never let a package start its service (openssh-server would listen on every address)
    own_policy=0
    if [ ! -e /usr/sbin/policy-rc.d ]; then
      printf '#!/bin/sh\nexit 101\n' > /usr/sbin/policy-rc.d && chmod +x /usr/sbin/policy-rc.d
      own_policy=1
    fi
    rc=0
    apt_get install -y "${missing[@]}" >/dev/null || rc=$?
    if [ "$own_policy" = 1 ]; then rm -f /usr/sbin/policy-rc.d; fi
    if [ "$rc" != 0 ]; then exit "$rc"; fi
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
  "$VENV/bin/python" -m pip install -q -e ".[dev,mooncake,kubernetes]"
  echo "$want" > "$stamp"
fi

# Release environments (python -m pytest_mooncake.releases): a no-op when they exist. A failure
# (offline first run) is reported, not fatal: the tests that need a release say so themselves.
if [ -n "$RELEASES" ]; then
  # shellcheck disable=SC2086 # a list of versions
  if ! "$VENV/bin/python" -m pytest_mooncake.releases install --quiet $RELEASES >/dev/null; then
    echo "setup: warning: could not install the Mooncake release environments ($RELEASES);" \
         "see the message above; tests marked 'release' will say the same" >&2
  fi
fi
if ! "$VENV/bin/python" -m pytest_mooncake.verbs build >/dev/null; then
  echo "setup: warning: the emulated libibverbs (pytest_mooncake/verbs) did not build; the" \
       "RDMA tests on emulated devices will fail until gcc and libibverbs-dev are installed" >&2
fi

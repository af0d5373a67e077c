# Sourced by setup.sh (and its tests): presence checks and an apt-get that waits for the lock.
# shellcheck shell=bash

# A library counts as present when the loader cache lists it or its file is in a library
# directory: while another apt run replaces a package, ldconfig -p can briefly miss it.
have_library() {
  # not `ldconfig -p | grep -q`: grep stops reading early and, under pipefail, the pipe fails
  grep -qF "$1" <<<"$(ldconfig -p 2>/dev/null || true)" && return 0
  local dir
  for dir in /lib/x86_64-linux-gnu /usr/lib/x86_64-linux-gnu /lib/aarch64-linux-gnu \
             /usr/lib/aarch64-linux-gnu /lib64 /usr/lib64 /lib /usr/lib; do
    [ -e "$dir/$1" ] && return 0
  done
  return 1
}

# apt-get that waits (up to $MC_APT_LOCK_TIMEOUT s, default 600) for the apt/dpkg locks another apt run holds,
# instead of failing with "Could not get lock /var/lib/dpkg/lock-frontend".
apt_get() {
  local timeout=${MC_APT_LOCK_TIMEOUT:-600} out
  local deadline=$(( $(date +%s) + timeout ))
  while :; do
    if out=$(DEBIAN_FRONTEND=noninteractive apt-get -o DPkg::Lock::Timeout=60 -qq "$@" 2>&1); then
      return 0
    fi
    if ! grep -qE "Could not get lock|Unable to acquire the dpkg frontend lock|Unable to lock directory" <<<"$out"; then
      echo "$out" >&2
      return 1
    fi
    if [ "$(date +%s)" -ge "$deadline" ]; then
      echo "setup: another apt/dpkg run still holds its lock after ${timeout} s" \
           "(MC_APT_LOCK_TIMEOUT); apt-get said:" >&2
      echo "$out" >&2
      return 1
    fi
    echo "setup: waiting for another apt/dpkg run to release its lock" >&2
    sleep "${MC_APT_LOCK_POLL:-5}"
  done
}

"""The POSIX shell run on a node to find, start and signal a component (nodes have no Python).

Each operation is one script sent on the SSH session's stdin to ``sh -s``: parameters first
(quoted assignments), then a fixed prelude of functions, then the operation. Every loop in a
script is bounded by ``MC_WAIT`` seconds (naps of 0.1 s between checks). Linux's ``/proc`` tells a process's state
(``T`` paused, ``Z`` a zombie, which counts as gone) and start time; our pid files hold
``PID STARTTIME`` so a pid reused by another process is never signalled.

Exit codes the controller reads: 0 done, 3 not running (find/stop/kill), 4 already running
(start), 5 died while starting, 6 not ready before the deadline, 7 did not change state in
time (pause/resume/kill).
"""

from __future__ import annotations

import shlex

PRELUDE = r"""
set -u
mc_nap() { sleep 0.1 2>/dev/null || sleep 1; }
mc_now() { date +%s; }
mc_end=$(( $(mc_now) + ${MC_WAIT:-10} ))
mc_expired() { [ "$(mc_now)" -ge "$mc_end" ]; }
mc_stat() { sed -n 's/^[0-9]* (.*) //p' "/proc/$1/stat" 2>/dev/null; }
mc_state() { mc_stat "$1" | awk '{print $1}'; }
mc_started() { mc_stat "$1" | awk '{print $20}'; }
mc_pgrp() { mc_stat "$1" | awk '{print $3}'; }
mc_alive() {
  s=$(mc_state "$1")
  case "$s" in ''|Z|X|x) return 1;; esac
  return 0
}
mc_from_pidfile() {
  [ -n "$MC_PIDFILE" ] && [ -r "$MC_PIDFILE" ] || return 0
  p=""; st=""
  read -r p st < "$MC_PIDFILE" || true
  case "$p" in ''|*[!0-9]*) return 0;; esac
  mc_alive "$p" || return 0
  if [ -n "$st" ] && [ "$(mc_started "$p")" != "$st" ]; then return 0; fi
  echo "$p"
}
mc_from_match() {
  [ -n "$MC_MATCH" ] || return 0
  list=$(ps -A -ww -o pid= -o args= 2>/dev/null || ps -A -o pid= -o args=)
  printf '%s\n' "$list" | grep -E -- "$MC_MATCH" | while read -r p rest; do
    [ "$p" = "$$" ] && continue
    mc_alive "$p" && echo "$p"
  done
  return 0
}
mc_from_unit() {
  [ -n "$MC_UNIT" ] || return 0
  p=$(systemctl show -p MainPID --value "$MC_UNIT" 2>/dev/null || true)
  case "$p" in ''|0|*[!0-9]*) return 0;; esac
  mc_alive "$p" && echo "$p"
  return 0
}
mc_find() {
  found=$(mc_from_pidfile)
  [ -n "$found" ] || found=$(mc_from_unit)
  [ -n "$found" ] || found=$(mc_from_match)
  echo $found
}
mc_signal() {
  # $1 signal, rest pids: a process that leads its own group is signalled with its group
  sig=$1; shift
  for p in "$@"; do
    if [ "$(mc_pgrp "$p")" = "$p" ]; then kill -s "$sig" -- "-$p" 2>/dev/null || kill -s "$sig" "$p" 2>/dev/null
    else kill -s "$sig" "$p" 2>/dev/null; fi
  done
  return 0
}
mc_any_alive() { for p in "$@"; do mc_alive "$p" && return 0; done; return 1; }
mc_wait_gone() {
  while mc_any_alive "$@"; do
    mc_expired && return 1
    mc_nap
  done
  return 0
}
mc_wait_state() {
  # $1: T (all paused) or R (none paused); rest pids
  want=$1; shift
  while :; do
    ok=1
    for p in "$@"; do
      s=$(mc_state "$p")
      if [ "$want" = T ]; then [ "$s" = T ] || [ "$s" = t ] || ok=0
      else case "$s" in T|t) ok=0;; esac; fi
    done
    [ "$ok" = 1 ] && return 0
    mc_expired && return 1
    mc_nap
  done
}
mc_log_size() { if [ -n "$MC_LOG" ] && [ -r "$MC_LOG" ]; then wc -c < "$MC_LOG" | tr -d ' '; else echo 0; fi; }
"""

FIND = r"""
pids=$(mc_find)
[ -n "$pids" ] || { echo "not running"; exit 3; }
for p in $pids; do echo "$p $(mc_state "$p")"; done
"""

START_COMMAND = r"""
pids=$(mc_find)
[ -z "$pids" ] || { echo "already running: $pids"; exit 4; }
for d in "$(dirname "$MC_PIDFILE")" "$(dirname "$MC_LOG")"; do mkdir -p "$d" || exit 1; done
off=$(mc_log_size)
[ -z "$MC_CWD" ] || cd "$MC_CWD" || exit 1
if command -v setsid >/dev/null 2>&1; then
  setsid sh -c "$MC_COMMAND" >>"$MC_LOG" 2>&1 </dev/null &
else
  nohup sh -c "$MC_COMMAND" >>"$MC_LOG" 2>&1 </dev/null &
fi
pid=$!
printf '%s %s\n' "$pid" "$(mc_started "$pid")" > "$MC_PIDFILE.tmp" && mv "$MC_PIDFILE.tmp" "$MC_PIDFILE"
MC_OFFSET=$off
"""

START_UNIT = r"""
pids=$(mc_find)
[ -z "$pids" ] || { echo "already running: $pids"; exit 4; }
off=$(mc_log_size)
systemctl start "$MC_UNIT" || exit 1
MC_OFFSET=$off
"""

#: follows START_*: waits for the ready text in the log output written since the start
WAIT_READY = r"""
while :; do
  pids=$(mc_find)
  if [ -z "$pids" ]; then echo "exited while starting"; exit 5; fi
  [ -z "$MC_READY" ] && break
  if [ -n "$MC_LOG" ] && tail -c "+$((MC_OFFSET + 1))" "$MC_LOG" 2>/dev/null | grep -F -q -- "$MC_READY"; then break; fi
  mc_expired && { echo "no ready line yet"; exit 6; }
  mc_nap
done
echo "pids $pids"
"""

STOP_COMMAND = r"""
pids=$(mc_find)
[ -n "$pids" ] || { echo "not running"; exit 3; }
mc_signal TERM $pids
mc_signal CONT $pids
how=term
if ! mc_wait_gone $pids; then
  how=kill
  mc_signal KILL $pids
  mc_end=$(( $(mc_now) + 5 ))
  mc_wait_gone $pids || { echo "still alive after SIGKILL: $pids"; exit 7; }
fi
[ "$MC_OWN_PIDFILE" = 1 ] && rm -f "$MC_PIDFILE"
echo "$how $pids"
"""

STOP_UNIT = r"""
pids=$(mc_find)
systemctl stop "$MC_UNIT" || exit 1
[ -n "$pids" ] || { echo "not running"; exit 3; }
echo "term $pids"
"""

KILL = r"""
pids=$(mc_find)
[ -n "$pids" ] || { echo "not running"; exit 3; }
mc_signal KILL $pids
mc_wait_gone $pids || { echo "still alive after SIGKILL: $pids"; exit 7; }
[ "$MC_OWN_PIDFILE" = 1 ] && rm -f "$MC_PIDFILE"
echo "killed $pids"
"""

PAUSE = r"""
pids=$(mc_find)
[ -n "$pids" ] || { echo "not running"; exit 3; }
mc_signal STOP $pids
mc_wait_state T $pids || { echo "not stopped in time: $pids"; exit 7; }
echo "paused $pids"
"""

RESUME = r"""
pids=$(mc_find)
[ -n "$pids" ] || { echo "not running"; exit 3; }
mc_signal CONT $pids
mc_wait_state R $pids || { echo "still stopped: $pids"; exit 7; }
echo "resumed $pids"
"""

SOCKETS = r"""
pids=$(mc_find)
[ -n "$pids" ] || { echo "not running"; exit 3; }
for p in $pids; do
  inodes=$(ls -l "/proc/$p/fd" 2>/dev/null | sed -n 's/.*socket:\[\([0-9]*\)\].*/\1/p' | tr '\n' ' ')
  for t in tcp tcp6; do
    [ -r "/proc/$p/net/$t" ] || continue
    awk -v pid="$p" -v inodes=" $inodes " -v t="$t" \
      'NR > 1 && index(inodes, " " $10 " ") { print pid, t, $2, $3, $4 }' "/proc/$p/net/$t"
  done
done
"""

LOGS = r"""
if [ -n "$MC_LOG" ]; then
  [ -r "$MC_LOG" ] || { echo "no log file $MC_LOG" >&2; exit 3; }
  tail -n "$MC_LINES" "$MC_LOG"
elif [ -n "$MC_UNIT" ]; then
  journalctl -u "$MC_UNIT" -n "$MC_LINES" --no-pager
else
  echo "no log file and no unit to read" >&2; exit 3
fi
"""


def script(body: str, **params: object) -> str:
    """A complete script: ``MC_<NAME>=value`` assignments (shell-quoted), the prelude, ``body``."""
    lines = []
    for name, value in params.items():
        text = "" if value is None else str(value)
        lines.append(f"MC_{name.upper()}={shlex.quote(text)}")
    return "\n".join(lines) + "\n" + PRELUDE + body


def env_exports(env: dict[str, str]) -> str:
    """``export K='V'`` lines to put in front of a command line."""
    return "".join(f"export {k}={shlex.quote(v)}; " for k, v in env.items())

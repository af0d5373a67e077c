"""SSH sessions to nodes through asyncssh, behind a synchronous facade with a deadline per call.

Why asyncssh (over paramiko/fabric): its ``run(timeout=...)`` bounds a whole remote command and
hands back what the command printed before the deadline (paramiko bounds each read, so a total
deadline is a hand-written poll loop; fabric adds a timer thread on top of paramiko); one event
loop runs commands on many nodes at once, which a heal after Ctrl-C needs; it is maintained,
typed, and needs nothing on the node but an sshd and a POSIX shell.

The rest of the framework is synchronous, so the loop runs on one private daemon thread and
every call waits on it with a deadline. One connection per node is kept and re-made after it
breaks.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Iterable, Sequence
from concurrent.futures import TimeoutError as FutureTimeout
from dataclasses import dataclass
from typing import Any

import asyncssh

from pytest_mooncake.nodes.node_errors import CommandFailed, CommandTimeout, NodeUnreachable
from pytest_mooncake.schemas.cluster_nodes import NodeSpec

#: slack on top of a command's own deadline before the facade gives up on the loop itself
_LOOP_SLACK = 5.0


@dataclass(frozen=True)
class RemoteResult:
    exit_status: int | None
    stdout: str
    stderr: str

    @property
    def ok(self) -> bool:
        return self.exit_status == 0


class SshSessions:
    """One asyncssh connection per node, commands run with deadlines; thread-safe."""

    def __init__(self) -> None:
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None
        self._conns: dict[str, Any] = {}
        self._lock = threading.Lock()

    # ------------------------------------------------------------------ the loop thread

    def _ensure_loop(self) -> asyncio.AbstractEventLoop:
        with self._lock:
            if self._loop is None:
                loop = asyncio.new_event_loop()
                thread = threading.Thread(target=loop.run_forever, name="mooncake-ssh",
                                          daemon=True)
                thread.start()
                self._loop, self._thread = loop, thread
            return self._loop

    def _call(self, coro: Any, deadline: float) -> Any:
        future = asyncio.run_coroutine_threadsafe(coro, self._ensure_loop())
        try:
            return future.result(deadline + _LOOP_SLACK)
        except FutureTimeout:
            future.cancel()
            raise
        except BaseException:
            future.cancel()
            raise

    # ------------------------------------------------------------------ connections

    async def _connection(self, node: NodeSpec) -> Any:
        conn = self._conns.get(node.name)
        if conn is not None and not conn.is_closed():
            return conn
        options: dict[str, Any] = {
            "port": node.port, "username": node.user,
            "known_hosts": str(node.known_hosts) if node.known_hosts else (),
            "connect_timeout": node.connect_timeout, "login_timeout": node.connect_timeout,
            "keepalive_interval": 5, "keepalive_count_max": 3,
        }
        if node.key is not None:
            options.update(client_keys=[str(node.key)], agent_path=None)
        try:
            conn = await asyncio.wait_for(asyncssh.connect(node.host, **options),
                                          node.connect_timeout + 1)
        except asyncio.TimeoutError:
            raise NodeUnreachable(node.name, (
                f"no SSH session to {node.user}@{node.host}:{node.port} within "
                f"{node.connect_timeout:g}s (is sshd running and the address reachable?)")) from None
        except asyncssh.HostKeyNotVerifiable as exc:
            raise NodeUnreachable(node.name, (
                f"host key of {node.host}:{node.port} not trusted ({exc}); add it to "
                f"{node.known_hosts or '~/.ssh/known_hosts'} ([[nodes]].known_hosts)")) from None
        except asyncssh.PermissionDenied as exc:
            raise NodeUnreachable(node.name, (
                f"{node.user}@{node.host}:{node.port} refused our key "
                f"{node.key or '(default keys/agent)'}: {exc} ([[nodes]].key, .user)")) from None
        except (OSError, asyncssh.Error) as exc:
            raise NodeUnreachable(node.name, (
                f"cannot connect to {node.user}@{node.host}:{node.port}: "
                f"{type(exc).__name__}: {exc}")) from None
        self._conns[node.name] = conn
        return conn

    def _forget(self, node: NodeSpec) -> None:
        conn = self._conns.pop(node.name, None)
        if conn is not None:
            conn.abort()

    # ------------------------------------------------------------------ commands

    async def _run(self, node: NodeSpec, command: str, stdin: str | None, timeout: float,
                   label: str, check: bool) -> RemoteResult:
        conn = await self._connection(node)
        try:
            got = await conn.run(command, input=stdin, timeout=timeout, check=False)
        except asyncssh.TimeoutError as exc:
            raise CommandTimeout(node.name, label, timeout, _text(exc.stdout),
                                 _text(exc.stderr)) from None
        except (OSError, asyncssh.Error) as exc:
            self._forget(node)
            raise NodeUnreachable(node.name, (
                f"SSH session broke during `{label}`: {type(exc).__name__}: {exc}")) from None
        result = RemoteResult(got.exit_status, _text(got.stdout), _text(got.stderr))
        if check and not result.ok:
            raise CommandFailed(node.name, label, result.exit_status, result.stdout,
                                result.stderr)
        return result

    def run(self, node: NodeSpec, command: str, *, stdin: str | None = None,
            timeout: float | None = None, label: str | None = None,
            check: bool = True) -> RemoteResult:
        """Run ``command`` on ``node`` (its login shell runs it), with ``stdin`` as input.

        Raises ``CommandTimeout`` after ``timeout`` (default: the node's command_timeout),
        ``CommandFailed`` on a non-zero exit when ``check``, ``NodeUnreachable`` when no session
        could be had or it broke."""
        timeout = node.command_timeout if timeout is None else timeout
        label = label or command
        coro = self._run(node, command, stdin, timeout, label, check)
        return self._call(coro, node.connect_timeout + timeout)

    def run_many(self, calls: Sequence[tuple[NodeSpec, str, str | None, str]],
                 timeout: float) -> list[RemoteResult | BaseException]:
        """Run ``(node, command, stdin, label)`` calls at once; each gets its result or its
        error (nothing raised), in order."""

        async def gather() -> list[Any]:
            return await asyncio.gather(*(self._run(n, c, s, timeout, lbl, True)
                                          for n, c, s, lbl in calls), return_exceptions=True)

        if not calls:
            return []
        slowest = max(n.connect_timeout for n, *_ in calls)
        return self._call(gather(), slowest + timeout)

    def close(self, nodes: Iterable[str] | None = None) -> None:
        """Close the connections (all, or the named nodes') and, when all, stop the loop."""
        loop = self._loop
        if loop is None:
            return

        async def shut(names: list[str]) -> None:
            for name in names:
                conn = self._conns.pop(name, None)
                if conn is not None:
                    conn.close()
                    try:
                        await asyncio.wait_for(conn.wait_closed(), 2)
                    except (asyncio.TimeoutError, OSError, asyncssh.Error):
                        conn.abort()

        names = list(self._conns) if nodes is None else [n for n in nodes if n in self._conns]
        try:
            asyncio.run_coroutine_threadsafe(shut(names), loop).result(5 + 2 * len(names))
        except (FutureTimeout, RuntimeError):
            pass
        if nodes is None:
            loop.call_soon_threadsafe(loop.stop)
            if self._thread is not None:
                self._thread.join(5)
            if not loop.is_running():
                loop.close()
            self._loop = self._thread = None


def _text(value: Any) -> str:
    if value is None:
        return ""
    return value.decode(errors="replace") if isinstance(value, bytes) else str(value)

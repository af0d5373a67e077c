"""What goes wrong when driving nodes, each error naming the node, the command and what the
remote side said, so the reader knows where to look next."""

from __future__ import annotations


class NodeError(RuntimeError):
    """Base of every node-control failure; ``node`` is the node's name in the cluster file."""

    def __init__(self, node: str, message: str):
        super().__init__(f"node {node}: {message}")
        self.node = node


class NodeUnreachable(NodeError):
    """No SSH session could be had (refused, timed out, authentication or host key failed), or
    the session broke during a command."""


class CommandFailed(NodeError):
    """A remote command exited non-zero; the message carries its exit status and output."""

    def __init__(self, node: str, command: str, exit_status: int | None, stdout: str,
                 stderr: str):
        self.command = command
        self.exit_status = exit_status
        self.stdout = stdout
        self.stderr = stderr
        super().__init__(node, f"`{_short(command)}` exited {exit_status}"
                               f"{_said(stdout, stderr)}")


class CommandTimeout(NodeError):
    """A remote command did not finish before its deadline (the session was closed)."""

    def __init__(self, node: str, command: str, timeout: float, stdout: str, stderr: str):
        self.command = command
        self.timeout = timeout
        self.stdout = stdout
        self.stderr = stderr
        super().__init__(node, f"`{_short(command)}` did not finish within {timeout:g}s"
                               f"{_said(stdout, stderr)}")


class ComponentError(NodeError):
    """A component could not be started, found, stopped or signalled as asked."""


class FaultNotAllowed(PermissionError):
    """The cluster file's ``[faults].allow`` does not permit this action (operator opt-in)."""


def _short(command: str, limit: int = 160) -> str:
    one = " ".join(command.split())
    return one if len(one) <= limit else one[:limit] + "..."


def _said(stdout: str, stderr: str, limit: int = 1200) -> str:
    parts = []
    for label, text in (("stderr", stderr), ("stdout", stdout)):
        text = text.strip()
        if text:
            parts.append(f"{label}: {text[-limit:]}")
    return ("; remote said " + " | ".join(parts)) if parts else "; the remote said nothing"

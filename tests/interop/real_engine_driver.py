"""Drive one real Mooncake TransferEngine (the pip wheel) from a parent test over stdin/stdout.

Usage: python real_engine_driver.py SEGMENT_NAME METADATA_URI BUFFER_BYTES [PROTOCOL [DEVICE]]
(PROTOCOL defaults to tcp; DEVICE, for rdma, to "" = auto-discovery)

Replies are single lines ``@@ {json}`` on stdout (the library logs to stderr). Commands, one
JSON object per line: ``write``/``read``/``write_batch``/``read_batch`` (towards a target
segment), ``peek``/``poke`` (own buffer), ``quit``. Addresses are integers; data is hex.
"""

from __future__ import annotations

import ctypes
import json
import sys


def reply(**fields) -> None:
    sys.stdout.write("@@ " + json.dumps(fields) + "\n")
    sys.stdout.flush()


def main() -> int:
    name, metadata, size = sys.argv[1], sys.argv[2], int(sys.argv[3])
    protocol = sys.argv[4] if len(sys.argv) > 4 else "tcp"
    device = sys.argv[5] if len(sys.argv) > 5 else ""
    from mooncake.engine import TransferEngine

    te = TransferEngine()
    rc = te.initialize(name, metadata, protocol, device)
    if rc != 0:
        reply(event="error", what="initialize", rc=rc)
        return 1
    buf = te.allocate_managed_buffer(size)
    if not buf:
        reply(event="error", what="allocate_managed_buffer", rc=-1)
        return 1
    ctypes.memset(buf, 0, size)
    reply(event="ready", buffer=buf, size=size)

    for line in sys.stdin:
        cmd = json.loads(line)
        op = cmd["op"]
        if op == "quit":
            reply(ok=True)
            return 0
        if op == "poke":
            data = bytes.fromhex(cmd["data"])
            ctypes.memmove(buf + cmd["off"], data, len(data))
            reply(ok=True)
        elif op == "peek":
            reply(data=ctypes.string_at(buf + cmd["off"], cmd["len"]).hex())
        elif op == "write":
            data = bytes.fromhex(cmd["data"])
            ctypes.memmove(buf + cmd.get("off", 0), data, len(data))
            rc = te.transfer_sync_write(
                cmd["target"], buf + cmd.get("off", 0), cmd["remote"], len(data)
            )
            reply(rc=rc)
        elif op == "read":
            off = cmd.get("off", 0)
            rc = te.transfer_sync_read(cmd["target"], buf + off, cmd["remote"], cmd["len"])
            reply(rc=rc, data=ctypes.string_at(buf + off, cmd["len"]).hex() if rc == 0 else "")
        elif op in ("write_batch", "read_batch"):
            n, length = len(cmd["remotes"]), cmd["len"]
            local = [buf + i * length for i in range(n)]
            if op == "write_batch":
                data = bytes.fromhex(cmd["data"])
                ctypes.memmove(buf, data, len(data))
                rc = te.batch_transfer_sync_write(
                    cmd["target"], local, cmd["remotes"], [length] * n
                )
                reply(rc=rc)
            else:
                rc = te.batch_transfer_sync_read(cmd["target"], local, cmd["remotes"], [length] * n)
                reply(rc=rc, data=ctypes.string_at(buf, n * length).hex() if rc == 0 else "")
        else:
            reply(error=f"unknown op {op!r}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

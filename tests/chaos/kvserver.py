"""A tiny loopback key-value server for nemesis tests (a real process to kill).

One JSON request per line, one JSON reply per line::

    {"op": "put", "key": "k1", "value": "w0-3"}  -> {"ok": true, "instance": "..."}
    {"op": "get", "key": "k1"}                   -> {"ok": true, "value": "w0-3" | null, ...}
    {"op": "remove", "key": "k1"}                -> {"ok": true, "value": true | false, ...}

Data lives in memory; every change is appended to a log file that a restart replays.
``--durable`` writes and flushes the log entry before acknowledging (a SIGKILL loses nothing
acknowledged). ``--lossy`` acknowledges first and flushes the log only every
``--flush-every`` seconds, so a SIGKILL loses the acknowledged writes of the last interval.
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import threading
import time


class Store:
    def __init__(self, log_path: str, durable: bool, flush_every: float):
        self.data: dict[str, str] = {}
        self.lock = threading.Lock()
        self.durable = durable
        self.pending: list[str] = []
        self._replay(log_path)
        self.log = open(log_path, "a")  # noqa: SIM115 (lives as long as the process)
        if not durable:
            threading.Thread(target=self._flusher, args=(flush_every,), daemon=True).start()

    def _replay(self, path: str) -> None:
        if not os.path.exists(path):
            return
        with open(path) as f:
            for line in f:
                try:
                    entry = json.loads(line)
                except ValueError:
                    continue  # a torn last line: never acknowledged
                self._apply(entry)

    def _apply(self, entry: dict) -> bool:
        if entry["op"] == "put":
            self.data[entry["key"]] = entry["value"]
            return True
        return self.data.pop(entry["key"], None) is not None

    def change(self, entry: dict) -> bool:
        line = json.dumps(entry) + "\n"
        with self.lock:
            existed = self._apply(entry)
            if self.durable:
                self.log.write(line)
                self.log.flush()
            else:
                self.pending.append(line)
        return existed

    def get(self, key: str) -> str | None:
        with self.lock:
            return self.data.get(key)

    def _flusher(self, every: float) -> None:
        while True:
            time.sleep(every)
            with self.lock:
                batch, self.pending = self.pending, []
            self.log.write("".join(batch))
            self.log.flush()


def serve(conn: socket.socket, store: Store, instance: str) -> None:
    with conn, conn.makefile("rwb") as stream:
        for raw in stream:
            try:
                req = json.loads(raw)
                op, key = req["op"], str(req["key"])
                if op == "get":
                    reply = {"ok": True, "value": store.get(key)}
                elif op == "put":
                    store.change({"op": "put", "key": key, "value": str(req["value"])})
                    reply = {"ok": True}
                elif op == "remove":
                    reply = {"ok": True, "value": store.change({"op": "remove", "key": key})}
                else:
                    reply = {"ok": False, "error": f"unknown op {op!r}"}
            except (ValueError, KeyError, TypeError) as exc:
                reply = {"ok": False, "error": f"bad request: {exc}"}
            reply["instance"] = instance
            stream.write(json.dumps(reply).encode() + b"\n")
            stream.flush()


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--log", required=True)
    mode = parser.add_mutually_exclusive_group(required=True)
    mode.add_argument("--durable", action="store_true")
    mode.add_argument("--lossy", action="store_true")
    parser.add_argument("--flush-every", type=float, default=1.0)
    args = parser.parse_args()
    store = Store(args.log, durable=args.durable, flush_every=args.flush_every)
    instance = f"pid-{os.getpid()}"
    listener = socket.socket()
    listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    listener.bind(("127.0.0.1", args.port))
    listener.listen(64)
    print(f"kvserver {instance} listening on 127.0.0.1:{args.port} "
          f"({'durable' if args.durable else 'lossy'}; {len(store.data)} keys replayed)",
          flush=True)
    while True:
        conn, _ = listener.accept()
        threading.Thread(target=serve, args=(conn, store, instance), daemon=True).start()


if __name__ == "__main__":
    main()

"""Run with a release's own Python: one real mooncake.store client puts, gets, checks and
removes one key through the master at argv[1] (P2P handshake: no metadata server)."""

import sys

from mooncake.store import MooncakeDistributedStore

store = MooncakeDistributedStore()
rc = store.setup("127.0.0.1", "P2PHANDSHAKE", 16 << 20, 16 << 20, "tcp", "", sys.argv[1])
if rc != 0:
    raise SystemExit(f"setup returned {rc}")
data = bytes(range(64))
print("put", store.put("wire-key", data), flush=True)
got = store.get("wire-key")
print("get", len(got), "same" if got == data else "DIFFERENT", flush=True)
print("exists", store.is_exist("wire-key"), flush=True)
print("remove", store.remove("wire-key", True), flush=True)
store.close()

"""The argument and answer types of the master RPC calls, per release family.

Learned from Mooncake's mooncake-store/include/{rpc_service.h, types.h, replica.h,
rpc_types.h, allocator.h} at v0.3.10.post2 and v0.3.12.post1, from the main branch for what
came after, and from the handler signatures each release's ``mooncake_master`` binary names
(``regist_one_handler_impl<&WrappedMasterService::…>`` symbols; docs/master-wire.md lists
them). Which family a running master speaks is not assumed from its version: the probe
(``probe.py``) sends each family's arguments and keeps the one the master accepts.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from pytest_mooncake.master_rpc import struct_pack as sp

ERROR_CODES = {
    "OK": 0, "INTERNAL_ERROR": -1, "BUFFER_OVERFLOW": -10, "SHARD_INDEX_OUT_OF_RANGE": -100,
    "SEGMENT_NOT_FOUND": -101, "SEGMENT_ALREADY_EXISTS": -102, "CLIENT_NOT_FOUND": -103,
    "NO_AVAILABLE_HANDLE": -200, "INVALID_VERSION": -300, "INVALID_KEY": -400,
    "WRITE_FAIL": -500, "INVALID_PARAMS": -600, "ILLEGAL_CLIENT": -601, "INVALID_WRITE": -700,
    "INVALID_READ": -701, "INVALID_REPLICA": -702, "REPLICA_IS_NOT_READY": -703,
    "OBJECT_NOT_FOUND": -704, "OBJECT_ALREADY_EXISTS": -705, "OBJECT_HAS_LEASE": -706,
    "LEASE_EXPIRED": -707, "REPLICA_NOT_FOUND": -710, "REPLICA_ALREADY_EXISTS": -711,
    "REPLICA_IS_GONE": -712, "OBJECT_REPLICA_BUSY": -714, "TRANSFER_FAIL": -800,
    "CHECKSUM_MISMATCH": -801, "RPC_FAIL": -900, "RPC_TIMEOUT": -901,
    "ETCD_OPERATION_ERROR": -1000, "ETCD_KEY_NOT_EXIST": -1001, "NOT_SUPPORTED": -1012,
    "UNAVAILABLE_IN_CURRENT_STATUS": -1010, "UNAVAILABLE_IN_CURRENT_MODE": -1011,
}
"""mooncake::ErrorCode (``enum class ErrorCode : int32_t``, types.h); names for messages."""

ERROR_CODE = sp.Enum("ErrorCode", sp.I32, ERROR_CODES)
REPLICA_TYPE = sp.Enum("ReplicaType", sp.I32, {"MEMORY": 0, "DISK": 1, "LOCAL_DISK": 2,
                                                "NOF_SSD": 3, "ALL": 4, "DFS": 100})
CLIENT_STATUS = sp.Enum("ClientStatus", sp.I32, {"UNDEFINED": 0, "OK": 1, "NEED_REMOUNT": 2})
OBJECT_DATA_TYPE = sp.Enum("ObjectDataType", sp.U8, {"UNKNOWN": 0})
SOFT_PIN_ACTION = sp.Enum("SoftPinAction", sp.U8, {"PRESERVE": 0, "ENABLE": 1, "DISABLE": 2})
UUID = sp.UUID()
STRS = sp.Vector(sp.STR)


def expected(t: sp.SpType) -> sp.Expected:
    return sp.Expected(t, ERROR_CODE)


def struct(name: str, *fields: tuple[str, sp.SpType]) -> sp.Struct:
    return sp.Struct(name, tuple(fields))


SEGMENT_0_3_10 = struct("Segment", ("id", UUID), ("name", sp.STR), ("base", sp.U64),
                        ("size", sp.U64), ("te_endpoint", sp.STR), ("protocol", sp.STR))
SEGMENT_0_3_12 = struct("Segment", *SEGMENT_0_3_10.fields, ("host_id", sp.STR))

CONFIG_0_3_10 = struct("ReplicateConfig", ("replica_num", sp.U64), ("with_soft_pin", sp.BOOL),
                       ("with_hard_pin", sp.BOOL), ("preferred_segments", STRS),
                       ("preferred_segment", sp.STR), ("prefer_alloc_in_same_node", sp.BOOL))
CONFIG_0_3_11 = struct("ReplicateConfig", ("replica_num", sp.U64), ("nof_replica_num", sp.U64),
                       ("with_soft_pin", sp.BOOL), ("with_hard_pin", sp.BOOL),
                       ("preferred_segments", STRS), ("preferred_segment", sp.STR),
                       ("preferred_nof_segments", STRS),
                       ("prefer_alloc_in_same_node", sp.BOOL), ("data_type", OBJECT_DATA_TYPE))
CONFIG_0_3_12 = struct("ReplicateConfig", ("replica_num", sp.U64), ("nof_replica_num", sp.U64),
                       ("with_soft_pin", sp.BOOL), ("with_hard_pin", sp.BOOL),
                       ("preferred_segments", STRS), ("preferred_segment", sp.STR),
                       ("preferred_nof_segments", STRS),
                       ("prefer_alloc_in_same_node", sp.BOOL), ("data_type", OBJECT_DATA_TYPE),
                       ("host_id", sp.STR), ("group_ids", sp.Optional(STRS)))
CONFIG_MAIN = struct("ReplicateConfig", ("replica_num", sp.U64), ("nof_replica_num", sp.U64),
                     ("dfs_replica_num", sp.U64), ("soft_pin_action", SOFT_PIN_ACTION),
                     ("soft_pin_ttl_ms", sp.Optional(sp.U64)), ("with_hard_pin", sp.BOOL),
                     ("preferred_segments", STRS), ("preferred_segment", sp.STR),
                     ("preferred_nof_segments", STRS),
                     ("prefer_alloc_in_same_node", sp.BOOL), ("data_type", OBJECT_DATA_TYPE),
                     ("host_id", sp.STR), ("group_ids", sp.Optional(STRS)))
UNSEEN = sp.Compatible(None)
"""A compatible member 0.3.14's client sends (always absent in what we captured) whose type no
source we have shows."""
SEGMENT_0_3_14 = struct("Segment", *SEGMENT_0_3_12.fields, ("compatible_1", UNSEEN))
CONFIG_0_3_14 = struct("ReplicateConfig", *CONFIG_MAIN.fields,
                       *((f"compatible_{i}", UNSEEN) for i in range(1, 5)))
OBJECT_META = struct("ObjectMeta", ("key", sp.STR), ("object_checksum", sp.Optional(sp.U64)))
PING_RESPONSE = struct("PingResponse", ("view_version_id", sp.I64),
                       ("client_status", CLIENT_STATUS))


@dataclass(frozen=True)
class Call:
    """One handler: its argument types and (where declared) its answer type."""

    method: str
    args: tuple[sp.SpType, ...]
    answer: sp.SpType | None = None
    """None: decoded from the literal the master sends (the replica descriptors, whose
    variant grew with every release)."""


@dataclass(frozen=True)
class Layout:
    """The calls of one release family, and how the family's client fills their arguments."""

    name: str
    calls: dict[str, Call]
    tenant: bool
    """Calls carry a trailing ``tenant_id`` string (0.3.12 on)."""
    put_end_meta: bool
    """PutEnd takes an ``ObjectMeta{key, checksum}`` instead of the key (0.3.13 on)."""
    config: sp.Struct
    segment: sp.Struct
    releases: tuple[str, ...] = field(default=())
    """Releases whose binaries name these signatures (docs/master-wire.md)."""
    compatible_answers: bool = False
    """Its masters' answers carry a compatible-member section (0.3.14's GetReplicaList): how
    the probe tells two families apart that accept the same arguments."""

    def call(self, method: str) -> Call:
        try:
            return self.calls[method]
        except KeyError:
            raise KeyError(f"layout {self.name} has no call {method!r} (it has "
                           f"{', '.join(sorted(self.calls))})") from None

    def default_config(self, replicas: int = 1) -> dict:
        values = {"replica_num": replicas, "nof_replica_num": 0, "dfs_replica_num": 0,
                  "with_soft_pin": False, "soft_pin_action": "PRESERVE", "soft_pin_ttl_ms": None,
                  "with_hard_pin": False, "preferred_segments": [], "preferred_segment": "",
                  "preferred_nof_segments": [], "prefer_alloc_in_same_node": False,
                  "data_type": "UNKNOWN", "host_id": "", "group_ids": None}
        return {name: values.get(name) for name, _ in self.config.fields}


def layout(name: str, tenant: bool, put_end_meta: bool, config: sp.Struct, segment: sp.Struct,
           releases: tuple[str, ...], compatible_answers: bool = False) -> Layout:
    t = (sp.STR,) if tenant else ()
    key_arg = OBJECT_META if put_end_meta else sp.STR
    calls = [
        Call("ServiceReady", (), expected(sp.STR)),
        Call("Ping", (UUID,), expected(PING_RESPONSE)),
        Call("ExistKey", (sp.STR, *t), expected(sp.BOOL)),
        Call("GetReplicaList", (sp.STR, *t)),
        Call("PutStart", (UUID, sp.STR, sp.U64, config, *t)),
        Call("PutEnd", (UUID, key_arg, REPLICA_TYPE, *t), expected(sp.VOID)),
        Call("PutRevoke", (UUID, sp.STR, REPLICA_TYPE, *t), expected(sp.VOID)),
        Call("Remove", (sp.STR, sp.BOOL, *t), expected(sp.VOID)),
        Call("MountSegment", (segment, UUID), expected(sp.VOID)),
        Call("UnmountSegment", (UUID, UUID), expected(sp.VOID)),
        Call("ReMountSegment", (sp.Vector(segment), UUID), expected(sp.VOID)),
        Call("GetStorageConfig", ()),
        Call("FetchTasks", (UUID, sp.U64)),
    ]
    return Layout(name, {c.method: c for c in calls}, tenant, put_end_meta, config, segment,
                  releases, compatible_answers)


LAYOUTS = (
    layout("0.3.10", False, False, CONFIG_0_3_10, SEGMENT_0_3_10, ("0.3.10.post2",)),
    layout("0.3.11", False, False, CONFIG_0_3_11, SEGMENT_0_3_10, ("0.3.11.post1",)),
    layout("0.3.12", True, False, CONFIG_0_3_12, SEGMENT_0_3_12, ("0.3.12.post1",)),
    layout("0.3.13", True, True, CONFIG_MAIN, SEGMENT_0_3_12, ("0.3.13.post1",)),
    layout("0.3.14", True, True, CONFIG_0_3_14, SEGMENT_0_3_14, ("0.3.14",),
           compatible_answers=True),
)
"""Every family, oldest first. The 0.3.13 family's ReplicateConfig is the main branch's
(August 2026: dfs_replica_num, soft_pin_action, soft_pin_ttl_ms), which 0.3.13.post1 and
0.3.14 accept (the tags' source is not in the mirror; the probe settled it). 0.3.14's own
client adds compatible members to Segment (1) and ReplicateConfig (4), sent absent; its
masters accept arguments without them (compatible skew), and answer with such a section."""


def by_name(name: str) -> Layout:
    for candidate in LAYOUTS:
        if candidate.name == name:
            return candidate
    raise KeyError(f"no master RPC layout {name!r} (known: "
                   f"{', '.join(c.name for c in LAYOUTS)})")

"""The planted stale-completion defect (stale_wr_id.c) as a verbs-boundary scenario: built at
test time against the emulated libibverbs, run once per schedule (tests/verbs and
tests/benchmarks use it)."""

from __future__ import annotations

from pathlib import Path

from pytest_mooncake.runtime.native import build_executable
from pytest_mooncake.verbs import EmulatedFabric, library_path
from pytest_mooncake.verbs.control import PostedWr
from pytest_mooncake.verbs.points import PolledCompletion
from pytest_mooncake.verbs.program_scenario import ProgramScenario
from pytest_mooncake.verbs.stale_completions import stale_polls

SOURCE = Path(__file__).with_name("stale_wr_id.c")
MODES = ("reuse", "tagged")


def build_program() -> Path:
    lib = library_path()
    return build_executable("stale_wr_id", [SOURCE], cflags=["-pthread"],
                            ldflags=[f"-L{lib.parent}", "-l:libibverbs.so.1"])


def finished_by_stale_completion(lines: list[str], posts: list[PostedWr],
                                 polls: list[PolledCompletion]) -> list[str]:
    """CO-3 for one slice: the completion that finished it must not be a stale one (polled after
    its wr_id was posted again elsewhere)."""
    final = [x for x in lines if x.startswith("final ")]
    if not final:
        return [f"the program never finished the slice; it printed {lines}"]
    fields = dict(kv.split("=", 1) for kv in final[0].split()[1:])
    qp, wr_id = int(fields["qp"]), int(fields["wr_id"], 16)
    return [f"the slice was finished by a stale completion: {s}"
            for s in stale_polls(posts, polls) if s.polled.qp == qp and s.polled.wr_id == wr_id]


def scenario(fabric: EmulatedFabric, mode: str, program: Path | None = None) -> ProgramScenario:
    if mode not in MODES:
        raise ValueError(f"mode must be one of {MODES}, got {mode!r}")
    exe = program or build_program()
    return ProgramScenario("stale-completion-after-retry", [exe, fabric.devices[0].name, mode],
                           fabric, finished_by_stale_completion)

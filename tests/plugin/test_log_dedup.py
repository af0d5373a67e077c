"""Repeated log lines fold into one and a count; lines that differ keep their place."""

from __future__ import annotations

from pytest_mooncake.report.log_dedup import dedupe

REFUSED = "retired connections to 127.0.0.1:7000: Connection refused"


def test_sixty_three_timestamped_repeats_become_one_line_and_a_count() -> None:
    lines = [f"E1201 18:00:{i % 60:02d}.{i:06d} 4242 rdma.cc:12] {REFUSED}" for i in range(63)]
    text = "engine up\n" + "\n".join(lines) + "\nengine down\n"
    out = dedupe(text).splitlines()
    assert out[0] == "engine up" and out[1] == lines[0] and out[-1] == "engine down"
    assert out[2].startswith("… the line above repeated 63 times in all (the last at E1201")
    assert len(out) == 4 and len(dedupe(text)) < len(text) / 20


def test_blocks_fold_and_different_lines_stay() -> None:
    block = ["2026-12-01T18:00:00Z retry 1", "2026-12-01T18:00:01Z backoff"]
    text = "\n".join(block * 5 + ["key 1", "key 2", "key 3", "x", "x"])
    out = dedupe(text).splitlines()
    assert out[:3] == [*block, "… the 2 lines above repeated 5 times in all (the last at "
                                "2026-12-01T18:00:01Z)"]
    assert out[3:] == ["key 1", "key 2", "key 3", "x", "x"], "distinct or twice-seen lines stay"

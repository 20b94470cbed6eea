"""A former master rejoining with a divergent tail, with processes killed by
SIGKILL (docs/format.md §21.8): master A and slave B; B killed, A writes
records B never gets, A killed; B restarted and promoted with `rocketstore
promote` while it runs, takes puts; A restarted as B's slave is refused as
diverged; `rocketstore rejoin` saves A's divergent tail to a side file and
cuts it; A then follows B and holds B's bytes over the offsets both hold."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
from pathlib import Path

from helpers.ha_util import SEGMENT, commitlog_bytes, segment_starts, slave_config, wait_until
from helpers.paths import HELPERS
from rocketstore import MessageStore
from rocketstore._native import HA_DIR, REJOIN_CUT_PREFIX

FAILOVER_CHILD = HELPERS / "failover_child.py"


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class Child:
    """A peer process whose output goes to a file (read while it runs)."""

    def __init__(self, script: Path, args: list[object], out: Path) -> None:
        self.out = out
        with out.open("a") as o, out.with_suffix(".err").open("a") as e:
            self.proc = subprocess.Popen([sys.executable, str(script), *map(str, args)],
                                         stdout=o, stderr=e)

    def lines(self) -> list[str]:
        return self.out.read_text().splitlines()

    def wait_for(self, prefix: str, timeout: float = 30) -> str:
        def seen() -> bool:
            if self.proc.poll() is not None:
                raise AssertionError(self.out.with_suffix(".err").read_text())
            return any(x.startswith(prefix) for x in self.lines())
        wait_until(seen, timeout, prefix)
        return next(x for x in reversed(self.lines()) if x.startswith(prefix))

    def kill(self) -> None:
        if self.proc.poll() is None:
            os.kill(self.proc.pid, signal.SIGKILL)
        self.proc.wait(timeout=30)


def _lines(out: Path, tag: str) -> list[list[str]]:
    rows = [x.split() for x in out.read_text().splitlines()]
    return [r[1:] for r in rows if len(r) == 3 and r[0] == tag]  # a torn line is none


def _cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "rocketstore.cli", *args], capture_output=True,
                          text=True, timeout=120, env={**os.environ, "COLUMNS": "200"})


def _status(child: Child) -> dict[str, object]:
    return dict(json.loads(child.wait_for("STATUS ")[len("STATUS "):]))


def test_a_former_master_with_a_divergent_tail_rejoins(tmp_path: Path) -> None:
    a_dir, b_dir = tmp_path / "a", tmp_path / "b"
    a_port, b_port = _free_port(), _free_port()
    a_out = tmp_path / "a.out"
    a = Child(FAILOVER_CHILD, ["master", a_dir, a_port], a_out)
    b = Child(FAILOVER_CHILD, ["follower", b_dir, a_port, b_port, 400], tmp_path / "b.out")
    try:
        a.wait_for("READY")
        b.wait_for("READY")
        wait_until(lambda: len(_lines(a_out, "ACK")) > 150, 30, "acks from B")
        b.kill()  # A goes on alone: SLAVE_NOT_AVAILABLE, stored on A only
        n = len(a.lines())
        wait_until(lambda: sum(x.startswith("STORED") for x in a.lines()[n:]) > 20, 30,
                   "records B never gets")
        a.kill()
        acked = [(int(o), int(s)) for o, s in _lines(a_out, "ACK")]
        b = Child(FAILOVER_CHILD, ["follower", b_dir, a_port, b_port, 400], tmp_path / "b2.out")
        b.wait_for("ROLE SLAVE")
        # Promote the running B through the command.
        r = _cli("promote", str(b_dir), "--timeout", "20", "--json")
        assert r.returncode == 0, r.stderr
        promoted = json.loads(r.stdout)
        assert promoted["ok"] and promoted["port"] == b_port
        cut = promoted["offset"]
        b_end = int(b.wait_for("DONE").split()[1])
        # Every SYNC_MASTER-acknowledged message is on the survivor, B.
        for off, size in acked:
            assert off + size <= cut, f"acknowledged message at {off} is not on B"
        a_end_before = _a_end(a_dir)
        a_bytes = commitlog_bytes(a_dir, 0, a_end_before)
        assert a_end_before > cut
        # B's copy is A's log up to the promotion.
        assert commitlog_bytes(b_dir, 0, cut) == a_bytes[:cut], _fork_report(a_bytes, b_dir, cut,
                                                                               b_end, "")
        # The logs fork where B's first own record is: at the promotion's
        # offset, unless B held every record of a file but not its end-of-file
        # blank and B's first record did not fit there either: B wrote the
        # same blank (docs/format.md §4), and the fork is the next file's start.
        seg_end = cut - cut % SEGMENT + SEGMENT
        fork = seg_end if commitlog_bytes(b_dir, cut, seg_end) == a_bytes[cut:seg_end] else cut
        # A restarted as B's slave: refused as diverged, nothing written.
        a2 = Child(FAILOVER_CHILD, ["slave", a_dir, b_port], tmp_path / "a2.out")
        a2.wait_for("READY")
        wait_until(lambda: _status(a2)["diverged"], 20, "diverged")
        assert not _status(a2)["verified"]
        a2.kill()
        r = _cli("rejoin", str(a_dir), "--master", f"127.0.0.1:{b_port}", "--timeout", "20",
                 "--json")
        assert r.returncode == 0, r.stdout + r.stderr
        rejoined = json.loads(r.stdout)
        why = _fork_report(a_bytes, b_dir, cut, b_end, r.stdout)
        assert rejoined["offset"] == fork, why
        side = a_dir / HA_DIR / f"{REJOIN_CUT_PREFIX}{fork:020d}"
        assert rejoined["saved_file"] == str(side), why
        # The side file holds exactly the cut bytes.
        assert side.read_bytes() == a_bytes[fork:rejoined["end"]], why
        assert rejoined["end"] >= a_end_before, why
        # Cut: zeros to the end of the cut's file, no file after it.
        fork_seg_end = fork - fork % SEGMENT + SEGMENT
        assert commitlog_bytes(a_dir, fork, fork_seg_end) == bytes(fork_seg_end - fork), why
        assert segment_starts(a_dir)[-1] < fork_seg_end, why
        # A follows B and ends byte-identical over the shared offsets.
        a3 = Child(FAILOVER_CHILD, ["slave", a_dir, b_port], tmp_path / "a3.out")
        a3.wait_for("READY")
        wait_until(lambda: _status(a3)["applied_offset"] == b_end, 30, "A caught up with B")
        st = _status(a3)
        assert st["verified"] and not st["diverged"]
        a3.kill()
    finally:
        a.kill()
        b.kill()
    assert commitlog_bytes(a_dir, 0, b_end) == commitlog_bytes(b_dir, 0, b_end)
    assert commitlog_bytes(a_dir, 0, fork) == a_bytes[:fork]


def _fork_report(a_bytes: bytes, b_dir: Path, cut: int, b_end: int, out: str) -> str:
    """What a wrong fork is diagnosed from: the offsets, rejoin's output, and
    where A's old bytes and B's first differ."""
    b_bytes = commitlog_bytes(b_dir, 0, min(len(a_bytes), b_end))
    first = next((i for i, (x, y) in enumerate(zip(a_bytes, b_bytes, strict=False)) if x != y),
                 min(len(a_bytes), len(b_bytes)))
    return (f"promoted at {cut} ({cut % SEGMENT} into its {SEGMENT}-byte file), A's old end "
            f"{len(a_bytes)}, B's end {b_end}; A's and B's bytes first differ at {first}; at the "
            f"cut A holds {a_bytes[cut:cut + 16].hex()}, B {b_bytes[cut:cut + 16].hex()}; "
            f"rejoin: {out}")


def _a_end(path: Path) -> int:
    """A's CommitLog end as a recovered open sees it (read-only: nothing written)."""
    with MessageStore(slave_config(path, None), read_only=True) as s:
        return s.max_phy_offset

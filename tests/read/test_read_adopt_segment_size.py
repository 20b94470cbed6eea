"""A read-only store opened before the writer made its first CommitLog file.

The reader knows no segment size yet (it opened an empty directory with the
default configuration); the writer, another process, uses 64 KiB segments.
The reader takes the size from the writer's first file and serves every
message the writer acknowledged, across segment rolls.
"""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

import pytest

from rocketstore import MessageStore, StoreConfig

SEG = 64 * 1024
COUNT = 300  # ~1 KiB bodies: several segment rolls

WRITER = r"""
import sys
from rocketstore import MessageStore, StoreConfig

path, seg, count = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
with MessageStore(StoreConfig(store_path=path, mapped_file_size_commit_log=seg)) as store:
    for i in range(count):
        store.put("adopt", b"%06d" % i + b"x" * 1000)
    store.flush()
    print("DONE", store.max_phy_offset, flush=True)
    sys.stdin.read()
"""


@pytest.mark.filterwarnings("ignore::rocketstore.errors.UnknownTopicWarning")
def test_reader_opened_before_the_first_file_takes_the_writers_segment_size(
        tmp_path: Path) -> None:
    with MessageStore(StoreConfig(store_path=str(tmp_path)), read_only=True,
                      wait_for_writer=True) as ro:
        writer = subprocess.Popen(
            [sys.executable, "-c", WRITER, str(tmp_path), str(SEG), str(COUNT)],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
        try:
            assert writer.stdout is not None
            line = writer.stdout.readline().split()
            assert line[0] == "DONE", line
            acked_end = int(line[1])
            assert acked_end > 3 * SEG  # the writer rolled segments
            bodies: list[bytes] = []
            deadline = time.monotonic() + 60
            while len(bodies) < COUNT and time.monotonic() < deadline:
                r = ro.get_message("g", "adopt", 0, len(bodies), max_msg_nums=64)
                bodies += [m.body for m in r.messages]
                if not r.messages:
                    time.sleep(0.02)
            assert [b[:6] for b in bodies] == [b"%06d" % i for i in range(COUNT)]
            assert ro.max_phy_offset == acked_end
        finally:
            assert writer.stdin is not None and writer.stdout is not None
            writer.stdin.close()
            writer.wait(30)
            writer.stdout.close()
    assert sorted(p.stat().st_size for p in (tmp_path / "commitlog").iterdir())[-1] == SEG

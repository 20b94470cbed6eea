"""A journal is known by its first line, not by its inode number
(docs/format.md §13.3).

A reader that caught the files in the middle of another process's rewrite
holds the new json with the old journal. The rewrite then removes that
journal, and the next durable commit anywhere starts a new one, which ext4
and most file systems give the freed inode number at once. The reader must
see that this is another journal: catching up "from its place" in it would
skip the records there, and its next commit would start a journal of its
own over them, burying another process's durable commit. Here the new
journal is written into the old one's inode (what inode reuse looks like),
so the case does not hang on the file system's choice.
"""

from __future__ import annotations

import os
from pathlib import Path

from rocketstore.config.files import atomic_write
from rocketstore.consumers.offset_journal import _Header, digest, encode_ops, frame
from rocketstore.consumers.offset_table import OffsetKey
from rocketstore.consumers.offsets import ConsumerOffsets


def test_a_journal_in_a_reused_inode_is_read_whole(tmp_path: Path) -> None:
    path = tmp_path / "config" / "consumerOffset.json"
    journal = path.with_suffix(".journal")
    a = ConsumerOffsets.load(path)
    a.commit("g1", "T", 0, 5)
    a.persist()                                  # durable: json none, journal X(r1)
    assert journal.exists()
    ino = journal.stat().st_ino

    # Another process folds: the json with r1 in it is written first ...
    folded = a.table().to_json()
    atomic_write(str(path), folded)
    # ... and a reader loads right then: new json, old journal.
    c = ConsumerOffsets.load(path)
    assert c.query("g1", "T", 0) == 5
    # The fold ends (the journal goes); a durable commit of g2 elsewhere
    # starts a new journal that gets the same inode number.
    raw = path.read_bytes()
    header = _Header(digest(raw), len(raw), {}, "00112233aabbccdd")
    record = encode_ops([("s", OffsetKey.of("g2", "T"), 0, {0: 7})])
    with open(journal, "r+b") as f:
        f.truncate(0)
        f.write(frame(header.encode()) + frame(record))
        f.flush()
        os.fsync(f.fileno())
    assert journal.stat().st_ino == ino

    # The reader catches up, then commits durably itself.
    c.refresh()
    assert c.query("g2", "T", 0) == 7
    c.commit("g3", "T", 0, 9)
    c.persist()

    fresh = ConsumerOffsets.load(path)
    assert [fresh.query(g, "T", 0) for g in ("g1", "g2", "g3")] == [5, 7, 9]

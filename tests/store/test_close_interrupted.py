"""A SIGINT (Ctrl-C) during ``close()``: a later ``close()`` finishes the work.

The child process sends itself a real SIGINT at a chosen step of the close
(a wrapper around that step sends it, and the interpreter raises
KeyboardInterrupt at the next instruction), catches the KeyboardInterrupt,
calls ``close()`` again and exits. The parent then reopens the store: every
offset committed before the close (``sync=False`` included) must be there.
"""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from rocketstore import MessageStore, StoreConfig

CFG = {"mapped_file_size_commit_log": 64 * 1024, "mapped_file_size_consume_queue": 2000,
       "max_hash_slot_num": 64, "max_index_num": 256}

CHILD = textwrap.dedent("""
    import os, signal, sys
    import rocketstore.consumers.store_commits as commits_module
    from rocketstore import MessageStore, StoreConfig
    from rocketstore.config.files import TopicConfigs
    from rocketstore.consumers.offsets import ConsumerOffsets
    from rocketstore.services.base import ServiceThread

    path, what, where = sys.argv[1], sys.argv[2], sys.argv[3]
    cfg = StoreConfig(store_path=path, mapped_file_size_commit_log=64 * 1024,
                      mapped_file_size_consume_queue=2000, max_hash_slot_num=64,
                      max_index_num=256)
    store = MessageStore(cfg).start()
    commits_module.OFFSETS_PERSIST_INTERVAL = 3600.0  # only close() writes the offsets
    for i in range(12):
        store.put("T", b"m%d" % i, queue_id=i % 3)
    store.commit_offset("direct", "T", 1, 3)
    # "consumer": the group's one exclusive consumer; "member": a shared member.
    consumer = store.consumer("c", "T", exclusive=what == "consumer")
    got = consumer.poll(timeout=5, max_messages=6)
    assert len(got) == 6, got
    if what == "store":
        consumer.commit(sync=False)  # recorded, not written: close() writes it

    targets = {
        "service": (ServiceThread, "shutdown"),
        "topics": (TopicConfigs, "persist"),
        "offsets": (ConsumerOffsets, "persist"),
        "commit": (MessageStore, "commit_offsets"),
        "persist": (MessageStore, "persist_offsets"),
        "fenced": (MessageStore, "_commit_fenced"),
    }
    cls, name = targets[where]
    original = getattr(cls, name)
    fired = []

    def interrupted(*args, **kwargs):
        if not fired:
            fired.append(1)
            os.kill(os.getpid(), signal.SIGINT)
            # The KeyboardInterrupt is raised at one of the next instructions.
            for _ in range(1000):
                pass
        return original(*args, **kwargs)

    setattr(cls, name, interrupted)
    closing = store if what == "store" else consumer
    try:
        closing.close()
    except KeyboardInterrupt:
        print("interrupted", flush=True)
    assert fired, "the interrupted step never ran"
    closing.close()
    store.close()
    print("closed", flush=True)
""")


@pytest.mark.parametrize(("what", "where"), [
    ("store", "service"), ("store", "topics"), ("store", "offsets"),
    ("consumer", "commit"), ("consumer", "persist"), ("consumer", "offsets"),
    ("member", "fenced"), ("member", "offsets"),
])
def test_close_interrupted_by_sigint_is_finished_by_a_later_close(
    tmp_path: Path, what: str, where: str
) -> None:
    path = str(tmp_path / "store")
    p = subprocess.run([sys.executable, "-c", CHILD, path, what, where],
                       capture_output=True, text=True, timeout=120)
    assert p.returncode == 0, p.stderr[-3000:]
    assert p.stdout.split() == ["interrupted", "closed"], (p.stdout, p.stderr[-3000:])
    with MessageStore(StoreConfig(store_path=path, **CFG)) as store:
        assert store.query_offset("direct", "T", 1) == 3
        assert sum(store.query_offset("c", "T", q) for q in range(3)) == 6

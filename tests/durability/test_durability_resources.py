"""A resource that runs out and comes back never poisons the store.

Creating or mapping a file in dispatch (a consume-queue or index file) or in
the allocator (the next CommitLog file) that fails with ENOMEM, EMFILE,
ENFILE, ENOSPC, EDQUOT or EAGAIN is retried with backoff: ``running_flags``
says ``RESOURCE_WAIT`` naming what waits, puts that land in the CommitLog
meanwhile are acknowledged and become visible once the resource is back, and
the flag goes by itself. EIO at the same points, damage and a failed msync
still poison (docs/format.md, "Running flags").
"""

from __future__ import annotations

import errno
import json
import subprocess
import sys
import time
from collections.abc import Callable
from typing import Any

import pytest

from helpers.fault_fixtures import fail_points, opened, wait_dispatched, wait_for
from rocketstore import GetStatus, MessageStore, PutResult, PutStatus

__all__ = ["fail_points", "opened"]  # fixtures, imported for pytest

# -- the address-space limit, in a child process -------------------------------------

UNDER_RLIMIT_AS = r"""
import json, resource, sys, time
from rocketstore import FlushDiskType, MessageStore, PutStatus, StoreConfig

case, path = sys.argv[1], sys.argv[2]
cfg = StoreConfig(store_path=path, flush_disk_type=FlushDiskType.ASYNC_FLUSH,
                  mapped_file_size_commit_log=16 << 20,
                  mapped_file_size_consume_queue=20 * 300_000,
                  max_hash_slot_num=1000, max_index_num=4000)
store = MessageStore(cfg).start()
acked = []  # [queue_id, queue_offset, i, size]

def put(qid, i, size):
    r = store.put("A", b"%08d" % i * (size // 8), queue_id=qid, keys=["key%d" % i], check=False)
    if r.status is PutStatus.PUT_OK:
        acked.append([qid, r.queue_offset, i, size])
    return r

def vm_size():
    with open("/proc/self/status") as f:
        return next(int(l.split()[1]) * 1024 for l in f if l.startswith("VmSize:"))

def wait(cond, timeout):
    deadline = time.monotonic() + timeout
    while not cond() and time.monotonic() < deadline:
        time.sleep(0.01)
    return cond()

put(0, 0, 100)
assert wait(lambda: store.dispatch_behind_bytes() == 0, 30)
soft, hard = resource.getrlimit(resource.RLIMIT_AS)
resource.setrlimit(resource.RLIMIT_AS, (vm_size() + (100 << 20), hard))
i, failed = 1, None
while i < 100_000:
    # commitlog: 64 KiB messages roll a 16 MiB segment every 256 puts;
    # queue: every put opens a new queue (a new 6 MB queue file).
    if case == "commitlog":
        r = put(0, i, 64 << 10)
    else:
        r = put(i, i, 100)
        # One new queue at a time: dispatch reaches it before the next.
        wait(lambda: store.dispatch_behind_bytes() == 0 or store.running_flags, 30)
    i += 1
    if r.status is not PutStatus.PUT_OK or store.running_flags:
        failed = {"status": r.status.name, "flags": store.running_flags}
        break
# Go on putting while the resource is missing: what the CommitLog takes is
# acknowledged (into queues that exist when dispatch is what waits).
during = []
for _ in range(20):
    r = put(0, i, 100 if case == "queue" else 64 << 10)
    i += 1
    during.append(r.status.name)
time.sleep(0.5)
still = store.running_flags
resource.setrlimit(resource.RLIMIT_AS, (soft, hard))
later = []
for j in range(200):
    r = put(j % 4, i, 1000)
    i += 1
    later.append(r.status.name)
caught_up = wait(lambda: store.dispatch_behind_bytes() == 0 and not store.running_flags, 60)
missing_by_queue, missing_by_key = [], []
for qid, qoff, n, size in acked:
    body = b"%08d" % n * (size // 8)
    g = store.get_message("g", "A", qid, qoff, 1)
    if [m.body for m in g.messages] != [body]:
        missing_by_queue.append([qid, qoff, n])
    if [m.body for m in store.query_message("A", "key%d" % n)] != [body]:
        missing_by_key.append(n)
print(json.dumps({"behind": store.dispatch_behind_bytes(), "failed": failed, "during": during,
                  "still": still, "later": later, "caught_up": caught_up,
                  "flags_after": store.running_flags,
                  "acked": len(acked), "missing_by_queue": missing_by_queue,
                  "missing_by_key": missing_by_key}))
store.close()
"""


@pytest.mark.parametrize("case", ["commitlog", "queue"])
def test_address_space_that_comes_back(store_path: str, case: str) -> None:
    """RLIMIT_AS at the process size + 100 MiB: put until something fails,
    lift the limit, put 200 more. Whichever file could not be mapped (the
    next CommitLog segment, or a consume-queue file dispatch creates), the
    store waits instead of being poisoned and every later put succeeds."""
    child = subprocess.run(
        [sys.executable, "-c", UNDER_RLIMIT_AS, case, store_path],
        capture_output=True, text=True, timeout=300, check=False,
    )
    assert child.returncode == 0, child.stderr[-3000:]
    out = json.loads(child.stdout)
    failed = out["failed"]
    assert failed is not None, "nothing failed under the limit"
    waits = [f for f in failed["flags"] + out["still"] if f.startswith("RESOURCE_WAIT: ")]
    assert waits, failed
    if case == "commitlog":
        # The roll cannot map the next segment: that put is refused with a
        # status (nothing unwritten is acknowledged), and says it waits.
        assert failed["status"] == "CREATE_MAPPED_FILE_FAILED", failed
        assert "commitlog: " in waits[-1] and "Cannot allocate memory" in waits[-1], waits
    else:
        # Puts are taken; dispatch waits for the queue file.
        assert failed["status"] == "PUT_OK", failed
        assert out["during"] == ["PUT_OK"] * 20, out["during"]
        assert "dispatch: " in waits[-1] and "Cannot allocate memory" in waits[-1], waits
        assert out["still"] and all(f.startswith("RESOURCE_WAIT") for f in out["still"]), out
    assert out["later"] == ["PUT_OK"] * 200, out["later"]
    assert out["caught_up"], (out["behind"], out["flags_after"])
    assert out["flags_after"] == []
    assert out["missing_by_queue"] == [] and out["missing_by_key"] == [], out
    assert out["acked"] >= 200


# -- fail points at each creation ---------------------------------------------------------

#: Small files: a queue file holds 10 units, an index file 9 entries.
ROLLING: dict[str, Any] = {"mapped_file_size_consume_queue": 20 * 10, "max_index_num": 10}


def body_of(i: int) -> bytes:
    return b"body %06d;" % i * 3


#: What was acknowledged: (body, key, result).
Acked = list[tuple[bytes, str, PutResult]]


def put_one(store: MessageStore, i: int, acked: Acked, times: int = 1) -> PutResult:
    body = body_of(i) * times
    r = store.put("T", body, keys=[f"key{i}"], check=False)
    if r.status is PutStatus.PUT_OK:
        acked.append((body, f"key{i}", r))
    return r


def assert_all_readable(store: MessageStore, acked: Acked) -> None:
    for body, key, r in acked:
        g = store.get_message("g", "T", 0, r.queue_offset, 1)
        assert g.status is GetStatus.FOUND, (key, g.status)
        assert [m.body for m in g.messages] == [body], key
        assert [m.body for m in store.query_message("T", key)] == [body], key


def resource_waits(store: MessageStore) -> list[str]:
    return [f for f in store.running_flags if f.startswith("RESOURCE_WAIT")]


def provoke(store: MessageStore, point: str, acked: Acked, start: int) -> int:
    """Puts what needs a new file of the kind ``point`` fails; returns the next i."""
    i = start
    if point == "allocate_file":
        # Until the roll to the next CommitLog segment is refused.
        for _ in range(200):
            r = put_one(store, i, acked, times=100)
            i += 1
            if r.status is not PutStatus.PUT_OK:
                assert r.status is PutStatus.CREATE_MAPPED_FILE_FAILED, r.status
                return i
        raise AssertionError("no roll was refused")
    # Past the end of the first queue file (10 units) and index file (9
    # entries: each message brings its key and its UNIQ_KEY).
    for _ in range(14):
        assert put_one(store, i, acked).status is PutStatus.PUT_OK
        i += 1
    return i


@pytest.mark.parametrize("err", [errno.ENOMEM, errno.EMFILE, errno.ENOSPC],
                         ids=["ENOMEM", "EMFILE", "ENOSPC"])
@pytest.mark.parametrize("point", ["create_cq_file", "create_index_file", "allocate_file"])
def test_resource_error_waits_and_resumes_by_itself(
    fail_points: Callable[[str, int], None],
    opened: Callable[..., MessageStore],
    point: str,
    err: int,
) -> None:
    store = opened(**ROLLING)
    acked: Acked = []
    for i in range(3):
        assert put_one(store, i, acked).status is PutStatus.PUT_OK
    wait_dispatched(store)
    fail_points(point, err)
    i = provoke(store, point, acked, 3)
    # Without the allocator thread (the default) the put that rolls makes
    # the next CommitLog file.
    who = "commitlog: " if point == "allocate_file" else "dispatch: "
    wait_for(lambda: any(who in f for f in resource_waits(store)), 10.0, "RESOURCE_WAIT")
    why = " ".join(resource_waits(store))
    assert f"(os error {err})" in why and "waits" in why, why
    # Waiting is not failing: puts are taken, nothing is poisoned, and the
    # wait goes on while the resource is missing.
    assert store.is_writeable, store.running_flags
    assert all(f.startswith("RESOURCE_WAIT") for f in store.running_flags), store.running_flags
    if point != "allocate_file":
        for _ in range(5):
            assert put_one(store, i, acked).status is PutStatus.PUT_OK
            i += 1
        assert store.dispatch_behind_bytes() > 0
        # flush() writes what is written and says the queues are behind,
        # without poisoning.
        with pytest.raises(OSError) as ei:
            store.flush()
        assert ei.value.errno == err
        assert store.is_writeable, store.running_flags
    time.sleep(0.3)
    assert resource_waits(store), "the wait ended while the resource was still missing"

    fail_points(point, 0)
    if point == "allocate_file":
        # The next put that rolls makes the file (and ends the wait).
        assert put_one(store, i, acked).status is PutStatus.PUT_OK
        i += 1
    wait_for(lambda: not store.running_flags, 10.0, "RESOURCE_WAIT cleared")
    wait_dispatched(store)
    for _ in range(3):
        assert put_one(store, i, acked).status is PutStatus.PUT_OK
        i += 1
    wait_dispatched(store)
    assert store.running_flags == []
    assert_all_readable(store, acked)


def test_allocator_thread_retries_a_segment_by_itself(
    fail_points: Callable[[str, int], None],
    opened: Callable[..., MessageStore],
) -> None:
    """With the allocator thread (warm-up on), the next CommitLog file that
    cannot be made is made again in the background, with backoff, until it
    is: once the resource is back the flag goes without a put asking."""
    store = opened(**ROLLING, warm_mapped_file_enable=True)
    acked: Acked = []
    fail_points("allocate_file", errno.ENOMEM)
    provoke(store, "allocate_file", acked, 0)
    wait_for(lambda: any("allocate: " in f for f in resource_waits(store)), 10.0, "allocate")
    assert store.is_writeable
    fail_points("allocate_file", 0)
    # No put: the allocator's own retry clears its wait.
    wait_for(lambda: not any("allocate: " in f for f in resource_waits(store)), 10.0,
             "the allocator retried by itself")
    for i in range(1000, 1003):
        assert put_one(store, i, acked).status is PutStatus.PUT_OK
    wait_dispatched(store)
    assert store.running_flags == []
    assert_all_readable(store, acked)


@pytest.mark.parametrize("point", ["create_cq_file", "create_index_file"])
def test_eio_creating_a_queue_or_index_file_still_poisons(
    fail_points: Callable[[str, int], None],
    opened: Callable[..., MessageStore],
    point: str,
) -> None:
    store = opened(**ROLLING)
    acked: Acked = []
    put_one(store, 0, acked)
    wait_dispatched(store)
    fail_points(point, errno.EIO)
    for i in range(1, 15):
        put_one(store, i, acked)
    wait_for(lambda: not store.is_writeable, 10.0, "poisoned")
    flag = "WRITE_LOGICS_QUEUE_ERROR" if point == "create_cq_file" else "WRITE_INDEX_FILE_ERROR"
    assert store.running_flags[0].startswith(f"{flag}: dispatch failed: "), store.running_flags
    assert not resource_waits(store)
    fail_points(point, 0)
    time.sleep(0.3)
    assert not store.is_writeable, "an I/O error is not a resource that comes back"
    assert store.put("T", b"refused", check=False).status is PutStatus.SERVICE_NOT_AVAILABLE


def test_eio_making_a_segment_is_refused_and_not_waited_for(
    fail_points: Callable[[str, int], None],
    opened: Callable[..., MessageStore],
) -> None:
    """EIO when the allocator makes the next CommitLog file: the put that
    needs it is refused with a status, and nothing pretends the disk will
    come back (no RESOURCE_WAIT, no background retry)."""
    store = opened(**ROLLING)
    acked: Acked = []
    fail_points("allocate_file", errno.EIO)
    provoke(store, "allocate_file", acked, 0)
    time.sleep(0.3)
    assert not resource_waits(store), store.running_flags


def test_failed_msync_still_poisons_while_dispatch_waits(
    fail_points: Callable[[str, int], None],
    opened: Callable[..., MessageStore],
) -> None:
    """A failed msync poisons even when a resource wait is going on: after a
    failed flush the dirty pages may be gone."""
    store = opened(**ROLLING, flush_interval_commit_log=20, flush_commit_log_thorough_interval=20)
    acked: Acked = []
    put_one(store, 0, acked)
    wait_dispatched(store)
    fail_points("create_cq_file", errno.ENOMEM)
    for i in range(1, 15):
        put_one(store, i, acked)
    wait_for(lambda: bool(resource_waits(store)), 10.0, "RESOURCE_WAIT")
    fail_points("msync", errno.EIO)
    wait_for(lambda: not store.is_writeable, 10.0, "poisoned by the failed msync")
    assert any(f.startswith("FLUSH_FAILED: ") for f in store.running_flags), store.running_flags
    fail_points("msync", 0)
    fail_points("create_cq_file", 0)
    time.sleep(0.3)
    assert not store.is_writeable
    assert store.put("T", b"refused", check=False).status is PutStatus.SERVICE_NOT_AVAILABLE

"""What asyncio costs: awaited puts against blocking ones, and the wake-up.

    python benches/python/aio_put.py [--n 20000]

Prints, for 100-byte bodies on the real disk (a temporary directory):

- ASYNC_FLUSH: ``put`` in a loop; ``await aput`` one after the other; 100
  ``aput`` at a time (``asyncio.gather``); ``await aput_batch`` of 1000;
- SYNC_FLUSH: ``put`` in a loop against 100 ``aput`` at a time (puts waiting
  together share one flush);
- the wake-up: from a ``put`` in the writer's process to the return of an
  ``AsyncConsumer.poll`` that was waiting (median and worst of 200).

Measure a release build (``maturin develop --release``).
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import tempfile
import time
import warnings
from typing import Any

from rocketstore import FlushDiskType, MessageStore, StoreConfig, UnknownTopicWarning

BODY = b"x" * 100


def _config(path: str, **kw: Any) -> StoreConfig:
    return StoreConfig(store_path=path, mapped_file_size_commit_log=256 << 20,
                       mapped_file_size_consume_queue=20 * 300_000,
                       max_hash_slot_num=1000, max_index_num=4000, **kw)


def _rate(n: int, t0: float) -> str:
    return f"{n / (time.perf_counter() - t0):,.0f} msg/s"


async def _async_flush(store: MessageStore, n: int) -> None:
    t0 = time.perf_counter()
    for _ in range(n):
        await store.aput("t", BODY)
    print(f"  await aput, one after the other  {_rate(n, t0)}")
    t0 = time.perf_counter()
    for _ in range(n // 100):
        await asyncio.gather(*(store.aput("t", BODY) for _ in range(100)))
    print(f"  100 aput at a time (gather)      {_rate(n // 100 * 100, t0)}")
    t0 = time.perf_counter()
    for _ in range(n // 1000):
        await store.aput_batch("t", [BODY] * 1000)
    print(f"  await aput_batch of 1000         {_rate(n // 1000 * 1000, t0)}")


async def _wake(store: MessageStore, rounds: int = 200) -> None:
    c = store.async_consumer("g", "wake", start="latest")
    seconds = []
    for _ in range(rounds):
        poll = asyncio.create_task(c.poll(timeout=10.0))
        while not c._waiting:
            await asyncio.sleep(0)
        t0 = time.perf_counter()
        store.put("wake", BODY)
        assert len(await poll) == 1
        seconds.append(time.perf_counter() - t0)
    await c.close()
    print(f"wake-up, put to poll returning: median {statistics.median(seconds) * 1e6:,.0f} us, "
          f"worst {max(seconds) * 1e6:,.0f} us ({rounds} rounds)")


async def _sync_flush(store: MessageStore, n: int) -> None:
    t0 = time.perf_counter()
    for _ in range(n // 100):
        await asyncio.gather(*(store.aput("t", BODY) for _ in range(100)))
    print(f"  100 aput at a time (gather)      {_rate(n // 100 * 100, t0)}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--n", type=int, default=20_000, help="puts per ASYNC_FLUSH case")
    args = ap.parse_args()
    warnings.simplefilter("ignore", UnknownTopicWarning)
    with tempfile.TemporaryDirectory() as d, MessageStore(_config(d)) as store:
        print("ASYNC_FLUSH")
        t0 = time.perf_counter()
        for _ in range(args.n):
            store.put("t", BODY)
        print(f"  put (blocking)                   {_rate(args.n, t0)}")
        asyncio.run(_async_flush(store, args.n))
        asyncio.run(_wake(store))
    sync_n = 1000
    with tempfile.TemporaryDirectory() as d, MessageStore(
            _config(d, flush_disk_type=FlushDiskType.SYNC_FLUSH)) as store:
        print("SYNC_FLUSH")
        t0 = time.perf_counter()
        for _ in range(sync_n):
            store.put("t", BODY)
        print(f"  put (blocking)                   {_rate(sync_n, t0)}")
        asyncio.run(_sync_flush(store, sync_n))


if __name__ == "__main__":
    main()

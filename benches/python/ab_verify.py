"""``rocketstore verify`` before and after the engine verifier, in one run.

Run: ``python ab_verify.py [BEFORE_REV] [ROUNDS]`` from a checkout (BEFORE_REV
defaults to the last commit whose ``cli.py`` walked records in Python). The
script builds one store of 1,000,000 messages (about 130 bytes each, one key
per message, 64 MiB segments) in a temporary directory on the real disk
(``ROCKETSTORE_DISK_BENCH_DIR``, else the system temp dir), then times
``verify --json`` of the command line at BEFORE_REV (loaded from git) and of
this build, alternating, so host load hits both alike. Both must agree on the
record count. Prints the medians and the ratio as a RESULTS.md row.
"""

from __future__ import annotations

import importlib.util
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from types import ModuleType

from click.testing import CliRunner

from rocketstore import Message, MessageStore, StoreConfig
from rocketstore.cli import main as cli_after

N = 1_000_000
BATCH = 1000
BEFORE_REV = "506b185"


def build_store(path: Path) -> None:
    cfg = StoreConfig(store_path=str(path), mapped_file_size_commit_log=64 << 20,
                      mapped_file_size_consume_queue=20 * 300_000,
                      max_hash_slot_num=500_000, max_index_num=2_000_000)
    with MessageStore(cfg) as store:
        for start in range(0, N, BATCH):
            batch = [Message("bench", b"x" * 40, queue_id=i % 4, keys=[f"key-{i}"])
                     for i in range(start, start + BATCH)]
            store.put_messages(batch)
        store.flush()


def load_before(rev: str) -> ModuleType:
    root = Path(__file__).resolve().parents[2]
    text = subprocess.run(["git", "show", f"{rev}:python/rocketstore/cli.py"], cwd=root,
                          check=True, capture_output=True, text=True).stdout
    fd, name = tempfile.mkstemp(suffix="_cli_before.py")
    with os.fdopen(fd, "w") as f:
        f.write(text)
    spec = importlib.util.spec_from_file_location("rocketstore_cli_before", name)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    os.unlink(name)
    return module


def timed(command: object, path: Path) -> tuple[float, dict[str, object]]:
    t0 = time.perf_counter()
    result = CliRunner().invoke(command, ["verify", str(path), "--json"],  # type: ignore[arg-type]
                                catch_exceptions=False)
    seconds = time.perf_counter() - t0
    if result.exit_code != 0:
        raise SystemExit(f"verify failed: {result.output}")
    data: dict[str, object] = json.loads(result.stdout)
    return seconds, data


def main() -> None:
    rev = sys.argv[1] if len(sys.argv) > 1 else BEFORE_REV
    rounds = int(sys.argv[2]) if len(sys.argv) > 2 else 3
    before = load_before(rev).main
    base = os.environ.get("ROCKETSTORE_DISK_BENCH_DIR")
    with tempfile.TemporaryDirectory(dir=base) as d:
        path = Path(d) / "store"
        t0 = time.perf_counter()
        build_store(path)
        print(f"built {N:,} messages in {time.perf_counter() - t0:.1f}s at {path}", flush=True)
        times: dict[str, list[float]] = {"before": [], "after": []}
        for r in range(rounds):
            for name, command in (("before", before), ("after", cli_after)):
                seconds, data = timed(command, path)
                if data["records"] != N:
                    raise SystemExit(f"{name} saw {data['records']} records, not {N}")
                times[name].append(seconds)
                print(f"round {r + 1} {name}: {seconds:.2f}s", flush=True)
    b, a = statistics.median(times["before"]), statistics.median(times["after"])
    print(f"| `rocketstore verify`, {N:,}-message store (`ab_verify.py`, {rounds} rounds) "
          f"| before ({rev}) {b:.2f} s; after {a:.2f} s | ≥ 5x faster | {b / a:.1f}x |")


if __name__ == "__main__":
    main()

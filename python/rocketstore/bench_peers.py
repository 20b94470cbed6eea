"""``rocketstore bench --peers``: the same run against other embedded queues.

Each system gets the same bodies, in a fresh directory under one temporary
directory on the real disk (under the current directory unless told
otherwise; never tmpfs), one after the other in one process:

- **put**: one call per message (rocketstore ``put(topic, body)``, ASYNC_FLUSH);
- **get**: every message read back once, touching its bytes: rocketstore
  ``get_message`` batches of 32, raw sqlite3 ``SELECT ... LIMIT 32`` by rowid
  (both non-destructive reads); persist-queue ``get``, litequeue ``pop`` and
  ``Deque.popleft`` (each queue's own consuming read);
- **batch**: batches of ``batch`` messages: rocketstore ``put_batch``, sqlite3
  ``executemany`` in one transaction, persist-queue ``put``s committed by one
  ``task_done``, litequeue ``put``s in one ``transaction()``, ``Deque.extend``
  in one ``transact()``.

Raw sqlite3 is WAL, ``synchronous=NORMAL``, autocommit, one ``INSERT`` per
message for put; the queues keep their own defaults. A phase stops after
``budget`` seconds and is rated on the messages it did. Before the put
phase each system takes a few untimed puts (5 % of the count, at most 1,000),
so file and table creation is not timed as steady-state throughput. Peers come from the
``bench`` extra (``pip install 'rocketstore[bench]'``); a missing one is
reported as not installed.
"""

from __future__ import annotations

import dataclasses
import importlib
import os
import shutil
import sqlite3
import tempfile
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Protocol

from rocketstore.config.store_config import StoreConfig
from rocketstore.store import MessageStore

__all__ = ["PEERS", "PeerResult", "Phase", "run_peers"]

TOPIC = "bench"


@dataclasses.dataclass(slots=True)
class Phase:
    """What one phase did."""

    messages: int
    seconds: float

    @property
    def rate(self) -> float:
        """Messages per second (0 when nothing was timed)."""
        return self.messages / self.seconds if self.seconds > 0 else 0.0

    def as_dict(self) -> dict[str, Any]:
        return {"messages": self.messages, "seconds": self.seconds, "msgs_per_s": self.rate}


@dataclasses.dataclass(slots=True)
class PeerResult:
    """One system's row: its phases, or why it was not measured."""

    name: str
    version: str | None
    status: str  # "ok", "not installed", or "error: ..."
    put: Phase | None = None
    get: Phase | None = None
    batch: Phase | None = None

    def as_dict(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "version": self.version,
            "status": self.status,
            **{k: (p.as_dict() if p is not None else None)
               for k, p in (("put", self.put), ("get", self.get), ("batch", self.batch))},
        }


class _Queue(Protocol):
    def put(self, body: bytes) -> None: ...
    def get_all(self, n: int) -> int: ...
    def put_batch(self, bodies: list[bytes]) -> None: ...
    def close(self) -> None: ...


# -- the systems ---------------------------------------------------------------------


class _Rocketstore:
    def __init__(self, path: Path) -> None:
        cfg = StoreConfig(store_path=str(path), mapped_file_size_commit_log=128 << 20)
        self.store = MessageStore(cfg).start()
        self._put = self.store.put

    def put(self, body: bytes) -> None:
        self._put(TOPIC, body)

    def get_all(self, n: int) -> int:
        self.store.flush()  # the queue must be dispatched before it is read
        get = self.store.get_message
        off = seen = 0
        t0 = time.perf_counter()
        while seen < n:
            r = get("bench", TOPIC, 0, off, min(32, n - seen))
            if not r.messages:
                break
            for m in r.messages:
                seen += len(m.body) >= 0
            off = r.next_begin_offset
        self.get_seconds = time.perf_counter() - t0
        return seen

    def put_batch(self, bodies: list[bytes]) -> None:
        self.store.put_batch(TOPIC, bodies)  # raises MessageRefusedError if refused

    def close(self) -> None:
        self.store.shutdown()


class _Sqlite:
    def __init__(self, path: Path) -> None:
        self.conn = sqlite3.connect(path / "queue.db", isolation_level=None)
        self.conn.execute("PRAGMA journal_mode=WAL")
        self.conn.execute("PRAGMA synchronous=NORMAL")
        self.conn.execute("CREATE TABLE q (id INTEGER PRIMARY KEY, body BLOB NOT NULL)")

    def put(self, body: bytes) -> None:
        self.conn.execute("INSERT INTO q (body) VALUES (?)", (body,))

    def get_all(self, n: int) -> int:
        last = seen = 0
        while seen < n:
            rows = self.conn.execute(
                "SELECT id, body FROM q WHERE id > ? ORDER BY id LIMIT ?",
                (last, min(32, n - seen))).fetchall()
            if not rows:
                break
            for rid, body in rows:
                seen += len(body) >= 0
                last = rid
        return seen

    def put_batch(self, bodies: list[bytes]) -> None:
        self.conn.execute("BEGIN")
        self.conn.executemany("INSERT INTO q (body) VALUES (?)", ((b,) for b in bodies))
        self.conn.execute("COMMIT")

    def close(self) -> None:
        self.conn.close()


class _PersistQueue:
    def __init__(self, path: Path) -> None:
        mod = importlib.import_module("persistqueue")
        self.q = mod.SQLiteQueue(str(path / "q"), auto_commit=True)
        self.qb = mod.SQLiteQueue(str(path / "qb"), auto_commit=False)

    def put(self, body: bytes) -> None:
        self.q.put(body)

    def get_all(self, n: int) -> int:
        seen = 0
        for _ in range(n):
            seen += len(self.q.get(block=False)) >= 0
        return seen

    def put_batch(self, bodies: list[bytes]) -> None:
        for b in bodies:
            self.qb.put(b)
        self.qb.task_done()

    def close(self) -> None:
        self.q.close()
        self.qb.close()


class _LiteQueue:
    def __init__(self, path: Path) -> None:
        mod = importlib.import_module("litequeue")
        self.q = mod.LiteQueue(str(path / "q.db"))
        self.qb = mod.LiteQueue(str(path / "qb.db"))

    def put(self, body: bytes) -> None:
        self.q.put(body.decode("latin-1"))  # litequeue stores text

    def get_all(self, n: int) -> int:
        seen = 0
        pop = self.q.pop  # the consuming read (marks the message locked)
        for _ in range(n):
            m = pop()
            if m is None:
                break
            seen += len(m.data) >= 0
        return seen

    def put_batch(self, bodies: list[bytes]) -> None:
        with self.qb.transaction():
            for b in bodies:
                self.qb.put(b.decode("latin-1"))

    def close(self) -> None:
        self.q.close()
        self.qb.close()


class _Deque:
    def __init__(self, path: Path) -> None:
        mod = importlib.import_module("diskcache")
        self.q = mod.Deque(directory=str(path / "q"))
        self.qb = mod.Deque(directory=str(path / "qb"))

    def put(self, body: bytes) -> None:
        self.q.append(body)

    def get_all(self, n: int) -> int:
        seen = 0
        for _ in range(n):
            seen += len(self.q.popleft()) >= 0
        return seen

    def put_batch(self, bodies: list[bytes]) -> None:
        with self.qb.transact():
            self.qb.extend(bodies)

    def close(self) -> None:
        self.q.cache.close()
        self.qb.cache.close()


#: (name shown, module whose version is reported or None, factory).
PEERS: tuple[tuple[str, str | None, Callable[[Path], _Queue]], ...] = (
    ("rocketstore", None, _Rocketstore),
    ("sqlite3", None, _Sqlite),
    ("persist-queue", "persistqueue", _PersistQueue),
    ("litequeue", "litequeue", _LiteQueue),
    ("diskcache.Deque", "diskcache", _Deque),
)

_DISTRIBUTIONS = {"persistqueue": "persist-queue", "litequeue": "litequeue",
                  "diskcache": "diskcache"}


def _version(name: str, module: str | None) -> str | None:
    from importlib import metadata

    if name == "rocketstore":
        from rocketstore import __version__

        return __version__
    if module is None:
        return sqlite3.sqlite_version
    try:
        return metadata.version(_DISTRIBUTIONS.get(module, module))
    except metadata.PackageNotFoundError:
        return None


@contextmanager
def _scratch(base: Path | None) -> Iterator[Path]:
    root = Path(tempfile.mkdtemp(prefix="rocketstore-peers-", dir=base or os.getcwd()))
    try:
        yield root
    finally:
        shutil.rmtree(root, ignore_errors=True)


def _timed(n: int, budget: float, step: Callable[[int], int]) -> Phase:
    """Calls ``step(i)`` (returning messages done) until ``n`` or ``budget`` s."""
    done = 0
    t0 = time.perf_counter()
    deadline = t0 + budget
    while done < n:
        done += step(done)
        if (done & 0x3FF) == 0 and time.perf_counter() > deadline:
            break
    return Phase(done, time.perf_counter() - t0)


def _warm_up(n: int) -> int:
    """Messages put untimed before the put phase: 5 % of ``n``, 1 to 1,000."""
    return max(1, min(1000, n // 20))


def _measure(factory: Callable[[Path], _Queue], root: Path, n: int, body: bytes, batch: int,
             budget: float, phase: Callable[[str], None] = lambda _: None,
             ) -> tuple[Phase, Phase, Phase]:
    root.mkdir()
    q = factory(root)
    try:
        def one(_: int) -> int:
            q.put(body)
            return 1

        # Untimed warm-up: each system creates its files, tables and caches
        # on its first calls (rocketstore its first CommitLog file, 2-5 ms
        # here); the phases measure the steady state that follows.
        phase("put")
        for _ in range(_warm_up(n)):
            q.put(body)
        put = _timed(n, budget, one)
        phase("get")
        t0 = time.perf_counter()
        got = q.get_all(put.messages)
        get_s = getattr(q, "get_seconds", None) or (time.perf_counter() - t0)
        get = Phase(got, get_s)
        bodies = [body] * batch

        def chunk(done: int) -> int:
            k = min(batch, n - done)
            q.put_batch(bodies if k == batch else bodies[:k])
            return k

        phase("batch")
        bat = _timed(n, budget, chunk)
        return put, get, bat
    finally:
        q.close()


def run_peers(n: int, body_size: int = 100, *, base: Path | None = None, batch: int = 1000,
              budget: float = 10.0,
              peers: tuple[tuple[str, str | None, Callable[[Path], _Queue]], ...] = PEERS,
              progress: Callable[[str, str], None] | None = None,
              ) -> list[PeerResult]:
    """Measures every system in ``peers`` (see the module docstring).

    ``progress(system, phase)`` is called as each phase starts (``phase`` is
    ``put``, ``get`` or ``batch``; ``done`` once a system is finished or
    skipped).
    """
    def report(system: str, what: str) -> None:
        if progress is not None:
            progress(system, what)

    body = (bytes(range(256)) * (body_size // 256 + 1))[:body_size]
    out: list[PeerResult] = []
    with _scratch(base) as root:
        for i, (name, module, factory) in enumerate(peers):
            version = _version(name, module)
            if module is not None:
                try:
                    importlib.import_module(module)
                except ImportError:
                    out.append(PeerResult(name, None, "not installed"))
                    report(name, "done")
                    continue
            def phase(what: str, name: str = name) -> None:
                report(name, what)

            try:
                put, get, bat = _measure(factory, root / f"p{i}", n, body, batch, budget, phase)
            except Exception as e:  # a peer's failure is reported, not fatal
                out.append(PeerResult(name, version, f"error: {type(e).__name__}: {e}"))
                report(name, "done")
                continue
            out.append(PeerResult(name, version, "ok", put, get, bat))
            report(name, "done")
    return out


def ratios(results: list[PeerResult]) -> dict[str, dict[str, float | None]]:
    """rocketstore's rate over each peer's, per phase (None if not measured)."""
    ours = results[0]
    table: dict[str, dict[str, float | None]] = {}
    for r in results[1:]:
        row: dict[str, float | None] = {}
        for k in ("put", "get", "batch"):
            a, b = getattr(ours, k), getattr(r, k)
            row[k] = a.rate / b.rate if a is not None and b is not None and b.rate > 0 else None
        table[r.name] = row
    return table


def summary(results: list[PeerResult], n: int, body_size: int, batch: int) -> dict[str, Any]:
    """A JSON-ready summary with the ratios."""
    ours = results[0]
    sqlite = next((r for r in results if r.name.startswith("sqlite3")), None)
    batch_vs_sqlite_put = (ours.batch.rate / sqlite.put.rate
                           if ours.batch and sqlite and sqlite.put and sqlite.put.rate else None)
    return {
        "messages": n,
        "body_size": body_size,
        "batch_size": batch,
        "systems": [r.as_dict() for r in results],
        "rocketstore_over": ratios(results),
        "put_batch_over_sqlite3_put": batch_vs_sqlite_put,
    }


def _compact(rate: float) -> str:
    """A rate in at most 6 characters: ``2.65M``, ``94.1k``, ``1,051``."""
    for scale, unit in ((1e6, "M"), (1e3, "k")):
        v = rate / scale
        if round(v, 2) >= 1 and (unit == "M" or round(v, 1) >= 10):
            decimals = 2 if round(v, 2) < 10 else 1 if round(v, 1) < 100 else 0
            return f"{v:.{decimals}f}{unit}"
    return f"{rate:,.0f}"


def _ratio(x: float) -> str:
    """rocketstore's rate over a peer's: ``28.2x``, ``2471x``."""
    return f"{x:.1f}x" if x < 100 else f"{x:.0f}x"


def print_table(s: dict[str, Any], console: Any) -> None:
    """Prints the summary as a table that fits 80 columns (``console`` is a
    rich Console); rates are rounded to three digits (``2.65M``: 2.65
    million msg/s), ``--json`` has them in full."""
    from rich import box
    from rich.table import Table

    table = Table(title="rocketstore bench --peers", title_justify="left", box=box.SIMPLE_HEAD,
                  caption=f"msg/s; {s['messages']:,} messages, {s['body_size']} B bodies, "
                          f"batches of {s['batch_size']}, real disk. x: rocketstore's rate "
                          "over the row's. --json: every number in full.",
                  caption_justify="left")
    table.add_column("system", style="bold", overflow="fold")
    for k in ("put", "get", "batch"):
        table.add_column(k, justify="right", no_wrap=True)
        table.add_column("x", justify="right", no_wrap=True)
    over = s["rocketstore_over"]
    errors: list[str] = []
    for sysd in s["systems"]:
        name = sysd["name"] + (f" {sysd['version']}" if sysd["version"] else "")
        if sysd["status"] != "ok":
            short = "not installed" if sysd["status"] == "not installed" else "failed"
            if short == "failed":
                errors.append(f"{name}: {sysd['status']}")
            table.add_row(name, short, "", "", "", "", "")
            continue
        cells: list[str] = []
        for k in ("put", "get", "batch"):
            cells.append(_compact(sysd[k]["msgs_per_s"]))
            x = over.get(sysd["name"], {}).get(k)
            cells.append(_ratio(x) if x is not None else "")
        table.add_row(name, *cells)
    console.print(table)
    for e in errors:
        console.print(e, markup=False, soft_wrap=True)
    if s["put_batch_over_sqlite3_put"] is not None:
        console.print(f"put_batch over sqlite3's put: {s['put_batch_over_sqlite3_put']:,.0f}x")


def _run_with_progress(count: int, body_size: int, path: Path | None) -> list[PeerResult]:
    """``run_peers`` with a progress bar on stderr (when it is a terminal):
    one step per phase of each system, naming the one running."""
    from rich.console import Console
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    err = Console(stderr=True)
    phases = ("put", "get", "batch")
    with Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(),
                  TimeElapsedColumn(), console=err, transient=True,
                  disable=not err.is_terminal) as bar:
        task = bar.add_task("starting", total=len(PEERS) * len(phases))
        finished: dict[str, int] = {}

        def progress(system: str, what: str) -> None:
            # Phases finished so far: those before the one starting.
            if what == "done":
                finished[system] = len(phases)
            else:
                finished[system] = phases.index(what)
                bar.update(task, description=f"{system}: {what}")
            bar.update(task, completed=sum(finished.values()))

        return run_peers(count, body_size, base=path, progress=progress)


def cli(ctx: Any, path: Path | None, count: int, body_size: int, as_json: bool,
        console: Any) -> None:
    """``rocketstore bench --peers`` (``ctx`` is the click context)."""
    import json

    from click.core import ParameterSource

    if ctx.get_parameter_source("count") is ParameterSource.DEFAULT:
        count = 20_000
    if ctx.get_parameter_source("body_size") is ParameterSource.DEFAULT:
        body_size = 100
    if path is not None:
        path.mkdir(parents=True, exist_ok=True)
    results = _run_with_progress(count, body_size, path)
    s = summary(results, count, body_size, 1000)
    if as_json:
        print(json.dumps(s, indent=2))
    else:
        print_table(s, console)
    if results[0].status != "ok":
        ctx.exit(1)

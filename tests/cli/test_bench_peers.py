"""``rocketstore bench --peers`` with a tiny message count."""

from __future__ import annotations

import json
from pathlib import Path

from click.testing import CliRunner

from rocketstore import bench_peers
from rocketstore.cli import main


def test_bench_peers_cli_json(tmp_path: Path) -> None:
    r = CliRunner().invoke(main, ["bench", "--peers", "-n", "60", "--json", str(tmp_path / "w")])
    assert r.exit_code == 0, r.output
    s = json.loads(r.stdout)
    names = [x["name"] for x in s["systems"]]
    assert names == ["rocketstore", "sqlite3", "persist-queue", "litequeue", "diskcache.Deque"]
    by = {x["name"]: x for x in s["systems"]}
    for name in ("rocketstore", "sqlite3"):
        x = by[name]
        assert x["status"] == "ok"
        assert x["put"]["messages"] == x["get"]["messages"] == x["batch"]["messages"] == 60
        assert x["put"]["msgs_per_s"] > 0
    for x in s["systems"][2:]:
        assert x["status"] in ("ok", "not installed"), x
        if x["status"] == "ok":
            assert x["get"]["messages"] == 60
            assert s["rocketstore_over"][x["name"]]["put"] > 0
    assert s["put_batch_over_sqlite3_put"] > 0
    # The scratch directory is removed.
    assert list((tmp_path / "w").iterdir()) == []


def test_bench_peers_table(tmp_path: Path) -> None:
    r = CliRunner().invoke(main, ["bench", "--peers", "-n", "40", str(tmp_path)],
                           env={"COLUMNS": "140"})
    assert r.exit_code == 0, r.output
    assert "rocketstore bench --peers" in r.output
    assert "sqlite3" in r.output and "put_batch over sqlite3's put" in r.output


def test_missing_peer_is_reported_not_installed(tmp_path: Path) -> None:
    peers = (bench_peers.PEERS[0],
             ("nosuchqueue", "rocketstore_no_such_module", bench_peers.PEERS[1][2]))
    res = bench_peers.run_peers(30, base=tmp_path, peers=peers)
    assert [r.status for r in res] == ["ok", "not installed"]
    assert res[1].put is None
    s = bench_peers.summary(res, 30, 100, 1000)
    assert s["rocketstore_over"]["nosuchqueue"] == {"put": None, "get": None, "batch": None}


def test_a_failing_peer_is_reported(tmp_path: Path) -> None:
    def broken(path: Path) -> bench_peers._Sqlite:
        raise OSError("disk on fire")

    res = bench_peers.run_peers(10, base=tmp_path,
                                peers=(bench_peers.PEERS[0], ("broken", None, broken)))
    assert res[1].status == "error: OSError: disk on fire"
    assert res[0].status == "ok"


def _summary_with_big_numbers() -> dict[str, object]:
    def sysd(name: str, version: str, put: float, get: float, batch: float) -> dict[str, object]:
        return {"name": name, "version": version, "status": "ok",
                "put": {"msgs_per_s": put}, "get": {"msgs_per_s": get},
                "batch": {"msgs_per_s": batch}}

    return {
        "messages": 20_000, "body_size": 100, "batch_size": 1000,
        "put_batch_over_sqlite3_put": 253.0,
        "systems": [sysd("rocketstore", "0.1.0", 2_652_870, 4_982_283, 123_763_327),
                    sysd("sqlite3", "3.40.1", 94_071, 2_242_997, 1_086_196),
                    sysd("diskcache.Deque", "5.6.3", 22_851, 1_609_123, 61_966)],
        "rocketstore_over": {"sqlite3": {"put": 28.2, "get": 2.2, "batch": 21.9},
                             "diskcache.Deque": {"put": 116.1, "get": 4741.6,
                                                 "batch": 12471.4}},
    }


def test_the_table_fits_80_columns_without_cutting_numbers() -> None:
    from rich.console import Console

    console = Console(width=80, record=True)
    bench_peers.print_table(_summary_with_big_numbers(), console)
    text = console.export_text()
    assert max(len(line) for line in text.splitlines()) <= 80
    assert "…" not in text
    for cell in ("2.65M", "4.98M", "124M", "94.1k", "1.61M", "28.2x", "4742x", "12471x",
                 "diskcache.Deque 5.6.3"):
        assert cell in text, (cell, text)


def test_rates_keep_three_digits() -> None:
    assert [bench_peers._compact(v) for v in (2_652_870, 94_071, 28_979, 9_384, 5)] == [
        "2.65M", "94.1k", "29.0k", "9,384", "5"]


def test_run_peers_reports_each_phase(tmp_path: Path) -> None:
    seen: list[tuple[str, str]] = []
    peers = (bench_peers.PEERS[0],
             ("nosuchqueue", "rocketstore_no_such_module", bench_peers.PEERS[1][2]))
    bench_peers.run_peers(20, base=tmp_path, peers=peers,
                          progress=lambda system, phase: seen.append((system, phase)))
    assert seen == [("rocketstore", "put"), ("rocketstore", "get"), ("rocketstore", "batch"),
                    ("rocketstore", "done"), ("nosuchqueue", "done")]

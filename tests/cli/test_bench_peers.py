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

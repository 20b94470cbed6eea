"""Summary of a ``benches/run_all.sh`` log directory.

Run: ``python benches/summarize.py LOG_DIR``. Prints the criterion
throughputs (median), the pytest-benchmark rates and latencies, and the
result lines of the percentile harnesses, each with the load average at the
start of its step.
"""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path

TIME = re.compile(r"^\s*(?P<id>\S+)?\s*time:\s*\[")
THRPT = re.compile(r"thrpt:\s*\[\S+ \S+ (?P<v>\S+) (?P<u>\S+)")
LOAD = re.compile(r"load average ([0-9. ]+)\)")


def load_of(text: str) -> str:
    m = LOAD.search(text)
    return m.group(1).strip() if m else "?"


def criterion(path: Path) -> list[str]:
    """``id: median throughput`` for each benchmark of a criterion log."""
    out, last_id = [], ""
    for line in path.read_text(errors="replace").splitlines():
        m = TIME.match(line)
        if m:
            last_id = m.group("id") or last_id
            continue
        m = THRPT.search(line)
        if m and last_id:
            out.append(f"  {last_id:55} {m.group('v')} {m.group('u')}")
            last_id = ""
        elif line and not line.startswith(" ") and "/" in line and " " not in line.strip():
            last_id = line.strip()
    return out


def pytest_json(path: Path) -> list[str]:
    out = []
    for b in json.loads(path.read_text())["benchmarks"]:
        extra = b.get("extra_info", {})
        if "msg_per_s_median" in extra:
            value = f"{extra['msg_per_s_median'] / 1e6:.2f} M msg/s"
        else:
            value = ", ".join(f"{k} {v}" for k, v in extra.items()) or (
                f"median {b['stats']['median'] * 1e6:.1f} µs")
        out.append(f"  {b['name']:55} {value}")
    return out


def main(log: Path) -> None:
    print(f"Summary of {log}")
    for f in sorted(log.glob("*.log")):
        text = f.read_text(errors="replace")
        name = f.stem
        print(f"\n{name} (load average at start: {load_of(text)})")
        js = log / f"{name}.json"
        if js.exists():
            lines = pytest_json(js)
        elif "cargo bench" in text.splitlines()[0]:
            lines = criterion(f)
        else:
            # The harnesses print their own result lines.
            lines = [ln for ln in text.splitlines()[1:]
                     if ln.startswith(" ") and not ln.startswith("recovery (")]
        print("\n".join(lines) if lines else "  (no result: see the log)")


if __name__ == "__main__":
    main(Path(sys.argv[1]))

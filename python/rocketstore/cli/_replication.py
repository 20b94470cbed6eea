"""Replication's state as ``info`` and ``top`` show it.

Both open the store read-only: the state is what the running writer last
wrote to ``config/haStatus.json`` (``docs/format.md`` §21.6), a second old
at most.
"""

from __future__ import annotations

import time
from typing import Any

from rich.console import Group, RenderableType
from rich.table import Table
from rich.text import Text

from rocketstore.cli._common import _human_bytes

__all__ = ["replication_view"]


def _ago(t: float | None, now: float) -> str:
    if not t:
        return "never"
    return f"{max(now - t, 0.0):.1f} s ago"


def _lag(lag_bytes: int | None, lag_seconds: float | None) -> Text:
    text = "-" if lag_bytes is None else _human_bytes(lag_bytes)
    if lag_seconds is not None:
        text += f", {lag_seconds:.1f} s"
    return Text(text, style="yellow" if lag_bytes else "")


def _offsets_text(st: dict[str, Any], now: float) -> Text:
    o = st.get("offsets") or {}
    if st.get("role") == "SLAVE":
        if not o.get("address"):
            return Text("none (no offsets address)", style="dim")
        text = Text(f"from {o['address']}, last applied {_ago(o.get('last_sync'), now)}")
        if o.get("error"):
            text.append(f" ({o['error']})", style="yellow")
        return text
    if not o.get("port"):
        return Text("not served (no listener)", style="dim")
    return Text(f"served on port {o['port']}, {o.get('served', 0):,} sent, "
                f"last {_ago(o.get('last_sync'), now)}")


def replication_view(st: dict[str, Any] | None) -> RenderableType:
    """The role and, for a master, one row per slave; for a slave its master."""
    if st is None:
        return Text("replication: none shown (no running writer with replication)",
                    style="dim")
    now = time.time()
    t = Table(title=f"replication: {st.get('role')}", title_justify="left",
              show_header=False, box=None, pad_edge=False)
    t.add_column("what", style="bold")
    t.add_column("value")
    if st.get("as_of"):
        t.add_row("as of", f"{_ago(st['as_of'], now)} (the writer's config/haStatus.json)")
    if st.get("role") == "SLAVE":
        state = "connected" if st.get("connected") else "not connected"
        check = ("diverged" if st.get("diverged") else
                 "verified" if st.get("verified") else "not verified yet")
        style = "red" if st.get("diverged") or st.get("stopped") else ""
        t.add_row("master", Text(f"{st.get('master_address') or 'none set'}: {state}, {check}",
                                 style=style))
        t.add_row("applied offset", f"{st.get('applied_offset', 0):,}")
        t.add_row("lag", _lag(st.get("lag_bytes"), st.get("lag_seconds")))
        if st.get("error"):
            t.add_row("last error", Text(str(st["error"]), style="yellow"))
        t.add_row("offsets sync", _offsets_text(st, now))
        return t
    t.add_row("listening", f"port {st['port']}" if st.get("port") else "no")
    t.add_row("offsets sync", _offsets_text(st, now))
    slaves = st.get("slaves") or []
    if not slaves:
        return Group(t, Text("no slave connected", style="dim"))
    s = Table(title=f"slaves ({len(slaves)})", title_justify="left")
    for name in ("address", "acked offset", "lag", "since report"):
        s.add_column(name, justify="left" if name == "address" else "right")
    for v in slaves:
        s.add_row(v["address"], f"{v['acked_offset']:,}", _lag(v["lag_bytes"], None),
                  f"{v['lag_seconds']:.1f} s")
    return Group(t, s)

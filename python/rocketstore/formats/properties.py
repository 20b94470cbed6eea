"""Java ``.properties`` files (RocketMQ's ``broker.conf``), read as Java's
``Properties.load`` does.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Final

__all__ = ["parse_properties", "read_properties"]


_UNESCAPES: Final = {"t": "\t", "n": "\n", "r": "\r", "f": "\f"}


def _unescape(text: str) -> str:
    def repl(match: re.Match[str]) -> str:
        body = match.group(1)
        if body.startswith("u") and len(body) > 1:  # a \\uXXXX escape
            return chr(int(body[1:], 16))
        return _UNESCAPES.get(body, body)

    return re.sub(r"\\(u[0-9a-fA-F]{4}|.)", repl, text, flags=re.DOTALL)


def _logical_lines(text: str) -> list[str]:
    """Join Java-properties continuation lines (odd number of trailing backslashes)."""
    lines: list[str] = []
    pending: str | None = None
    for physical in text.splitlines():
        line = physical.lstrip() if pending is not None else physical
        if pending is None and line.lstrip()[:1] in ("#", "!"):
            continue
        trailing = len(line) - len(line.rstrip("\\"))
        continued = trailing % 2 == 1
        if continued:
            line = line[:-1]
        pending = line if pending is None else pending + line
        if not continued:
            lines.append(pending)
            pending = None
    if pending is not None:
        lines.append(pending)
    return lines


def read_properties(path: Path) -> dict[str, str]:
    """Parse a Java properties file: ``key=value``, ``key: value`` or ``key value``.

    ``#``/``!`` comments, blank lines, backslash continuations and escapes
    (``\\t``, ``\\uXXXX``, ...) are understood; keys and values are trimmed;
    a later duplicate key wins.
    """
    data = path.read_bytes()
    try:
        text = data.decode("utf-8-sig")
    except UnicodeDecodeError:
        text = data.decode("latin-1")  # Java's Properties.load(InputStream) encoding
    return parse_properties(text)


def parse_properties(text: str) -> dict[str, str]:
    """Parse the text of a Java properties file (see :func:`read_properties`).

    >>> text = "# broker.conf\\nbrokerName = broker-a\\nstorePathRootDir=/data/\\\\\\n  store"
    >>> parse_properties(text)
    {'brokerName': 'broker-a', 'storePathRootDir': '/data/store'}
    """
    result: dict[str, str] = {}
    for logical in _logical_lines(text):
        line = logical.strip()
        if not line:
            continue
        # the key ends at the first unescaped '=', ':' or whitespace
        match = re.match(r"((?:\\.|[^=:\s\\])*)\s*[=:]?\s*(.*)$", line, flags=re.DOTALL)
        assert match is not None  # the pattern matches any string
        key = _unescape(match.group(1)).strip()
        if key:
            result[key] = _unescape(match.group(2)).strip()
    return result

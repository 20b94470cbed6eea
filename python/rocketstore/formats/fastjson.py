r"""fastjson's text format, as RocketMQ writes its JSON config files.

The exact layout :func:`dumps_fastjson` produces (fastjson's ``PrettyFormat``,
as seen in real broker dumps; each ``\t`` is one tab character)::

    {
    \t"offsetTable":{
    \t\t"TopicTest@groupA":{0:12,1:5
    \t\t}
    \t}
    }

* An object opens with ``{``. Before each **string** key comes a newline and
  one tab per nesting level (the key's depth); ``:`` follows the key with no
  space, then the value.
* An **integer** key (a Python ``int``) is written unquoted and *without* the
  newline before it, so an int-keyed map stays on the line of its opening
  brace: ``{0:12,1:5``. (fastjson's ``MapSerializer`` only breaks the line
  before ``String`` keys.)
* Entries are separated by ``,``. A non-empty object closes with a newline,
  the tabs of its own depth and ``}``; an empty object is ``{}``.
* Keys are sorted: integer keys numerically first, then string keys in Java
  ``String.compareTo`` order (UTF-16 code units). fastjson sorts bean fields
  this way; RocketMQ's maps are hash maps, so sorting them is our choice: it
  makes files deterministic and diff-able.
* A list is ``[``, each item on its own line one level deeper, then a newline,
  the tabs of its depth and ``]``; an empty list is ``[]``.
* Strings are JSON-escaped (non-ASCII kept as is), booleans ``true`` /
  ``false``, ``None`` is ``null``, enums are written by name.
* No trailing newline (fastjson writes none).

>>> dumps_fastjson({"offsetTable": {"TopicTest@groupA": {1: 5, 0: 12}}}).split("\n")
['{', '\t"offsetTable":{', '\t\t"TopicTest@groupA":{0:12,1:5', '\t\t}', '\t}', '}']
>>> loads_fastjson('{"offsetTable":{"TopicTest@groupA":{0:12,"1":5}}}')
{'offsetTable': {'TopicTest@groupA': {0: 12, '1': 5}}}
"""

from __future__ import annotations

import enum
import json
import math
import re
from collections.abc import Mapping
from typing import Any

__all__ = ["dumps_fastjson", "loads_fastjson"]


# ---------------------------------------------------------------------------
# Writer
# ---------------------------------------------------------------------------


def _java_order(key: str) -> bytes:
    # Java's String.compareTo compares UTF-16 code units; big-endian UTF-16
    # bytes compare the same way (surrogates sort below U+E000..U+FFFF).
    return key.encode("utf-16-be", "surrogatepass")


def _is_int(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _write(value: object, depth: int, out: list[str]) -> None:
    if value is None:
        out.append("null")
    elif value is True:
        out.append("true")
    elif value is False:
        out.append("false")
    elif isinstance(value, enum.Enum):
        out.append(json.dumps(value.name))
    elif isinstance(value, int):
        out.append(str(value))
    elif isinstance(value, float):
        if not math.isfinite(value):
            raise ValueError(f"cannot write {value!r}: JSON has no NaN or infinity")
        out.append(repr(value))
    elif isinstance(value, str):
        out.append(json.dumps(value, ensure_ascii=False))
    elif isinstance(value, Mapping):
        _write_object(value, depth, out)
    elif isinstance(value, (list, tuple)):
        if not value:
            out.append("[]")
            return
        inner = "\n" + "\t" * (depth + 1)
        out.append("[")
        for i, item in enumerate(value):
            if i:
                out.append(",")
            out.append(inner)
            _write(item, depth + 1, out)
        out.append("\n" + "\t" * depth + "]")
    else:
        raise TypeError(f"cannot write a {type(value).__name__} as fastjson")


def _write_object(obj: Mapping[Any, Any], depth: int, out: list[str]) -> None:
    if not obj:
        out.append("{}")
        return
    int_keys: list[int] = []
    str_keys: list[str] = []
    for key in obj:
        if _is_int(key):
            int_keys.append(key)
        elif isinstance(key, str):
            str_keys.append(key)
        else:
            raise TypeError(f"map keys must be str or int, not {type(key).__name__}: {key!r}")
    int_keys.sort()
    str_keys.sort(key=_java_order)
    inner = "\n" + "\t" * (depth + 1)
    out.append("{")
    first = True
    for ikey in int_keys:
        if not first:
            out.append(",")
        first = False
        out.append(str(ikey))
        out.append(":")
        _write(obj[ikey], depth + 1, out)
    for skey in str_keys:
        if not first:
            out.append(",")
        first = False
        out.append(inner)
        out.append(json.dumps(skey, ensure_ascii=False))
        out.append(":")
        _write(obj[skey], depth + 1, out)
    out.append("\n" + "\t" * depth + "}")


def dumps_fastjson(obj: object) -> str:
    """Serialize ``obj`` the way fastjson 1.x ``prettyFormat`` does.

    ``obj`` is built from dicts (``str`` or ``int`` keys), lists/tuples,
    strings, ints, finite floats, bools, ``None`` and enums. The layout is
    described in the module docstring.

    >>> dumps_fastjson({"b": True, "a": [1, "x"], "m": {}})
    '{\\n\\t"a":[\\n\\t\\t1,\\n\\t\\t"x"\\n\\t],\\n\\t"b":true,\\n\\t"m":{}\\n}'

    Raises:
        TypeError: a value or key of an unsupported type.
        ValueError: a NaN or infinite float.
    """
    out: list[str] = []
    _write(obj, 0, out)
    return "".join(out)


# ---------------------------------------------------------------------------
# Reader
# ---------------------------------------------------------------------------

_WS = re.compile(r"[ \t\n\r]*")
_STRING = re.compile(r'"(?:[^"\\]|\\.)*"', re.DOTALL)
_NUMBER = re.compile(r"-?(?:0|[1-9][0-9]*)(\.[0-9]+)?([eE][-+]?[0-9]+)?")
_INT_KEY = re.compile(r"-?[0-9]+")
_LITERALS: dict[str, object] = {"true": True, "false": False, "null": None}


class _Parser:
    """Recursive-descent JSON parser that also accepts unquoted integer keys."""

    def __init__(self, text: str) -> None:
        self.text = text
        self.pos = 0

    def fail(self, msg: str) -> json.JSONDecodeError:
        return json.JSONDecodeError(msg, self.text, self.pos)

    def ws(self) -> None:
        m = _WS.match(self.text, self.pos)
        assert m is not None  # the pattern matches the empty string
        self.pos = m.end()

    def document(self) -> Any:
        self.ws()
        value = self.value()
        self.ws()
        if self.pos != len(self.text):
            raise self.fail("extra data after the JSON value")
        return value

    def value(self) -> Any:
        text, pos = self.text, self.pos
        if pos >= len(text):
            raise self.fail("expecting a value")
        c = text[pos]
        if c == "{":
            return self.obj()
        if c == "[":
            return self.array()
        if c == '"':
            return self.string()
        for word, lit in _LITERALS.items():
            if text.startswith(word, pos):
                self.pos = pos + len(word)
                return lit
        m = _NUMBER.match(text, pos)
        if m is None:
            raise self.fail("expecting a value")
        self.pos = m.end()
        if m.group(1) is None and m.group(2) is None:
            return int(m.group())
        return float(m.group())

    def string(self) -> str:
        m = _STRING.match(self.text, self.pos)
        if m is None:
            raise self.fail("unterminated string")
        try:
            s = json.loads(m.group())
        except json.JSONDecodeError as e:
            raise json.JSONDecodeError(e.msg, self.text, self.pos + e.pos) from None
        self.pos = m.end()
        assert isinstance(s, str)
        return s

    def obj(self) -> dict[Any, Any]:
        self.pos += 1  # '{'
        result: dict[Any, Any] = {}
        self.ws()
        if self.text.startswith("}", self.pos):
            self.pos += 1
            return result
        while True:
            key: str | int
            if self.text.startswith('"', self.pos):
                key = self.string()
            else:
                m = _INT_KEY.match(self.text, self.pos)
                if m is None:
                    raise self.fail("expecting a quoted or integer key")
                key = int(m.group())
                self.pos = m.end()
            self.ws()
            if not self.text.startswith(":", self.pos):
                raise self.fail("expecting ':' after a key")
            self.pos += 1
            self.ws()
            result[key] = self.value()
            self.ws()
            if self.text.startswith(",", self.pos):
                self.pos += 1
                self.ws()
            elif self.text.startswith("}", self.pos):
                self.pos += 1
                return result
            else:
                raise self.fail("expecting ',' or '}'")

    def array(self) -> list[Any]:
        self.pos += 1  # '['
        result: list[Any] = []
        self.ws()
        if self.text.startswith("]", self.pos):
            self.pos += 1
            return result
        while True:
            result.append(self.value())
            self.ws()
            if self.text.startswith(",", self.pos):
                self.pos += 1
                self.ws()
            elif self.text.startswith("]", self.pos):
                self.pos += 1
                return result
            else:
                raise self.fail("expecting ',' or ']'")


def _no_constants(name: str) -> Any:
    raise ValueError(f"{name} is not JSON")


def loads_fastjson(text: str) -> Any:
    """Parse standard JSON or fastjson output (unquoted integer map keys).

    Unquoted integer keys become ``int``; quoted keys stay ``str`` (even
    ``"1"``), so callers that expect an int-keyed map normalise them.
    ``NaN``/``Infinity`` are refused, as in strict JSON.

    >>> loads_fastjson('{0:12, "1":5, "s":{"x":[true,null,1.5]}}')
    {0: 12, '1': 5, 's': {'x': [True, None, 1.5]}}

    Raises:
        json.JSONDecodeError: (a ``ValueError``) the text is neither, or is
            nested deeper than the interpreter's recursion limit; the
            message gives the position.
    """
    try:  # the C parser handles the common, standard case fast
        return json.loads(text, parse_constant=_no_constants)
    except json.JSONDecodeError:
        pass
    except RecursionError:
        raise json.JSONDecodeError("nested too deeply", text, 0) from None
    try:
        return _Parser(text).document()
    except RecursionError:
        raise json.JSONDecodeError("nested too deeply", text, 0) from None

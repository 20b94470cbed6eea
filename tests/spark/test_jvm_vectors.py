"""The JVM connector's column vectors over a batch's native buffers
(``NativeColumnVector``): a batch description is checked before Spark
reads a value, so a malformed one is an error and never a read outside its
buffers (which would kill the executor).

The descriptions are made here, over memory allocated in the JVM, and
handed to ``NativeColumnVector.batch`` as the reader hands the engine's.
The reads of whole stores through these vectors are the conformance suite's
(tests/spark/test_jvm_conformance.py). Marked ``spark``; skipped when the
connector's jar is not built (``scripts/build-jar.sh``).
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import Any

import pytest

pytest.importorskip("pyspark")


pytestmark = pytest.mark.spark

SCHEMA = ('{"type":"struct","fields":['
          '{"name":"n","type":"integer","nullable":true,"metadata":{}},'
          '{"name":"s","type":"string","nullable":true,"metadata":{}}]}')


class Mem:
    """Native memory of the JVM (Spark's ``Platform``), freed at the end."""

    def __init__(self, spark: Any) -> None:
        self.p = spark._jvm.org.apache.spark.unsafe.Platform
        self.blocks: list[int] = []

    def ints(self, values: Sequence[int]) -> tuple[int, int]:
        addr = self.p.allocateMemory(max(4 * len(values), 1))
        self.blocks.append(addr)
        for i, v in enumerate(values):
            self.p.putInt(None, addr + 4 * i, v)
        return addr, 4 * len(values)

    def data(self, raw: bytes) -> tuple[int, int]:
        addr = self.p.allocateMemory(max(len(raw), 1))
        self.blocks.append(addr)
        for i, b in enumerate(raw):
            self.p.putByte(None, addr + i, b - 256 if b > 127 else b)
        return addr, len(raw)

    def free(self) -> None:
        for a in self.blocks:
            self.p.freeMemory(a)


@pytest.fixture
def mem(jvm: Any) -> Iterator[Mem]:
    m = Mem(jvm)
    yield m
    m.free()


def batch(spark: Any, d: Sequence[int]) -> Any:
    """``NativeColumnVector.batch`` of the two-column SCHEMA over ``d``."""
    gw = spark.sparkContext._gateway
    jvm = gw.jvm
    loader = jvm.org.rocketstore.spark.NativeLib._java_lang_class.getClassLoader()
    cls = jvm.java.lang.Class.forName("org.rocketstore.spark.NativeColumnVector", True, loader)
    params = gw.new_array(jvm.java.lang.Class, 2)
    params[0] = jvm.java.lang.Class.forName("org.apache.spark.sql.types.StructType")
    params[1] = jvm.java.lang.Class.forName("[J")
    m = cls.getDeclaredMethod("batch", params)
    m.setAccessible(True)
    longs = gw.new_array(jvm.long, len(d))
    for i, v in enumerate(d):
        longs[i] = v
    args = gw.new_array(jvm.java.lang.Object, 2)
    args[0] = jvm.org.apache.spark.sql.types.DataType.fromJson(SCHEMA)
    args[1] = longs
    return m.invoke(None, args)


def describe(rows: int, nodes: Sequence[tuple[int, int]],
             bufs: Sequence[tuple[int, int]]) -> list[int]:
    """``[handle, rows, nodes, (length, nulls)*, buffers, (address, length)*]``."""
    out = [0, rows, len(nodes)]
    for n in nodes:
        out.extend(n)
    out.append(len(bufs))
    for b in bufs:
        out.extend(b)
    return out


def good(mem: Mem) -> tuple[list[tuple[int, int]], list[tuple[int, int]]]:
    """Two rows: n = 7, 9; s = "a", "bc" (no nulls: no validity buffers)."""
    nodes = [(2, 0), (2, 0)]
    bufs = [(0, 0), mem.ints([7, 9]), (0, 0), mem.ints([0, 1, 3]), mem.data(b"abc")]
    return nodes, bufs


def test_a_batch_reads_its_values_where_they_lie(jvm: Any, mem: Mem) -> None:
    nodes, bufs = good(mem)
    b = batch(jvm, describe(2, nodes, bufs))
    assert b.numRows() == 2
    assert [b.column(0).getInt(r) for r in range(2)] == [7, 9]
    assert [b.column(1).getUTF8String(r).toString() for r in range(2)] == ["a", "bc"]
    assert not b.column(1).isNullAt(1)


def test_a_null_is_read_from_the_validity_bits(jvm: Any, mem: Mem) -> None:
    nodes, bufs = good(mem)
    nodes[1] = (2, 1)
    bufs[2] = mem.data(bytes([0b01]))  # row 0 valid, row 1 null
    b = batch(jvm, describe(2, nodes, bufs))
    assert b.column(1).getUTF8String(0).toString() == "a"
    assert b.column(1).isNullAt(1) and b.column(1).getUTF8String(1) is None


@pytest.mark.parametrize("what", [
    "offsets going back", "offsets past the bytes", "first offset not 0",
    "too few values", "a column longer than the batch", "more nulls than rows",
    "nulls without a validity buffer", "a buffer missing", "a buffer left over",
    "a node missing"])
def test_a_malformed_description_is_an_error_not_a_read_out_of_bounds(
        jvm: Any, mem: Mem, what: str) -> None:
    from py4j.protocol import Py4JJavaError

    rows = 2
    nodes, bufs = good(mem)
    if what == "offsets going back":
        bufs[3] = mem.ints([0, 3, 1])
    elif what == "offsets past the bytes":
        bufs[3] = mem.ints([0, 1, 4])
    elif what == "first offset not 0":
        bufs[3] = mem.ints([1, 2, 3])
    elif what == "too few values":
        bufs[1] = mem.ints([7])
    elif what == "a column longer than the batch":
        nodes[0] = (3, 0)
    elif what == "more nulls than rows":
        nodes[0] = (2, 3)
    elif what == "nulls without a validity buffer":
        nodes[0] = (2, 1)
    elif what == "a buffer missing":
        bufs.pop()
    elif what == "a buffer left over":
        bufs.append(mem.ints([0]))
    else:
        nodes.pop()
    with pytest.raises(Py4JJavaError) as e:
        batch(jvm, describe(rows, nodes, bufs))
    assert "malformed batch" in str(e.value)

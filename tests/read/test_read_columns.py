"""The engine's column registry (``rocketstore._native.READ_COLUMNS``) is
what reads return: the same names in the same order, the same Arrow types,
and a null only in the columns it says may hold one; column arguments are
checked against it."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

pa = pytest.importorskip("pyarrow")

from helpers.arrow_util import fill_rich_store  # noqa: E402
from rocketstore._native import READ_COLUMNS  # noqa: E402

NAMES = [c.name for c in READ_COLUMNS]


def test_the_registry_is_the_schema_of_every_read(tmp_path: Path) -> None:
    store = fill_rich_store(str(tmp_path / "s"), n=60)
    try:
        full = store._arrow_stream("orders", store_name="s")
        schema = pa.RecordBatchReader.from_stream(full).schema
        assert schema.names == NAMES and NAMES[-1] == "store"
        for c in READ_COLUMNS:
            assert str(schema.field(c.name).type) == c.arrow_type, c
            assert schema.field(c.name).nullable, c
        one_store = store.read_arrow("orders").schema
        assert one_store == pa.schema(list(schema)[:-1])
        assert store.get_arrow("orders", 1, 0).batch.schema == one_store
    finally:
        store.shutdown()


def test_only_the_columns_it_says_may_hold_a_null_do(tmp_path: Path) -> None:
    """Every column is read over rows that lack a value where one can be
    lacking (no tags, keys, properties or body): the columns marked never
    null hold none, each other column holds some."""
    store = fill_rich_store(str(tmp_path / "s"))
    try:
        for read in (store._arrow_stream(store_name="s"),
                     store._arrow_stream(["orders", "events"], store_name="s")):
            table = pa.RecordBatchReader.from_stream(read).read_all()
            assert table.num_rows > 200
            for c in READ_COLUMNS:
                nulls = table.column(c.name).null_count
                assert (nulls == 0) == c.never_null, (c, nulls)
        pulled = store.get_arrow("orders", 1, 0).batch
        for c in READ_COLUMNS[:-1]:
            if c.never_null:
                assert pulled.column(c.name).null_count == 0, c
        assert any(not c.never_null for c in READ_COLUMNS)
    finally:
        store.shutdown()


def test_column_arguments_are_checked_against_it(tmp_path: Path) -> None:
    store = fill_rich_store(str(tmp_path / "s"), n=30)
    try:
        one_store = NAMES[:-1]
        assert store.read_arrow("orders", columns=one_store[::-1]).schema.names == one_store[::-1]
        assert store.get_arrow("orders", 1, 0, columns=one_store).batch.schema.names == one_store
        listed = re.escape(", ".join(NAMES))
        for call in (lambda: store.read_arrow("orders", columns=["topic", "nope"]),
                     lambda: store.get_arrow("orders", 1, 0, columns=["nope"])):
            with pytest.raises(ValueError, match=f'no column named "nope"; the columns: {listed}$'):
                call()
        for call in (lambda: store.read_arrow("orders", columns=["store"]),
                     lambda: store.get_arrow("orders", 1, 0, columns=["store"])):
            with pytest.raises(ValueError, match="the store column exists only in reads of "
                                                 "several stores"):
                call()
        # A str is not a list of names, not even one that names a column.
        with pytest.raises(TypeError, match="columns must be a list of column names, not str"):
            store.read_arrow("orders", columns="store")  # type: ignore[arg-type]
    finally:
        store.shutdown()

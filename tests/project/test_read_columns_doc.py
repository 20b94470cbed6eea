"""The docs, the stub and the docstrings that list the read schema's
columns list those of the engine's registry (``rocketstore._native.
READ_COLUMNS``), with its facts: docs/spark.md's column table,
``read_arrow``'s docstring and ``_native.pyi``; the README's Spark section
points to that table and names no column that is not one."""

from __future__ import annotations

import ast
import importlib.util
import re

from helpers.paths import REPO
from rocketstore import MessageStore
from rocketstore._native import READ_COLUMNS

NAMES = [c.name for c in READ_COLUMNS]


def _names_in(text: str) -> list[str]:
    return re.findall(r"[a-z_]+", text)


def test_the_column_table_of_docs_spark_md_is_the_registry() -> None:
    text = (REPO / "docs" / "spark.md").read_text(encoding="utf-8")
    rows = re.findall(r"^\| `(\w+)` \| `([^`]+)` \| `([^`]+)` \| ([\w ]+) \| ([\w-]+) \|$",
                      text, re.M)
    assert [r[0] for r in rows] == NAMES
    spark_types = None
    if importlib.util.find_spec("pyspark") is not None:
        from rocketstore.spark._source import COLUMN_TYPES

        spark_types = COLUMN_TYPES
    for (name, arrow, spark, nulls, pushdown), c in zip(rows, READ_COLUMNS, strict=True):
        assert arrow == c.arrow_type, name
        assert nulls == ("never" if c.never_null else "when absent"), name
        assert pushdown == (c.pushdown or "-"), name
        if spark_types is not None:
            assert spark == spark_types[name], name


def test_read_arrow_lists_the_columns_in_order_and_the_readme_names_only_columns() -> None:
    readme = (REPO / "README.md").read_text(encoding="utf-8")
    bullet = re.search(r"^- Columns: (.*?); plus `store`", readme, re.M | re.S)
    assert bullet is not None and "docs/spark.md" in bullet[1]
    named = re.findall(r"`([a-z_]+)`", bullet[1])
    assert named and set(named) <= set(NAMES), set(named) - set(NAMES)
    doc = MessageStore.read_arrow.__doc__ or ""
    listed = re.search(r"The columns are those of the Spark schema: ``([^`]+)``", doc)
    assert listed is not None
    assert _names_in(listed[1]) == NAMES[:-1]


def test_the_stub_names_the_columns_and_pushdowns() -> None:
    stub = ast.parse((REPO / "python" / "rocketstore" / "_native.pyi").read_text())
    aliases = {t.id: node.value for node in stub.body if isinstance(node, ast.Assign)
               for t in node.targets if isinstance(t, ast.Name)}
    names = aliases["_ReadColumnName"]
    assert isinstance(names, ast.Subscript)
    assert [e.value for e in ast.walk(names.slice) if isinstance(e, ast.Constant)] == NAMES
    read_column = next(n for n in stub.body
                       if isinstance(n, ast.ClassDef) and n.name == "ReadColumn")
    pushdown = next(f for f in read_column.body
                    if isinstance(f, ast.FunctionDef) and f.name == "pushdown")
    assert pushdown.returns is not None
    kinds = {e.value for e in ast.walk(pushdown.returns) if isinstance(e, ast.Constant)}
    assert kinds - {None} == {c.pushdown for c in READ_COLUMNS} - {None}
    props = {f.name for f in read_column.body if isinstance(f, ast.FunctionDef)}
    assert props == {p for p in dir(READ_COLUMNS[0]) if not p.startswith("_")}

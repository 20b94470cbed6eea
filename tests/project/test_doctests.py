"""The docstring examples of every rocketstore module run as tests.

Each module's examples run with the temp dir pointed at a fresh directory,
which must be empty afterwards: an example cleans up the stores it makes
(and makes them with small files: default geometry reserves 1 GiB per
CommitLog file and 420 MB per index file). Examples of the optional Arrow
and Spark support (``rocketstore[spark]``) run where pyarrow is installed.
"""

from __future__ import annotations

import doctest
import importlib
import pkgutil
import tempfile
from pathlib import Path

import pytest

import rocketstore

# Its modules import pyarrow and pyspark (the optional extra) when imported.
OPTIONAL_PACKAGE = "rocketstore.spark"

MODULES = sorted(
    ["rocketstore"]
    + [m.name for m in pkgutil.walk_packages(rocketstore.__path__, "rocketstore.",
                                             onerror=lambda _name: None)
       if not m.name.startswith(OPTIONAL_PACKAGE + ".")]
)


def _needs_arrow(test: doctest.DocTest) -> bool:
    return test.docstring is not None and "arrow" in test.docstring


def _tests(name: str, *, arrow: bool) -> list[doctest.DocTest]:
    module = importlib.import_module(name)
    found = doctest.DocTestFinder().find(module)
    return [t for t in found if t.examples and _needs_arrow(t) == arrow]


def _run(tests: list[doctest.DocTest], tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    monkeypatch.chdir(tmp_path)
    runner = doctest.DocTestRunner(optionflags=doctest.ELLIPSIS)
    for test in tests:
        runner.run(test)
    result = runner.summarize(verbose=False)
    assert result.failed == 0, f"{result.failed} failing example(s) (printed above)"
    assert list(tmp_path.iterdir()) == [], "examples left files behind"


@pytest.mark.parametrize("name", MODULES)
def test_docstring_examples(name: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    _run(_tests(name, arrow=False), tmp_path, monkeypatch)


def test_arrow_docstring_examples(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    pytest.importorskip("pyarrow")
    tests = [t for name in MODULES for t in _tests(name, arrow=True)]
    assert tests, "no Arrow example found"
    _run(tests, tmp_path, monkeypatch)


def test_spark_docstring_examples(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    pytest.importorskip("pyarrow")
    pytest.importorskip("pyspark")
    package = importlib.import_module(OPTIONAL_PACKAGE)
    names = [m.name for m in pkgutil.walk_packages(package.__path__, OPTIONAL_PACKAGE + ".")]
    tests = [t for name in names for arrow in (False, True) for t in _tests(name, arrow=arrow)]
    _run(tests, tmp_path, monkeypatch)


def _example_count(name: str) -> int:
    return sum(len(t.examples) for t in _tests(name, arrow=False))


def test_the_examples_are_found() -> None:
    # The modules known to carry examples; a broken collection finds none.
    with_examples = {n for n in MODULES if _example_count(n) > 0}
    assert {"rocketstore", "rocketstore.store", "rocketstore.config.store_config",
            "rocketstore.config.files", "rocketstore.formats.fastjson",
            "rocketstore.formats.properties", "rocketstore.services.base"} <= with_examples

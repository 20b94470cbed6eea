"""The docstring examples of every rocketstore module run as tests.

Each module's examples run with the temp dir pointed at a fresh directory,
which must be empty afterwards: an example cleans up the stores it makes
(and makes them with small files: default geometry reserves 1 GiB per
CommitLog file and 420 MB per index file).
"""

from __future__ import annotations

import doctest
import importlib
import pkgutil
import tempfile
from pathlib import Path

import pytest

import rocketstore

MODULES = sorted(
    ["rocketstore"]
    + [m.name for m in pkgutil.walk_packages(rocketstore.__path__, "rocketstore.")]
)


def _run(name: str) -> doctest.TestResults:
    module = importlib.import_module(name)
    return doctest.testmod(module, optionflags=doctest.ELLIPSIS, report=True, verbose=False)


@pytest.mark.parametrize("name", MODULES)
def test_docstring_examples(name: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    monkeypatch.chdir(tmp_path)
    result = _run(name)
    assert result.failed == 0, f"{result.failed} failing example(s) in {name} (printed above)"
    assert list(tmp_path.iterdir()) == [], "examples left files behind"


def _example_count(name: str) -> int:
    tests = doctest.DocTestFinder().find(importlib.import_module(name))
    return sum(len(t.examples) for t in tests)


def test_the_examples_are_found() -> None:
    # The modules known to carry examples; a broken collection finds none.
    with_examples = {n for n in MODULES if _example_count(n) > 0}
    assert {"rocketstore", "rocketstore.store", "rocketstore.config",
            "rocketstore.config_files", "rocketstore.formats.fastjson",
            "rocketstore.formats.properties", "rocketstore.services.base"} <= with_examples

"""The fixture of the Spark tests that need the JVM connector."""

from __future__ import annotations

from typing import Any

import pytest


@pytest.fixture(scope="module")
def jvm(spark: Any) -> Any:
    """The session (tests/conftest.py), once it is known to hold the JVM
    connector: the test is skipped when the connector's jar is not built
    (``scripts/build-jar.sh``)."""
    from rocketstore.spark._jvm import missing

    why = missing()
    if why is not None:
        pytest.skip(f"no JVM connector: {why}")
    return spark

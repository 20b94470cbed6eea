"""The Python status enums have the engine's members: same names, same
ordinals, same order (the binding maps engine statuses to them by name)."""

from __future__ import annotations

from rocketstore import GetStatus, PutStatus, _native


def test_python_enums_match_the_engines() -> None:
    engine = _native._engine_enums()
    assert set(engine) == {"PutStatus", "GetStatus"}
    for cls in (PutStatus, GetStatus):
        assert [(m.value, m.name) for m in cls] == engine[cls.__name__]

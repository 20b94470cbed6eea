"""``_native.record_size``: the engine's length of a record is what a put writes."""

from __future__ import annotations

import pytest

from helpers.presets import SMALL
from rocketstore import Message, MessageStore, StoreConfig, _native


def _messages() -> list[Message]:
    return [
        Message("T", b""),
        Message("T", b"x" * 300, tags="a", keys=["k1", "k2"]),
        Message("Topic-2", b"y", queue_id=3, properties={"p": "v", "q": "w w"}),
        Message("T", b"z", tags="t", born_host=("::1", 5)),
    ]


@pytest.mark.parametrize("prop_crc", [True, False])
@pytest.mark.parametrize("host", [("127.0.0.1", 10911), ("::1", 10911)])
def test_record_size_is_what_a_put_writes(
    store_path: str, prop_crc: bool, host: tuple[str, int]
) -> None:
    cfg = StoreConfig(
        store_path=store_path, store_host=host, enabled_append_prop_crc=prop_crc, **SMALL
    )
    with MessageStore(cfg) as store:
        for m in _messages():
            r = store.put_message(m)
            assert r.ok, r.reason
            assert _native.record_size(m, store_host=host, prop_crc=prop_crc) == r.wrote_bytes


def test_record_size_defaults_to_the_default_store_host_and_the_property_crc(
    store_path: str,
) -> None:
    with MessageStore(StoreConfig(store_path=store_path, **SMALL)) as store:
        for m in _messages():
            assert _native.record_size(m) == store.put_message(m).wrote_bytes


def test_record_size_refuses_a_message_the_put_refuses() -> None:
    bad = Message("T", b"x", properties={"a\x02b": "v"})
    with pytest.raises(ValueError, match="propert"):
        _native.record_size(bad)
    with pytest.raises(TypeError):
        _native.record_size(Message("T", b"x"), store_host="127.0.0.1")  # type: ignore[arg-type]

"""The offsets sync against hostile bytes (docs/format.md §21.7): a slave
whose "master" answers with garbage, a cut or altered snapshot, or lengths
past the limit keeps the tables it has and takes the next whole one; a master's
offsets listener fed random requests answers none of them and still serves
a well-formed one."""

from __future__ import annotations

import socket
import struct
import threading
import time
import zlib
from pathlib import Path

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from helpers.ha_util import master_config, slave_config, wait_until
from rocketstore import MessageStore
from rocketstore.config.files import DelayOffsets

FAST = {"ha_offsets_interval": 50, "message_delay_level": "1s 2s"}
CONSUMER = b'{"offsetTable":{"T@G":{0:4,3:2}}}'
DELAY = b'{"offsetTable":{2:8}}'
LIMIT = 256 << 20


def _snapshot(consumer: bytes, delay: bytes, end: int = 0) -> bytes:
    head = b"RSOF" + struct.pack(">IQqII", 1, end, 1_700_000_000_000, len(consumer), len(delay))
    body = head + consumer + delay
    return body + struct.pack(">I", zlib.crc32(body))


GOOD = _snapshot(CONSUMER, DELAY)


class _Master:
    """Answers each offsets request with the reply set last; counts requests."""

    def __init__(self) -> None:
        self.reply = GOOD
        self.served = 0
        self.sock = socket.create_server(("127.0.0.1", 0))
        self.sock.settimeout(0.05)
        self.port = self.sock.getsockname()[1]
        self._stop = threading.Event()
        self._t = threading.Thread(target=self._serve, daemon=True)
        self._t.start()

    def _serve(self) -> None:
        while not self._stop.is_set():
            try:
                c, _ = self.sock.accept()
            except TimeoutError:
                continue
            with c:
                c.settimeout(2)
                try:
                    c.recv(8)
                    c.sendall(self.reply)
                except OSError:
                    pass  # the slave gave up on a reply (e.g. a length over the limit)
            self.served += 1

    def answer(self, reply: bytes, rounds: int = 2) -> None:
        """Serve ``reply`` until the slave fetched it ``rounds`` more times."""
        self.reply = reply
        seen = self.served
        wait_until(lambda: self.served >= seen + rounds, what="the slave's fetches")

    def close(self) -> None:
        self._stop.set()
        self._t.join()
        self.sock.close()


def _altered() -> st.SearchStrategy[bytes]:
    """Replies that are not a whole, well-formed snapshot."""
    cut = st.integers(0, len(GOOD) - 1).map(lambda n: GOOD[:n])
    flipped = st.tuples(st.integers(0, len(GOOD) - 1), st.integers(1, 255)).map(
        lambda a: GOOD[:a[0]] + bytes([GOOD[a[0]] ^ a[1]]) + GOOD[a[0] + 1:])
    huge = st.tuples(st.integers(LIMIT + 1, (1 << 32) - 1), st.booleans()).map(
        lambda a: b"RSOF" + struct.pack(">IQqII", 1, 0, 0, *((a[0], 2) if a[1] else (2, a[0]))))
    other_version = st.integers(2, (1 << 32) - 1).map(
        lambda v: b"RSOF" + struct.pack(">I", v) + GOOD[8:])
    garbage = st.binary(min_size=0, max_size=200)
    return st.one_of(cut, flipped, huge, other_version, garbage)


def test_a_slave_keeps_its_tables_against_any_altered_reply(tmp_path: Path) -> None:
    master = _Master()
    try:
        cfg = slave_config(tmp_path / "s", None, **FAST,
                           ha_offsets_master_address=f"127.0.0.1:{master.port}")
        with MessageStore(cfg) as s:
            wait_until(lambda: s.query_offset("G", "T", 3) == 2, what="the first snapshot")
            delay_file = tmp_path / "s" / "config" / DelayOffsets.FILE_NAME
            consumer_file = tmp_path / "s" / "config" / "consumerOffset.json"
            wait_until(consumer_file.exists, what="the consumer table written")
            before = (consumer_file.read_bytes(), delay_file.read_bytes())

            @settings(max_examples=40, deadline=None,
                      suppress_health_check=[HealthCheck.function_scoped_fixture])
            @given(reply=_altered())
            def run(reply: bytes) -> None:
                master.answer(reply)
                assert (s.query_offset("G", "T", 0), s.query_offset("G", "T", 3)) == (4, 2)
                assert (consumer_file.read_bytes(), delay_file.read_bytes()) == before
                assert s.ha_status()["offsets"]["error"] is not None

            run()
            # A well-formed snapshot after all that is applied.
            master.answer(_snapshot(b'{"offsetTable":{"T@G":{0:9}}}', DELAY))
            wait_until(lambda: s.query_offset("G", "T", 0) == 9, what="the next snapshot")
            assert s.ha_status()["offsets"]["error"] is None
    finally:
        master.close()


def _ask(port: int, request: bytes) -> bytes:
    with socket.create_connection(("127.0.0.1", port), timeout=5) as c:
        try:
            c.sendall(request)
            c.shutdown(socket.SHUT_WR)
            got = b""
            while chunk := c.recv(65536):
                got += chunk
        except (ConnectionResetError, BrokenPipeError):  # closed with bytes unread
            return b""
    return got


def test_a_master_answers_no_random_request_and_still_serves(tmp_path: Path) -> None:
    valid = b"RSOQ" + struct.pack(">I", 1)
    with MessageStore(master_config(tmp_path / "m", sync=False, **FAST)) as m:
        m.commit_offset("G", "T", 0, 1)
        port = m.ha_offsets_port
        assert port is not None

        @settings(max_examples=60, deadline=None)
        @given(request=st.binary(min_size=0, max_size=64).filter(
            lambda b: not b.startswith(valid)))
        def run(request: bytes) -> None:
            assert _ask(port, request) == b""

        run()
        deadline = time.monotonic() + 10
        while b"T@G" not in (reply := _ask(port, valid)) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert reply[:8] == b"RSOF" + struct.pack(">I", 1)
        assert struct.unpack(">I", reply[-4:])[0] == zlib.crc32(reply[:-4])
        assert b"T@G" in reply

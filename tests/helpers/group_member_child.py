"""A consumer group member in a process of its own, for the membership tests.

``python group_member_child.py CONFIG_DIR HEARTBEAT SESSION_TIMEOUT``: joins
group ``g`` on topic ``t`` (8 queues) and, every 10 ms, polls as a consumer
does: ``polled()``, ``changes()``, ``release()`` of the queues to revoke. It
prints ``READY <member id>`` once joined and, whenever what it owns changes,
``OWNED <member id> <time.monotonic()> <queue>:<epoch>,...`` (nothing after
the time when it owns nothing). SIGTERM makes it leave cleanly and print
``LEFT``.
"""

from __future__ import annotations

import signal
import sys
import time

from rocketstore.consumers.membership import Membership


def main() -> None:
    config_dir, beat, timeout = sys.argv[1], float(sys.argv[2]), float(sys.argv[3])
    member = Membership.join(config_dir, "g", "t", heartbeat_interval=beat,
                             session_timeout=timeout)
    stop = []
    signal.signal(signal.SIGTERM, lambda *_: stop.append(True))
    print("READY", member.member_id, flush=True)
    last: dict[int, int] | None = None
    while not stop:
        member.polled()
        member.set_queues(list(range(8)))
        _, revoked = member.changes()
        if revoked:
            member.release(revoked)
        owned = {q: lease.epoch for q, lease in member.owned().items()}
        if owned != last:
            queues = ",".join(f"{q}:{e}" for q, e in sorted(owned.items()))
            print("OWNED", member.member_id, time.monotonic(), queues, flush=True)
            last = owned
        time.sleep(0.01)
    member.leave()
    print("LEFT", flush=True)


if __name__ == "__main__":
    main()

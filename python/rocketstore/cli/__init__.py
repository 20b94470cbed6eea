"""The ``rocketstore`` command line.

Subcommands:

``demo``
    Write messages into a store (a temporary one by default), reopen it, read
    every message back by physical offset and print a summary.
``info PATH``
    Segment sizes, files, offsets, how the last writer stopped, checkpoint
    times, recovery report, and every topic and queue with its min/max offsets.
``verify PATH``
    Check every CommitLog record (with its CRC), every ConsumeQueue unit and
    every index entry; exit 1 if anything is wrong.
``repair PATH``
    Open the store for writing with recovery over the whole CommitLog,
    skipping damaged records in durable data (which a normal open refuses or
    ``verify`` reports) and remembering them; print what was skipped, and
    name what it cannot fix (a missing or short segment) with the next step
    (exit 1). Refuses a directory that is not a store.
``get PATH``
    Read from a consume queue (``--topic T --queue Q --offset N``, with
    ``--count`` and ``--tags``), or print one message by physical offset
    (``--offset N`` without ``--topic``) or by message id (``--id``).
``tail PATH``
    The last messages of a topic's queues (or of every topic); ``--follow``
    keeps printing new messages as the writer dispatches them.
``query PATH --topic T --key K``
    Messages carrying a key, found through the index files.
``groups PATH``
    Consumer groups: committed offset, end offset and lag per queue
    (``--json`` too); ``--group G --reset-offsets --to-earliest |
    --to-latest | --to-offset N | --to-datetime TIME`` and ``--group G
    --delete`` change a group's offsets, refusing while a consumer of the
    group is open.
``top PATH``
    A live view of the store's running state (put rates, dispatch lag, disk,
    the busiest queues), refreshed every ``--interval`` seconds until Ctrl-C;
    ``--once`` or ``--iterations N`` for scripts, ``--json`` one object per
    refresh.
``promote PATH``
    Turn a slave into an ``ASYNC_MASTER`` (failover by hand): a stopped one
    directly, a running one through the request file it watches.
``rejoin PATH --master HOST:PORT``
    Find where a stopped store's log forks from the master's, save the
    divergent range to ``ha/diverged-<offset>`` and cut it, so the store
    follows that master as a slave.
``reseed PATH``
    Move a stopped slave's data files aside (``ha/reseed-<ms>/``) so it
    copies its master again from the start.
``bench [PATH]``
    A quick self-benchmark (put, batched put, get, key queries) in a
    temporary store.

Every command that inspects a store opens it read-only with ``no_write``, so
it never writes a byte and may run while a writer has the store open
(``repair`` writes the store: it takes the writer lock; so do ``promote``
of a stopped store, ``rejoin`` and ``reseed``, which refuse a store a
writer holds; ``groups``
``--reset-offsets``/``--delete`` write ``config/consumerOffset.json`` only,
under its lock). ``--json`` prints
machine-readable output on stdout (``tail`` prints one JSON object per line);
progress bars go to stderr and only appear on a terminal.

One module per group of commands: ``demo``, ``info``, ``verify``
(``verify`` and ``repair``), ``read`` (``get``, ``tail``, ``query``),
``groups``, ``top``, ``failover`` (``promote``, ``rejoin``, ``reseed``) and
``bench``; ``_common`` holds what they share (the ``main`` group, errors,
output, opening a store).

Exit codes: 0 success; 1 the command ran but found a problem (a damaged
record, a message not found, a demo or bench message that did not read back);
2 the command could not run (bad arguments, no store, an error from the store
or the operating system). Errors are one line on stderr, never a traceback.
"""

from __future__ import annotations

# Importing the command modules registers their commands on ``main``.
from rocketstore.cli import bench, demo, failover, groups, info, read, top, verify  # noqa: F401
from rocketstore.cli._common import EXIT_ERROR, EXIT_PROBLEM, CliError, main, version_text
from rocketstore.cli.demo import _demo_min_segment_size as _demo_min_segment_size
from rocketstore.cli.demo import _run_demo as _run_demo

__all__ = ["EXIT_ERROR", "EXIT_PROBLEM", "CliError", "main", "version_text"]

"""Consumers and consumer groups: everything that reads a topic for a group.

* :mod:`~rocketstore.consumers.consumer`: :class:`Consumer`, the Kafka-style
  consumer (positions, poll, commit, seek) made by ``store.consumer()``;
  ``_contract.py`` is what it needs of a store, ``committer.py`` what it
  commits, when and where.
* :mod:`~rocketstore.consumers.async_consumer`: :class:`AsyncConsumer`, its
  asyncio face, made by ``store.async_consumer()``.
* :mod:`~rocketstore.consumers.store_commits`: a store's committed offsets in
  memory and when they are written.
* :mod:`~rocketstore.consumers.offsets`: the committed offsets shared by
  processes, ``config/consumerOffset.json`` (``docs/format.md``, §13).
* :mod:`~rocketstore.consumers.offset_table`: the offset table, which owns
  the ``topic@group`` key, its split and the names rule.
* :mod:`~rocketstore.consumers.groups`: listing, resetting and deleting
  groups (``store.consumer_groups()``, ``rocketstore groups``).
* :mod:`~rocketstore.consumers.membership`: a consumer's membership in a
  group shared by several consumers: the queues it owns, the hand-over, the
  fence on commits (``docs/format.md``, §13.2).
"""

from __future__ import annotations

from rocketstore.consumers.async_consumer import AsyncConsumer
from rocketstore.consumers.consumer import Consumer

__all__ = ["AsyncConsumer", "Consumer"]

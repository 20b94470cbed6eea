"""Consumers and consumer groups: everything that reads a topic for a group.

* :mod:`~rocketstore.consumers.consumer`: :class:`Consumer`, the Kafka-style
  consumer (positions, poll, commit, seek) made by ``store.consumer()``;
  ``_contract.py`` is what it needs of a store.
* :mod:`~rocketstore.consumers.offsets`: the committed offsets shared by
  processes, ``config/consumerOffset.json`` (``docs/format.md``, §13).
* :mod:`~rocketstore.consumers.groups`: listing, resetting and deleting
  groups (``store.consumer_groups()``, ``rocketstore groups``).
"""

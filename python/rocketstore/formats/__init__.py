"""File formats RocketMQ uses besides the store itself: Java ``.properties``
(``broker.conf``) and fastjson's JSON (the broker's config files)."""

"""Explicit limits: every bound the router enforces, in one frozen object.

Unbounded inputs are implicit limits that fail unpredictably; these make them
explicit, configurable (``[limits]`` in ``conf/router.toml``, environment
``ROUTER__LIMITS__<NAME>``, ``--set limits.<name>=...``, all read by
:func:`routing.settings.load_settings`; or :meth:`Limits.replace`) and testable. The
validation layer (:mod:`routing.validation`) enforces them where data enters
the system: the subscription table and the stream.
"""

from __future__ import annotations

import dataclasses

from routing.config import ConfigError

#: The largest value of any limit: what a Spark ``int``, an Arrow 32-bit offset and the native side's
#: ``u32``/``usize`` all hold, so a limit that loads is one every layer can apply (``2**70`` was an
#: ``OverflowError`` inside the routing UDF).
MAX_LIMIT = 2**31 - 1


@dataclasses.dataclass(frozen=True)
class Limits:
    max_key_bytes: int = 255
    """UTF-8 bytes of a routing key (AMQP short string: 255)."""
    max_key_words: int = 32
    """Words in a routing key."""
    max_pattern_bytes: int = 255
    """UTF-8 bytes of a subscription pattern."""
    max_pattern_words: int = 32
    """Words in a subscription pattern, wildcards included."""
    max_hash_words: int = 16
    """``#`` words in one pattern."""
    max_subscriber_bytes: int = 255
    """UTF-8 bytes of a subscriber id."""
    max_subscriptions_per_subscriber: int = 10_000
    """Distinct patterns one subscriber may hold."""
    max_match_cost_per_subscriber: int = 50_000
    """Matching work one subscriber's patterns may add to the lookup of any one routing key, in trie states
    (:func:`routing.topic.match_cost`: a word before a pattern's first ``#`` costs 1, a word from it on
    ``max_key_words + 1``, since the walk may meet it at every key position). One subscriber cannot slow every
    message down; the refresh job rejects a subscribe past it (``match_cost_exceeded``). The default lets one
    subscriber hold 10,000 three-word patterns, or about a thousand of the ``tenant.<id>.#`` kind, and keeps the
    worst key near a millisecond."""
    max_subscriptions_per_table: int = 5_000_000
    """Active (pattern, subscriber) pairs the subscription table may hold in all: the matcher every executor receives
    grows with it. The refresh job rejects subscribes past it (``subscription_table_full``); rows already active are
    never dropped."""
    max_payload_bytes: int = 1_048_576
    """Bytes of one message payload (1 MiB, like Kafka and NATS)."""
    max_headers_bytes: int = 65_536
    """Bytes of one message's headers: every key's UTF-8 bytes plus every value's bytes (64 KiB). Every delivery
    row copies them, so past it the message is dead-lettered (``headers_too_large``)."""
    max_fanout: int = 10_000
    """Subscribers one message may fan out to; past it the message is dead-lettered whole."""
    max_batch_rows: int = 1_000_000
    """Rows one matcher call may take."""

    def __post_init__(self) -> None:
        for field in dataclasses.fields(self):
            value = getattr(self, field.name)
            if not isinstance(value, int) or isinstance(value, bool) or value < 1:
                raise ConfigError(f"setting limits.{field.name} must be a positive integer, got {value!r}")
            if value > MAX_LIMIT:
                raise ConfigError(f"setting limits.{field.name} must be at most {MAX_LIMIT} (2^31 - 1), got {value}")
        if self.max_hash_words > self.max_pattern_words:
            raise ConfigError(
                f"limit max_hash_words={self.max_hash_words} exceeds max_pattern_words={self.max_pattern_words}"
            )

    def replace(self, **changes: int) -> Limits:
        """A copy with some limits changed (validated like a loaded one)."""
        return dataclasses.replace(self, **changes)


DEFAULT_LIMITS = Limits()

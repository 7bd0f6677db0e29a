"""Produce sample traffic to Kafka: a load generator with configurable routing-key distributions.

    python -m jobs.produce --count 100000 [--distribution seed|vocab|sample] [--rate 5000]

Distributions (all seeded, so a run is reproducible):

``seed``    the fast-topic-matching seed's keys: 5 words, each the decimal string of a random
            63-bit integer (almost never matched: a worst case for the matcher's misses);
``vocab``   5 words drawn from a vocabulary of ``--vocabulary`` words (Zipf-like skew), the
            realistic case;
``sample``  keys of the sample subscriptions (stocks, forex, crypto) plus a share of hostile
            keys (null, empty, empty words, unicode, over-long, not UTF-8): what ``make demo``
            routes.

The key goes where ``router.key_source`` says (message key, header or JSON field). Progress goes
to stderr every ``--progress`` seconds; the last line is a JSON summary.
"""

from __future__ import annotations

import argparse
import json
import random
import sys
import time
from collections.abc import Callable, Iterator, Sequence
from typing import Any

from routing.config import ConfigError
from routing.settings import Settings, add_settings_arguments, settings_from_args

DISTRIBUTIONS = ("seed", "vocab", "sample")

SAMPLE_KEYS = [
    "stock.nasdaq.msft",
    "stock.nasdaq.aapl",
    "stock.nyse.ibm",
    "stock.nyse.ge",
    "stock.lse.msft",
    "forex.usd",
    "forex.eur",
    "forex.gbp.spot",
    "crypto.btc.usd",
    "crypto.eth.usd",
    "crypto.btc.eur.spot",
    "weather.paris",
    "news.tech.ai",
]
HOSTILE_KEYS: list[bytes | None] = [
    None,
    b"",
    b".",
    b"stock..msft",
    "stock.caf\u00e9.msft".encode(),
    b"\xff\xfe.bad",
    b"k" * 300,
    b".".join([b"w"] * 40),
]


def seed_keys(rng: random.Random) -> Iterator[bytes | None]:
    while True:
        yield ".".join(str(rng.getrandbits(63)) for _ in range(5)).encode()


def vocab_keys(rng: random.Random, vocabulary: int) -> Iterator[bytes | None]:
    words = [f"w{index}" for index in range(vocabulary)]
    weights = [1.0 / (rank + 1) for rank in range(vocabulary)]
    while True:
        yield ".".join(rng.choices(words, weights, k=5)).encode()


def sample_keys(rng: random.Random, hostile_share: float) -> Iterator[bytes | None]:
    while True:
        if rng.random() < hostile_share:
            yield rng.choice(HOSTILE_KEYS)
        else:
            yield rng.choice(SAMPLE_KEYS).encode()


def key_stream(
    distribution: str, rng: random.Random, *, vocabulary: int, hostile_share: float
) -> Iterator[bytes | None]:
    if distribution == "seed":
        return seed_keys(rng)
    if distribution == "vocab":
        return vocab_keys(rng, vocabulary)
    return sample_keys(rng, hostile_share)


def placed(settings: Settings, key: bytes | None, payload: bytes) -> dict[str, Any]:
    """Producer arguments putting the routing key where the router will look for it."""
    router = settings.router
    if router.key_kind == "key":
        return {"key": key, "value": payload}
    if router.key_kind == "header":
        return {"key": None, "value": payload, "headers": [] if key is None else [(router.key_name, key)]}
    body: dict[str, Any] = {"payload": payload.decode("latin-1")}
    if key is not None:
        body[router.key_name] = key.decode("utf-8", "surrogateescape").encode("utf-8", "replace").decode()
    return {"key": None, "value": json.dumps(body).encode()}


def produce(
    settings: Settings,
    *,
    topic: str,
    count: int,
    distribution: str = "sample",
    seed: int = 7,
    payload_bytes: int = 64,
    rate: float | None = None,
    vocabulary: int = 300,
    hostile_share: float = 0.05,
    progress_s: float = 2.0,
    report: Callable[[str], None] = lambda line: print(line, file=sys.stderr, flush=True),
) -> dict[str, Any]:
    """Produce ``count`` messages and wait for every delivery report; returns a summary."""
    from confluent_kafka import KafkaError, Producer

    rng = random.Random(seed)
    keys = key_stream(distribution, rng, vocabulary=vocabulary, hostile_share=hostile_share)
    producer = Producer({**settings.kafka_client_config(), "linger.ms": 20, "enable.idempotence": True})
    failures: list[str] = []

    def delivered(error: KafkaError | None, _message: Any) -> None:
        if error is not None:
            failures.append(str(error))

    started = time.monotonic()
    last_report = started
    for index in range(count):
        payload = (f"{index}:".encode() + b"x" * payload_bytes)[:payload_bytes] if payload_bytes else b""
        while True:
            try:
                producer.produce(topic, **placed(settings, next(keys), payload), on_delivery=delivered)
                break
            except BufferError:  # local queue full: let it drain (backpressure, not loss)
                producer.poll(0.1)
        producer.poll(0)
        if rate:
            ahead = (index + 1) / rate - (time.monotonic() - started)
            if ahead > 0:
                time.sleep(ahead)
        now = time.monotonic()
        if now - last_report >= progress_s:
            last_report = now
            report(f"produce: {index + 1}/{count} ({(index + 1) / (now - started):,.0f} msg/s)")
    remaining = producer.flush(60)
    elapsed = time.monotonic() - started
    summary = {
        "topic": topic,
        "produced": count - len(failures) - remaining,
        "failed": len(failures) + remaining,
        "seconds": round(elapsed, 3),
        "msg_per_s": round(count / elapsed, 1) if elapsed else None,
        "distribution": distribution,
    }
    if failures:
        summary["first_error"] = failures[0]
    return summary


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m jobs.produce", description=__doc__.splitlines()[0])
    add_settings_arguments(parser)
    parser.add_argument("--topic", help="topic to produce to (default: the first of router.topics)")
    parser.add_argument("--count", type=int, default=10_000, help="messages to produce (default 10000)")
    parser.add_argument("--distribution", choices=DISTRIBUTIONS, default="sample")
    parser.add_argument("--seed", type=int, default=7, help="random seed (default 7)")
    parser.add_argument("--payload-bytes", type=int, default=64, help="bytes per payload (default 64)")
    parser.add_argument("--rate", type=float, help="messages per second (default: as fast as possible)")
    parser.add_argument("--vocabulary", type=int, default=300, help="words in the vocab distribution")
    parser.add_argument("--hostile-share", type=float, default=0.05, help="share of hostile keys (sample)")
    parser.add_argument("--progress", type=float, default=2.0, help="seconds between progress lines")
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if args.count < 0 or args.payload_bytes < 0 or (args.rate is not None and args.rate <= 0):
        parser.error("--count and --payload-bytes must be >= 0 and --rate > 0")
    if not 0 <= args.hostile_share <= 1 or args.vocabulary < 1:
        parser.error("--hostile-share must be within [0, 1] and --vocabulary >= 1")
    try:
        settings = settings_from_args(args)
    except ConfigError as error:
        print(f"produce: {error}", file=sys.stderr)
        return 2
    topic = args.topic or settings.router.topics[0]
    summary = produce(
        settings,
        topic=topic,
        count=args.count,
        distribution=args.distribution,
        seed=args.seed,
        payload_bytes=args.payload_bytes,
        rate=args.rate,
        vocabulary=args.vocabulary,
        hostile_share=args.hostile_share,
        progress_s=args.progress,
    )
    print(json.dumps(summary, sort_keys=True), flush=True)
    return 0 if summary["failed"] == 0 else 1


if __name__ == "__main__":
    sys.exit(main())

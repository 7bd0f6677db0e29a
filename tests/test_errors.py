"""The error classes are the one home of the reason codes (``routing.errors``).

The dead-letter reasons are stored in Delta tables and in the metrics table's ``dead_<reason>``
columns, so their text is pinned here; ``tests/integration/test_dead_letter_reasons.py`` checks
that the router emits exactly these.
"""

from __future__ import annotations

from routing import errors
from routing.router import tables
from udfs.route import FANOUT_REASON


def test_the_dead_letter_reasons_are_the_error_classes_codes() -> None:
    assert tuple(error.reason for error in errors.DEAD_LETTER_ERRORS) == errors.DEAD_LETTER_REASONS
    assert errors.DEAD_LETTER_REASONS == (
        "null_key",
        "key_too_long",
        "invalid_key",
        "too_many_words",
        "payload_too_large",
        "headers_too_large",
        "fanout_limit",
    )
    assert tables.DEAD_LETTER_REASONS is errors.DEAD_LETTER_REASONS
    assert errors.FanoutLimitError.reason == FANOUT_REASON


def test_every_error_class_has_its_own_code() -> None:
    classes: list[type[errors.TopicError]] = []
    pending: list[type[errors.TopicError]] = [errors.TopicError]
    while pending:
        error = pending.pop()
        classes.append(error)
        pending += error.__subclasses__()
    codes = [error.reason for error in classes]
    assert len(codes) == len(set(codes)), codes

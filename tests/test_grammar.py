"""The key grammar's declaration (:mod:`routing.grammar`) and the projections of it that run in this process.

``tests/rules.tsv`` says what each case must give; the Python validator and the native bulk loads
(``check_row`` in the native crate's ``bulk.rs``) are run on every case it holds, and the
declaration itself is checked against the limits, the error classes and the native reason codes.
The router's Spark SQL classification is run on the same table in
``tests/integration/test_router_classify.py``.
"""

from __future__ import annotations

import dataclasses
import re
from pathlib import Path

import pyarrow as pa
import pytest
from rules import RULES, Case

from routing import errors, grammar
from routing.errors import TopicError
from routing.grammar import Check, Policy, Rule
from routing.limits import MAX_LIMIT, Limits
from routing.matchers import CSTrieMatcher, FrozenMatcher
from routing.matchers.native import BulkRowError
from routing.validation import Validator

NATIVE = Path(__file__).resolve().parents[1] / "native"
#: Each subject's rules, as the declaration lists them.
SUBJECT_RULES: dict[str, tuple[Rule, ...]] = {
    "key": grammar.KEY_RULES,
    "payload": grammar.PAYLOAD_RULES,
    "headers": grammar.HEADER_RULES,
    "pattern": grammar.PATTERN_RULES,
    "subscriber": grammar.SUBSCRIBER_RULES,
}
#: Every rule the declaration holds.
ALL_RULES: tuple[Rule, ...] = (
    *grammar.KEY_RULES,
    *grammar.PAYLOAD_RULES,
    *grammar.HEADER_RULES,
    grammar.FANOUT_RULE,
    *grammar.PATTERN_RULES,
    *grammar.SUBSCRIBER_RULES,
    grammar.ACL_RULE,
    *grammar.HOLDING_RULES,
)
#: The rules a native bulk load applies to a row: the amqp ones of its pattern, then of its subscriber, but UTF-8
#: (Arrow validates a whole column's UTF-8, and a column that breaks it fails the call as malformed).
BULK_RULES: tuple[Rule, ...] = tuple(
    rule
    for rule in (*grammar.PATTERN_RULES, *grammar.SUBSCRIBER_RULES)
    if rule.applies(Policy.AMQP) and rule.check is not Check.UTF8
)
#: Limits so large that no case of the table reaches one: a bulk load given no limits.
NO_LIMITS = Limits(**{field.name: MAX_LIMIT for field in dataclasses.fields(Limits)})


def python_outcome(case: Case, validator: Validator) -> str | None:
    """The reason code the Python validator gives ``case`` (``None``: accepted)."""
    try:
        if case.subject == "key":
            assert not isinstance(case.value, str | list)
            validator.decode_key(case.value)
        elif case.subject == "payload":
            assert not isinstance(case.value, str | list)
            validator.check_payload(case.value)
        elif case.subject == "headers":
            assert case.value is None or isinstance(case.value, list)
            validator.check_headers(case.value)
        elif case.subject == "pattern":
            assert isinstance(case.value, str)
            validator.validate_pattern(case.value)
        else:
            assert isinstance(case.value, str)
            validator.validate_subscriber(case.value)
    except TopicError as error:
        return error.reason
    return None


@pytest.mark.parametrize("case", RULES, ids=str)
def test_the_python_validator_gives_every_outcome(case: Case) -> None:
    for policy, expected in case.expected.items():
        validator = Validator(limits=case.limits, policy=policy)
        if case.value is None and case.subject in ("pattern", "subscriber"):
            # The Python API takes str: no value is a programming error, not data with a reason.
            call = validator.validate_pattern if case.subject == "pattern" else validator.validate_subscriber
            with pytest.raises(TypeError, match="must be str, not NoneType"):
                call(case.value)  # type: ignore[arg-type]
            continue
        assert python_outcome(case, validator) == expected, (policy.value, str(case))
        if case.subject == "key" and isinstance(case.value, bytes):
            try:
                text = case.value.decode("utf-8")
            except UnicodeDecodeError:
                continue
            # A key given as str is judged as its bytes are.
            try:
                validator.validate_key(text)
            except TopicError as error:
                assert error.reason == expected, (policy.value, str(case))
            else:
                assert expected is None, (policy.value, str(case))


def _arrow_can_hold(case: Case) -> bool:
    return not isinstance(case.value, str) or not re.search("[\ud800-\udfff]", case.value)


BULK_CASES = [case for case in RULES if case.subject in ("pattern", "subscriber") and _arrow_can_hold(case)]


def bulk_outcome(case: Case, limits: Limits | None) -> str | None:
    """The reason code a native bulk load gives ``case`` as a row beside a valid pattern or subscriber."""
    pair = (case.value, "s") if case.subject == "pattern" else ("p", case.value)
    patterns, subscribers = pa.array([pair[0]], type=pa.string()), pa.array([pair[1]], type=pa.string())
    trie = CSTrieMatcher()
    try:
        added = trie.subscribe_many(patterns, subscribers, limits=limits)
    except BulkRowError as error:
        assert len(trie) == 0, "a bad row applied nothing"
        with pytest.raises(BulkRowError) as frozen:
            FrozenMatcher.from_arrow(patterns, subscribers, limits=limits)
        assert frozen.value.rows == error.rows
        [(row, reason, _)] = error.rows
        assert row == 0
        return reason
    assert added == 1 and trie.subscriptions() == {pair}
    return None


@pytest.mark.parametrize("case", BULK_CASES, ids=str)
def test_the_native_bulk_loads_give_every_amqp_outcome(case: Case) -> None:
    assert bulk_outcome(case, case.limits) == case.expected[Policy.AMQP]
    # Without limits only the rules without one apply; the no-value rules of a bulk row have none.
    without = case.expected[Policy.AMQP] if case.value is None else python_outcome(case, Validator(limits=NO_LIMITS))
    assert bulk_outcome(case, None) == without


def test_the_native_reason_codes_are_the_declarations() -> None:
    """Every code a bulk load reports is a declared rule's, and the native source names no other."""
    declared = set(grammar.reasons(BULK_RULES))
    reported = {bulk_outcome(case, case.limits) for case in BULK_CASES} - {None}
    assert reported == declared
    # The codes the native crate spells out (its `pub mod reason`, wherever the workspace keeps it).
    blocks = [block for text in native_sources() for block in re.findall(r"pub mod reason \{(.*?)\n\}", text, re.S)]
    assert len(blocks) == 1, "one `pub mod reason` in the native crates"
    assert set(re.findall(r'pub const \w+: &str = "(\w+)";', blocks[0])) == declared


def native_sources() -> list[str]:
    return [source.read_text(encoding="utf-8") for source in NATIVE.rglob("*.rs") if "target" not in source.parts]


def test_the_native_words_are_the_declarations() -> None:
    """The native crate spells the separator and wildcards out too (its matchers run ``tests/validity.tsv``)."""
    spelled = [
        found
        for text in native_sources()
        for found in re.findall(r"pub const (SEPARATOR|STAR|HASH): (?:char|&str) = ['\"](.+?)['\"];", text)
    ]
    assert sorted(spelled) == sorted([("SEPARATOR", grammar.SEPARATOR), ("STAR", grammar.STAR), ("HASH", grammar.HASH)])


@pytest.mark.parametrize(("subject", "rules"), SUBJECT_RULES.items())
def test_the_table_breaks_every_rule(subject: str, rules: tuple[Rule, ...]) -> None:
    """Each reason a subject's rules give is some case's outcome under each policy the rule applies under."""
    for policy in Policy:
        outcomes = {case.expected[policy] for case in RULES if case.subject == subject}
        assert outcomes - {None} == set(grammar.reasons(tuple(rule for rule in rules if rule.applies(policy))))
        assert None in outcomes


def test_every_limit_bounds_a_rule() -> None:
    limits = [rule.limit for rule in ALL_RULES if rule.limit is not None]
    assert len(limits) == len(set(limits)), "one rule per limit"
    # max_batch_rows bounds a matcher call (BatchLimitError), not a text: it has no reason code.
    assert set(limits) == {field.name for field in dataclasses.fields(Limits)} - {"max_batch_rows"}
    # A rule with a limit measures something; one without checks a property.
    measures = {Check.BYTES, Check.WORDS, Check.HASH_WORDS, Check.COUNT, Check.HEADER_BYTES}
    for rule in ALL_RULES:
        assert (rule.limit is not None) == (rule.check in measures), rule


def test_every_code_is_declared_once_and_named_by_its_error_class() -> None:
    codes = {value for name, value in vars(grammar).items() if name.isupper() and isinstance(value, str)}
    codes -= {grammar.SEPARATOR, grammar.STAR, grammar.HASH, grammar.STRICT_WORD_CLASS, grammar.STRICT_WORD}
    codes -= {grammar.CONTROL_CHARACTERS, grammar.NOT_UTF8_TEXT}
    assert codes == {rule.reason for rule in ALL_RULES}, "every declared code is some rule's"
    # Codes reported as codes alone (a bulk row, a refresh batch's reject) have no class; every other has one.
    without_class = {grammar.NULL_PATTERN, grammar.NULL_SUBSCRIBER, grammar.SUBSCRIPTION_TABLE_FULL}
    for code in codes - without_class:
        assert errors.error_for(code).reason == code
    for code in without_class:
        with pytest.raises(KeyError):
            errors.error_for(code)


def test_the_derived_reason_lists() -> None:
    assert grammar.DEAD_LETTER_REASONS == (
        "null_key",
        "key_too_long",
        "invalid_key",
        "too_many_words",
        "payload_too_large",
        "headers_too_large",
        "fanout_limit",
    )
    assert set(grammar.SUBSCRIPTION_FIELD_REASONS) == {
        "invalid_subscriber",
        "invalid_pattern",
        "pattern_too_long",
        "pattern_too_many_words",
        "too_many_hash_words",
        "forbidden_pattern",
    }


def test_strict_words() -> None:
    assert grammar.STRICT_WORD == "[A-Za-z0-9_-]+"
    for word in ("a", "Z9", "_", "-", "a-b_C"):
        assert grammar.strict_word_fault(word) is None
    assert grammar.strict_word_fault("") == "empty words are not allowed under the strict policy"
    for control in ("\x00", "a\x1f", "\x7f", "\x85", "\x9f"):
        assert grammar.strict_word_fault(control) == "control characters are not allowed under the strict policy"
    for other in ("é", "a b", "*", "#", "a/b", "\ufeff", "\xa0"):
        assert grammar.strict_word_fault(other) == f"word {other!r} is not [A-Za-z0-9_-]+ as the strict policy requires"

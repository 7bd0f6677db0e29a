"""``python -m routing match`` and ``explain``, and the alignment behind ``explain``.

Oracles: the regex matcher (:mod:`routing.reference`) for every verdict and every
``match`` answer, and, for import files, a last-op-per-pair replay of events
written with strictly increasing timestamps (so the file semantics reduce to
"the last event for a pair wins"). The Delta-table case (one Spark test) checks
the table path against the file path over the same imports.
"""

from __future__ import annotations

import contextlib
import json
import os
import random
import socket
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import NoReturn

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from strategies import pattern_and_key

from jobs.cluster import free_ports
from routing.__main__ import main
from routing.explain import ANY_WORDS, LITERAL, ONE_WORD, explain, word_kind
from routing.reference import ReferenceMatcher, reference_matches
from routing.topic import HASH, STAR, split_words

SAMPLES = Path(__file__).resolve().parent.parent / "conf" / "samples"


def run(*argv: str) -> tuple[int, list[str], list[str]]:
    out: list[str] = []
    err: list[str] = []
    code = main(list(argv), out=out.append, err=err.append)
    return code, out, err


# -- explain: the alignment --------------------------------------------------------------------


def check_alignment(pattern: str, key: str) -> None:
    """Every property an explanation must have, matched or not."""
    result = explain(pattern, key)
    assert result.matched == reference_matches(pattern, key)
    pwords, kwords = split_words(pattern), split_words(key)
    # Steps are consecutive pattern words, each consuming a contiguous run of key words right after the last.
    position = 0
    for index, step in enumerate(result.steps):
        assert step.pattern_index == index and step.pattern_word == pwords[index]
        assert step.key_start == position and step.key_slice == tuple(kwords[step.key_start : step.key_end])
        if step.pattern_word == HASH:
            assert step.key_end >= step.key_start
        else:
            assert step.key_end == step.key_start + 1
            if step.pattern_word != STAR:
                assert kwords[step.key_start] == step.pattern_word
        position = step.key_end
    if result.matched:
        assert len(result.steps) == len(pwords) and position == len(kwords)
        assert result.failures == ()
        return
    assert result.failures, "a miss always says why"
    stuck = len(result.steps)
    for failure in result.failures:
        assert failure.pattern_index == (None if stuck == len(pwords) else stuck)
        if failure.pattern_index is None:
            assert failure.key_index < len(kwords)  # key words left over
        elif failure.key_index < len(kwords):
            word = pwords[stuck]
            assert word != HASH and word != STAR and word != kwords[failure.key_index]
        else:
            assert pwords[stuck] != HASH  # needed a word, none left


@settings(max_examples=300)
@given(pattern_and_key())
def test_explain_agrees_with_the_oracle_and_aligns_validly(case: tuple[str, str]) -> None:
    check_alignment(*case)


@settings(max_examples=150)
@given(st.lists(st.sampled_from(["a", "b", STAR, HASH]), max_size=10), st.lists(st.sampled_from("ab"), max_size=12))
def test_explain_on_dense_wildcard_patterns(pattern: list[str], key: list[str]) -> None:
    check_alignment(".".join(pattern), ".".join(key))


@pytest.mark.parametrize(
    ("pattern", "key", "matched", "consumed"),
    [
        # consumed: key words per pattern word along the reported alignment (for a miss: the partial one)
        ("stock.*.msft", "stock.nasdaq.msft", True, [["stock"], ["nasdaq"], ["msft"]]),
        ("#.#", "a.b", True, [["a", "b"], []]),  # the earlier '#' is greedy
        ("#", "", True, [[]]),
        ("", "", True, []),
        ("*.#.*", "x", False, [["x"], []]),
        ("stock.*", "stock.nasdaq.msft", False, [["stock"], ["nasdaq"]]),
        ("a*", "ab", False, []),  # a glued wildcard is a literal
        ("a*", "a*", True, [["a*"]]),
        ("a.#.c", "a.b.d", False, [["a"], ["b", "d"]]),
        ("*", "", False, []),
        ("", "a", False, []),
        ("#.a", ".a", True, [[""], ["a"]]),  # empty words are real words
    ],
)
def test_explain_validity_table(pattern: str, key: str, matched: bool, consumed: list[list[str]]) -> None:
    result = explain(pattern, key)
    assert result.matched is matched is reference_matches(pattern, key)
    assert [list(step.key_slice) for step in result.steps] == consumed


def test_explain_names_the_failure() -> None:
    text = explain("a.#.c", "a.b.d").render()
    assert "does NOT match" in text
    assert "pattern word 3 'c' differs from key word 2 'b'" in text
    assert "pattern word 3 'c' differs from key word 3 'd'" in text
    assert "needs a key word, none is left" in text
    assert "the pattern ended but 1 key word(s) are left: 'msft'" in explain("stock.*", "stock.nasdaq.msft").render()


def test_word_kinds() -> None:
    assert [word_kind(word) for word in ("*", "#", "a*", "#b", "")] == [ONE_WORD, ANY_WORDS, LITERAL, LITERAL, LITERAL]


def test_explain_is_polynomial_on_many_hashes() -> None:
    # 15 '#' against a 31-word key: exponential backtracking would never return.
    pattern = ".".join([HASH] * 15 + ["z"])
    key = ".".join(["a"] * 31)
    assert explain(pattern, key).matched is False
    assert explain(pattern, key + ".z").matched is True


def test_explain_rejects_non_text() -> None:
    with pytest.raises(TypeError):
        explain(b"a.b", "a.b")  # type: ignore[arg-type]
    code, _, err = run("explain", "a.\udcff", "a.b")  # what a non-UTF-8 argv byte decodes to
    assert code == 2 and "invalid_pattern" in err[0]


# -- explain: the command ------------------------------------------------------------------------


@settings(max_examples=60)
@given(pattern_and_key())
def test_explain_command_exit_status_is_the_verdict(case: tuple[str, str]) -> None:
    pattern, key = case
    code, out, _ = run("explain", pattern, key)
    assert code == (0 if reference_matches(pattern, key) else 1)
    assert out[0].startswith(f"pattern {pattern!r} {'MATCHES' if code == 0 else 'does NOT match'}")


def test_explain_notes_what_the_policy_would_reject() -> None:
    code, out, _ = run("explain", "--set", "validation.policy=strict", "#", "a b")
    assert code == 0
    notes = [line for line in out if "note: the configured validation would reject this key" in line]
    assert len(notes) == 1 and "invalid_key" in notes[0]


@pytest.mark.parametrize(
    ("flags", "pattern", "key", "reason"),
    [
        ([], "#", "a" * 256, "key_too_long"),
        ([], "a" * 256, "a", "pattern_too_long"),
        ([], ".".join(["a"] * 33), "a", "pattern_too_many_words"),
        ([], "#", ".".join(["a"] * 33), "too_many_words"),
        ([], ".".join(["#"] * 17), "a", "too_many_hash_words"),
        (["--set", "limits.max_key_words=2"], "#", "a.b.c", "too_many_words"),
        # A pattern of 14,000 words (with byte limits raised so the word limit decides) once took 5.8 GB here.
        (["--set", "limits.max_pattern_bytes=100000"], ".".join(["a"] * 14_000), "a", "pattern_too_many_words"),
        (["--set", "limits.max_key_bytes=100000"], "#", ".".join(["a"] * 14_000), "too_many_words"),
    ],
)
def test_explain_checks_the_limits_before_building_anything(
    flags: list[str], pattern: str, key: str, reason: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Over a limit, explain refuses with the router's reason code (exit 2) and never builds its words x words table."""
    import routing.explain

    def never(*args: object, **kwargs: object) -> None:
        raise AssertionError("the alignment table must not be built for over-limit input")

    monkeypatch.setattr(routing.explain, "explain_words", never)
    code, out, err = run("explain", *flags, pattern, key)
    assert (code, out) == (2, [])
    assert f"[reason={reason}]" in err[0] and err[0].startswith("explain: ")


def test_explain_with_raised_limits_is_bounded_by_its_table_and_small_within_it() -> None:
    """4,000 x 4,000 words once took 517 MB: past ``--max-cells`` it is one line and exit 2, and a table within
    the default bound costs its 4 bytes a cell (an array per row), not a Python object per cell."""
    import tracemalloc

    raised = ["--set", "limits.max_pattern_bytes=100000", "--set", "limits.max_pattern_words=5000"]
    raised += ["--set", "limits.max_key_bytes=100000", "--set", "limits.max_key_words=5000"]
    raised += ["--set", "limits.max_hash_words=5000"]
    words = ".".join(["a"] * 4_000)
    code, out, err = run("explain", *raised, "#." + words, words)
    assert (code, out) == (2, [])
    assert err[0].startswith("explain: 4001 pattern words x 4000 key words need a 16,012,002-cell") and len(err) == 1
    assert run("explain", *raised, "--max-cells", "0", "#", "a")[0] == 2
    shorter = ".".join(["a"] * 1_000)
    assert run("explain", *raised, "--max-cells", "1000000", "#." + shorter, shorter)[0] == 2  # 1,002,001 cells
    code, out, _ = run("explain", *raised, "#." + shorter, shorter)  # within the default 4,000,000
    assert code == 0 and out[0].startswith("pattern '#.a.a")
    tracemalloc.start()
    try:
        assert explain(".".join(["#", *["a"] * 700]), ".".join(["a"] * 700)).matched
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < 6 * 1024 * 1024, peak  # 491,401 cells: 2 MB of table (lists of ints took 10 MB)


def test_explain_validates_with_the_settings_of_conf_and_set(tmp_path: Path) -> None:
    """``explain`` loads its settings like every job: --conf, then ROUTER__ variables, then --set."""
    conf = tmp_path / "router.toml"
    conf.write_text('[validation]\npolicy = "strict"\n[limits]\nmax_key_words = 2\n', encoding="utf-8")
    code, out, err = run("explain", "--conf", str(conf), "#", "a.b c.d")
    assert code == 2 and out == [] and "too_many_words" in err[0]  # a limit: refused before aligning
    code, out, _ = run("explain", "--conf", str(conf), "--set", "limits.max_key_words=5", "#", "a.b c.d")
    assert code == 0
    assert any("reject this key" in line and "invalid_key" in line for line in out)  # strict: no space
    code, out, err = run("explain", "--set", "limits.max_key_words=0", "#", "a")
    assert code == 2 and out == [] and "max_key_words" in err[0]


# -- match from files ------------------------------------------------------------------------------


def write_events(path: Path, events: list[tuple[str, str, str]], start_ts: int) -> None:
    """JSON lines (or CSV by suffix) of (op, subscriber, pattern) with strictly increasing ts."""
    if path.suffix == ".csv":
        lines = ["op,subscriber,pattern,ts"]
        lines += [f'{op},{subscriber},"{pattern}",{start_ts + i}' for i, (op, subscriber, pattern) in enumerate(events)]
    else:
        lines = [
            json.dumps({"op": op, "subscriber": subscriber, "pattern": pattern, "ts": start_ts + i})
            for i, (op, subscriber, pattern) in enumerate(events)
        ]
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")


def replay(events: list[tuple[str, str, str]]) -> set[tuple[str, str]]:
    """The active (pattern, subscriber) pairs: the last op for each pair wins."""
    last: dict[tuple[str, str], str] = {}
    for op, subscriber, pattern in events:
        last[(pattern, subscriber)] = op
    return {pair for pair, op in last.items() if op == "subscribe"}


def expected_lines(pairs: set[tuple[str, str]], keys: list[str]) -> list[str]:
    oracle = ReferenceMatcher(sorted(pairs))
    return [f"{key!r} -> {', '.join(sorted(oracle.lookup(key))) or 'nobody'}" for key in keys]


# Patterns the CSV writer can quote plainly (no '"' in the alphabet) and that every policy accepts.
event_patterns = st.lists(st.sampled_from(["a", "b", "stock", STAR, HASH]), min_size=1, max_size=4).map(".".join)
events = st.lists(
    st.tuples(
        st.sampled_from(["subscribe", "subscribe", "unsubscribe"]), st.sampled_from(["s1", "s2", "s3"]), event_patterns
    ),
    max_size=25,
)
lookup_keys = st.lists(
    st.lists(st.sampled_from(["a", "b", "stock", "x"]), min_size=1, max_size=4).map(".".join), min_size=1, max_size=8
)


@settings(max_examples=60, deadline=None)
@given(events, events, lookup_keys)
def test_match_files_agree_with_a_replay_and_the_oracle(
    tmp_path_factory: pytest.TempPathFactory,
    first: list[tuple[str, str, str]],
    second: list[tuple[str, str, str]],
    keys: list[str],
) -> None:
    folder = tmp_path_factory.mktemp("match")
    write_events(folder / "first.csv", first, start_ts=1_000)
    write_events(folder / "second.json", second, start_ts=100_000)  # later files win ties in time too
    code, out, err = run(
        "match", "--subscriptions", str(folder / "first.csv"), "--subscriptions", str(folder / "second.json"), *keys
    )
    assert code == 0, err
    assert out == expected_lines(replay(first + second), keys)


def test_match_sample_files_json_output() -> None:
    keys = ["stock.nasdaq.msft", "forex.usd", "nothing.here"]
    files = [str(SAMPLES / "subscriptions.csv"), str(SAMPLES / "subscriptions.json")]
    code, out, err = run("match", "--json", "--subscriptions", files[0], "--subscriptions", files[1], *keys)
    assert code == 0, err
    # The samples are last-writer-wins by their own timestamps; check against the model-independent oracle
    # over the pairs each sample line leaves active once ordered by ts.
    from routing.settings import load_settings
    from routing.subscriptions.events import read_import_file

    validator = load_settings().validator()
    ordered: list[tuple[int, str, str, str]] = []
    for name in files:
        _, outcomes = read_import_file(name, validator, max_event_bytes=65_536)
        for outcome in outcomes:
            assert outcome.event is not None, "the samples hold only valid events"
            event = outcome.event
            ordered.append((event.ts_millis, event.op.value, event.subscriber, event.pattern))
    ordered.sort(key=lambda item: item[0])
    oracle = ReferenceMatcher(sorted(replay([(op, sub, pattern) for _, op, sub, pattern in ordered])))
    assert [json.loads(line) for line in out] == [
        {"key": key, "subscribers": sorted(oracle.lookup(key))} for key in keys
    ]


def test_match_plain_pattern_subscriber_csv(tmp_path: Path) -> None:
    rng = random.Random(5)
    words = ["a", "b", STAR, HASH]
    pairs = {(".".join(rng.choices(words, k=rng.randint(1, 4))), f"s{rng.randint(1, 5)}") for _ in range(60)}
    path = tmp_path / "plain.csv"
    path.write_text("subscriber,pattern\n" + "".join(f"{s},{p}\n" for p, s in sorted(pairs)), encoding="utf-8")
    keys = [".".join(rng.choices(["a", "b", "c"], k=rng.randint(1, 5))) for _ in range(40)]
    code, out, err = run("match", "--subscriptions", str(path), *keys)
    assert code == 0 and err == []
    assert out == expected_lines(pairs, keys)


def test_match_reports_rejected_lines_and_keys(tmp_path: Path) -> None:
    path = tmp_path / "events.json"
    path.write_text(
        '{"op": "subscribe", "subscriber": "s1", "pattern": "a.#", "ts": 1}\n'
        "not json\n"
        '{"op": "subscribe", "subscriber": "s2", "pattern": "a.*", "ts": "yesterday"}\n',
        encoding="utf-8",
    )
    plain = tmp_path / "plain.csv"
    plain.write_text("pattern,subscriber\nb.*,\nb.*,s3,extra\nb.*,s3\n", encoding="utf-8")
    code, out, err = run(
        "match", "--subscriptions", str(path), "--subscriptions", str(plain), "a.b", "b.c", "a.." + "b" * 300
    )
    assert code == 0
    assert out[:2] == ["'a.b' -> s1", "'b.c' -> s3"]
    assert "rejected" in out[2] and "key_too_long" in out[2]
    assert f"{path}: 2 line(s) rejected (invalid_ts=1, malformed_json=1)" in err
    assert any("line 2:" in line and "malformed_json" in line for line in err)
    assert f"{plain}: 2 line(s) rejected (invalid_subscriber=1, malformed_csv=1)" in err


def test_match_enforces_the_subscription_limit_in_plain_csv(tmp_path: Path) -> None:
    path = tmp_path / "plain.csv"
    path.write_text("pattern,subscriber\na,s1\nb,s1\nc,s1\nc,s2\n", encoding="utf-8")
    code, out, err = run(
        "match", "--set", "limits.max_subscriptions_per_subscriber=2", "--subscriptions", str(path), "a", "b", "c"
    )
    assert code == 0
    assert out == ["'a' -> s1", "'b' -> s1", "'c' -> s2"]
    assert any("too_many_subscriptions=1" in line for line in err)


def test_match_dead_letters_over_the_fanout_limit(tmp_path: Path) -> None:
    path = tmp_path / "plain.csv"
    path.write_text("pattern,subscriber\n#,s1\na,s2\na.#,s3\n", encoding="utf-8")
    code, out, _ = run("match", "--set", "limits.max_fanout=2", "--subscriptions", str(path), "--json", "a", "b")
    assert code == 0
    assert json.loads(out[0])["rejected"] == "fanout_limit"
    assert json.loads(out[1]) == {"key": "b", "subscribers": ["s1"]}


@pytest.mark.parametrize(
    ("content", "name", "message"),
    [
        (None, "missing.csv", "is neither a file nor a Delta table directory"),
        ("a,b\n1,2\n", "bad.csv", "lacks column(s) op, subscriber, pattern, ts (or name pattern,subscriber"),
        ("x", "subs.txt", "unknown format '.txt'"),
        ("", "empty.csv", "is empty (a CSV import needs a header)"),
        ("pattern,subscriber,ts\na,s1,1\n", "dated.csv", "lacks column(s) op\n"),
    ],
)
def test_match_source_errors(tmp_path: Path, content: str | None, name: str, message: str) -> None:
    path = tmp_path / name
    if content is not None:
        path.write_text(content, encoding="utf-8")
    code, out, err = run("match", "--subscriptions", str(path), "a")
    assert code == 2 and out == []
    assert message in err[0] + "\n"


@pytest.mark.parametrize("header", ["op,subscriber,pattern", "subscriber,pattern,op"])
def test_match_refuses_an_import_file_the_refresh_job_refuses(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], header: str
) -> None:
    """The issue's case: an import CSV without ``ts`` is no subscription list, so its unsubscribe stays one.

    The CLI and the refresh job read import files with one reader: both exit 2 with the same message.
    """
    from jobs.refresh_subscriptions import main as refresh

    path = tmp_path / "events.csv"
    rows = {"op": ["subscribe", "unsubscribe"], "subscriber": ["s1", "s1"], "pattern": ["a", "a"]}
    columns = header.split(",")
    path.write_text("\n".join([header, *(",".join(rows[c][i] for c in columns) for i in range(2))]) + "\n")

    def no_spark(*args: object, **kwargs: object) -> NoReturn:
        raise AssertionError("Spark must not start")

    code, out, err = run("match", "--subscriptions", str(path), "a")
    job_code = refresh(["--import", str(path)], spark_factory=no_spark)
    job_err = capsys.readouterr().err.strip().splitlines()
    assert code == job_code == 2 and out == []
    assert err == [f"match: import file {str(path)!r}: CSV header lacks column(s) ts"]
    assert job_err[-1:] == [err[0].replace("match: ", "refresh_subscriptions: ", 1) + "; nothing was imported"]


def test_match_flag_errors(tmp_path: Path) -> None:
    path = tmp_path / "plain.csv"
    path.write_text("pattern,subscriber\na,s1\n", encoding="utf-8")
    code, _, err = run("match", "--version", "1", "--subscriptions", str(path), "a")
    assert code == 2 and "--version applies only to a Delta table" in err[0]
    code, _, err = run("match", "--set", "limits.max_key_bytes=x", "--subscriptions", str(path), "a")
    assert code == 2 and "max_key_bytes" in err[0]
    with pytest.raises(SystemExit) as exit_info:
        run("match", "a")  # --subscriptions is required
    assert exit_info.value.code == 2
    with pytest.raises(SystemExit) as exit_info:
        run("match", "--subscriptions", str(path))  # at least one key
    assert exit_info.value.code == 2


@pytest.mark.parametrize("command", ["match", "explain", "subscribe", "unsubscribe", "list", "tail"])
def test_help(command: str, capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exit_info:
        run(command, "--help")
    assert exit_info.value.code == 0
    text = capsys.readouterr().out
    assert f"python -m routing {command}" in text and "Exit status" in text


def test_entry_point_runs_as_a_module() -> None:
    completed = subprocess.run(
        [sys.executable, "-m", "routing", "explain", "stock.#", "stock.nasdaq.msft"],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert completed.returncode == 0, completed.stderr
    assert "'#'          (zero or more words) -> key words 2-3 'nasdaq.msft'" in completed.stdout


# -- subscribe, unsubscribe, list: argument handling, no broker, no Spark -----------------------------

ACL_RULES = json.dumps([{"subscribers": "tenant-42-*", "patterns": ["tenant.42.#"]}])


def unreachable_broker() -> list[str]:
    """Flags pointing Kafka at a port nothing listens on, giving up after a second: sending anything fails."""
    (port,) = free_ports(1)
    return ["--set", f"kafka.bootstrap_servers=127.0.0.1:{port}", "--set", "kafka.start_timeout_s=1"]


@pytest.mark.parametrize(
    ("argv", "reasons"),
    [
        (["subscribe", "s1", "a.b", "a..b", "--set", "validation.policy=strict"], ["invalid_pattern"]),
        (
            ["subscribe", "tenant-42-web", "tenant.42.x", "tenant.*.x", "--set", f"acl.rules={ACL_RULES}"],
            ["forbidden_pattern"],
        ),
        (
            [
                "subscribe",
                "s1",
                "a.b.c.d",
                "x" * 20,
                "--set",
                "limits.max_pattern_words=3",
                "--set",
                "limits.max_hash_words=3",
                "--set",
                "limits.max_pattern_bytes=10",
            ],
            ["pattern_too_many_words", "pattern_too_long"],
        ),
        (
            ["subscribe", "s1", "a", "b", "c", "--set", "limits.max_subscriptions_per_subscriber=2"],
            ["too_many_subscriptions"],
        ),
        (["unsubscribe", "", "a"], ["invalid_subscriber"]),
        (["subscribe", "s1", "#", "x.#", "--set", "limits.max_match_cost_per_subscriber=40"], ["match_cost_exceeded"]),
    ],
)
def test_a_refused_change_publishes_nothing(argv: list[str], reasons: list[str]) -> None:
    # The broker is unreachable: had anything been sent, the exit status would be 1.
    code, out, err = run(*argv, "--json", *unreachable_broker())
    assert code == 2, err
    (line,) = out
    report = json.loads(line)
    assert [refusal["reason"] for refusal in report["refused"]] == reasons
    assert report["changes"] == [] and report["error"] is None and report["refresh"] is None
    # One line per refusal, naming the pattern (or the command) and the reason, then the verdict.
    assert [line.rpartition("[reason=")[2] for line in err[:-1]] == [f"{reason}]" for reason in reasons]
    assert err[-1] == f"{argv[0]}: nothing was published"


def test_an_unsubscribe_passes_the_acl_and_an_unreachable_broker_is_exit_1() -> None:
    code, out, err = run(
        "unsubscribe",
        "tenant-42-web",
        "#",
        "tenant.*",
        "--json",
        "--set",
        f"acl.rules={ACL_RULES}",
        *unreachable_broker(),
    )
    assert code == 1
    report = json.loads(out[0])
    assert report["refused"] == [] and [change["pattern"] for change in report["changes"]] == ["#", "tenant.*"]
    assert report["error"].startswith("no Kafka broker accepted a connection at 127.0.0.1:")
    assert "within 1 s (kafka.start_timeout_s)" in report["error"]
    assert err == [f"unsubscribe: {report['error']}", "unsubscribe: nothing was published"]


@contextlib.contextmanager
def hung_broker() -> Iterator[list[str]]:
    """Flags pointing Kafka at a socket that accepts connections and never answers, giving up after a second."""
    with socket.create_server(("127.0.0.1", 0)) as server:
        yield [
            "--set",
            f"kafka.bootstrap_servers=127.0.0.1:{server.getsockname()[1]}",
            "--set",
            "kafka.start_timeout_s=1",
        ]


def test_a_broker_that_never_acknowledges_is_exit_1() -> None:
    with hung_broker() as flags:
        code, out, err = run("subscribe", "s1", "a.#", "b", "--json", *flags)
    assert code == 1
    report = json.loads(out[0])
    assert "2 of 2 change(s) not acknowledged" in report["error"] and "kafka.start_timeout_s" in report["error"]
    assert [(change["pattern"], change["offset"]) for change in report["changes"]] == [("a.#", None), ("b", None)]
    assert all(change["error"] for change in report["changes"])
    assert (
        err[-1] == "subscribe: whether the unconfirmed change(s) reached the topic is unknown: re-run the same command"
    )


def test_sasl_password_is_never_printed(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    canary = "canary-Pa55word-" + tmp_path.name
    sasl = [
        "--set",
        "kafka.security_protocol=SASL_PLAINTEXT",
        "--set",
        "kafka.sasl_mechanism=SCRAM-SHA-256",
        "--set",
        "kafka.sasl_username=router",
    ]
    with hung_broker() as flags:  # the producer connects with its SASL settings, and no answer comes
        completed = subprocess.run(
            [sys.executable, "-m", "routing", "subscribe", "s1", "a.#", "--json", *sasl, *flags],
            capture_output=True,
            text=True,
            timeout=120,
            check=False,
            env={**os.environ, "ROUTER_KAFKA_SASL_PASSWORD": canary},
        )
    assert completed.returncode == 1, completed.stderr
    assert "not acknowledged" in json.loads(completed.stdout)["error"]
    assert canary not in completed.stdout + completed.stderr
    # Without a password, SASL is a user mistake, found before anything is sent.
    monkeypatch.delenv("ROUTER_KAFKA_SASL_PASSWORD", raising=False)
    code, out, err = run("subscribe", "s1", "a.#", *sasl)
    assert code == 2 and out == [] and "ROUTER_KAFKA_SASL_PASSWORD" in err[0]


def test_change_and_list_argument_errors(tmp_path: Path) -> None:
    for argv in (["subscribe"], ["subscribe", "s1"], ["unsubscribe", "s1"], ["list", "--version", "x"]):
        with pytest.raises(SystemExit) as exit_info:
            run(*argv)
        assert exit_info.value.code == 2, argv
    code, _, err = run("subscribe", "s1", "a", "--set", "kafka.client_port=0")
    assert code == 2 and err == ["subscribe: setting kafka.client_port must be a TCP port between 1 and 65535, got 0"]
    code, out, err = run("list", "--set", f"subscriptions.table_path={tmp_path}")
    assert code == 2 and out == []
    assert err == [
        f"list: no subscription table at {str(tmp_path)!r} (subscriptions.table_path; the refresh job creates it)"
    ]


def test_tail_argument_errors(tmp_path: Path) -> None:
    for argv in (["tail"], ["tail", "--subscriber"], ["tail", "--subscriber", "s1", "--limit", "x"]):
        with pytest.raises(SystemExit) as exit_info:
            run(*argv)
        assert exit_info.value.code == 2, argv
    table = ["--set", f"router.deliveries_path={tmp_path}"]
    code, out, err = run("tail", "--subscriber", "s1", "--limit", "0", *table)
    assert (code, out, err) == (2, [], ["tail: --limit must be at least 1, not 0"])
    code, out, err = run("tail", "--subscriber", "s1", *table)
    assert code == 2 and out == []
    assert err == [f"tail: no deliveries table at {str(tmp_path)!r} (router.deliveries_path; the router creates it)"]


def test_tail_default_checkpoint_is_per_subscriber_beside_the_routers() -> None:
    from routing.tail import default_checkpoint

    names = ["s1", "s/1", "s 1", "../s1", "", "é" * 127]
    paths = [default_checkpoint("/data/checkpoints/route/", name) for name in names]
    assert len(set(paths)) == len(names)
    for path in paths:
        parent, _, leaf = path.rpartition("/")
        assert parent == "/data/checkpoints/tail" and leaf and len(leaf.encode()) <= 255 and ".." not in leaf
    assert paths[0].startswith("/data/checkpoints/tail/s1-")
    assert default_checkpoint("s3a://bucket/cp/route", "s1").startswith("s3a://bucket/cp/tail/s1-")


def test_tail_row_formats() -> None:
    import base64
    import datetime as dt

    from routing.tail import row_json, row_line

    row = {
        "subscriber_id": "s1",
        "routing_key": "stock.nasdaq.msft",
        "source_topic": "t",
        "source_partition": 0,
        "source_offset": 7,
        "kafka_timestamp": dt.datetime(2026, 1, 5, 10, 0, 0, 123000, tzinfo=dt.UTC),
        "payload": b"\xff\x00",
        "headers": [{"key": "h", "value": b"v"}, {"key": "n", "value": None}],
        "kafka_date": dt.date(2026, 1, 5),
    }
    shown = row_json(row)
    assert base64.b64decode(shown["payload"]) == b"\xff\x00"
    assert shown["headers"] == [{"key": "h", "value": "dg=="}, {"key": "n", "value": None}]
    assert (shown["kafka_timestamp"], shown["kafka_date"]) == ("2026-01-05T10:00:00.123000Z", "2026-01-05")
    assert row_line(row) == "2026-01-05T10:00:00.123000Z stock.nasdaq.msft t:0:7 base64:/wA="
    assert row_line({**row, "payload": b"hello"}).endswith(" t:0:7 hello")


# -- match from a Delta table --------------------------------------------------------------------


@pytest.mark.integration
@pytest.mark.slow
def test_match_delta_table_agrees_with_the_import_files(spark: object, settings: object, tmp_path: Path) -> None:
    import dataclasses

    from jobs.refresh_subscriptions import import_files
    from routing.settings import Settings
    from routing.subscriptions import read_active

    assert isinstance(settings, Settings)
    table = tmp_path / "subscriptions"
    local = settings.replace(
        subscriptions=dataclasses.replace(
            settings.subscriptions, table_path=str(table), rejects_path=str(tmp_path / "rejects")
        )
    )
    files = [str(SAMPLES / "subscriptions.csv"), str(SAMPLES / "subscriptions.json")]
    import_files(spark, local, files)  # type: ignore[arg-type]
    keys = ["stock.nasdaq.msft", "stock.lse.msft", "forex.usd", "crypto.btc.eur.spot", "nothing"]
    code, from_table, err = run("match", "--subscriptions", str(table), *keys)
    assert code == 0, err
    code, from_files, _ = run("match", "--subscriptions", files[0], "--subscriptions", files[1], *keys)
    assert from_table == from_files
    assert from_table == expected_lines(set(read_active(spark, str(table))), keys)  # type: ignore[arg-type]
    # Time travel: version 1 is the table after the first file only.
    code, first_only, _ = run("match", "--subscriptions", str(table), "--version", "1", *keys)
    assert code == 0
    code, from_csv, _ = run("match", "--subscriptions", files[0], *keys)
    assert first_only == from_csv
    code, _, err = run("match", "--subscriptions", str(table), "--version", "99", "a")
    assert code == 2 and "cannot be read at version 99" in err[-1]


def test_a_handed_over_row_decodes_to_the_same_python_values() -> None:
    """Tail on Spark Connect hands rows over as tagged JSON lines: every column type comes back as it was."""
    import datetime as dt

    from routing.tail import _decode, _encode

    row = {
        "delivery_id": "ab" * 32,
        "subscriber_id": "s\u2028with a line separator\n",
        "source_partition": 3,
        "source_offset": 2**40,
        "payload": b"\x00\xff{}",
        "headers": [{"key": "k", "value": b"v"}, {"key": "none", "value": None}],
        "kafka_timestamp": dt.datetime(2026, 1, 5, 12, 30, 1, 250000),  # naive local, as PySpark's
        "kafka_date": dt.date(2026, 1, 5),
        "fanout": None,
        "tags": {"$b": "not a tag"},  # a map whose key looks like a tag stays a map
    }
    line = json.dumps(_encode(row), ensure_ascii=False)
    assert "\n" not in line  # one row, one line, whatever its text holds
    assert _decode(json.loads(line)) == row
    with pytest.raises(ValueError, match="unknown tag"):
        _decode({"$x": 1})

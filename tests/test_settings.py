"""Settings: one loader, defaults in the code restated by ``conf/router.toml``, paths relative to their file,
files, environment and flags in that order, secrets that never show.

No JVM, no broker: these only load settings.
"""

from __future__ import annotations

import argparse
import dataclasses
import re
import textwrap
import tomllib
import typing
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from routing import config, settings
from routing.config import DEFAULT_CONF, REPO_ROOT, ConfigError
from routing.settings import (
    ARROW_BATCH_ROWS,
    ARROW_OUTPUT_BATCH_BYTES,
    SASL_PASSWORD_ENV,
    SECTIONS,
    Secret,
    Settings,
    add_settings_arguments,
    integer_range,
    load_settings,
    parse_overrides,
    settings_from_args,
)
from routing.validation import Policy


def test_the_settings_file_restates_every_default_of_every_section(monkeypatch: pytest.MonkeyPatch) -> None:
    """Defaults live in the dataclasses; conf/router.toml lists each one with the same value."""
    monkeypatch.chdir(config.REPO_ROOT)  # where the code's relative defaults land, as the file's paths do
    with DEFAULT_CONF.open("rb") as handle:
        conf = tomllib.load(handle)
    assert set(conf) == set(SECTIONS)
    for name, cls in SECTIONS.items():
        # Every field with a value is in the file (None, like the SASL fields, has no TOML spelling).
        defaults = {field.name for field in dataclasses.fields(cls) if getattr(cls(), field.name) is not None}
        assert defaults <= set(conf[name]), f"[{name}] lacks {sorted(defaults - set(conf[name]))}"
    loaded = load_settings(DEFAULT_CONF, env={})
    code = Settings()
    for name in SECTIONS:
        assert getattr(loaded, name) == getattr(code, name), name


def test_relative_paths_in_a_file_are_relative_to_its_directory(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    folder = tmp_path / "deploy" / "conf"
    folder.mkdir(parents=True)
    conf = folder / "router.toml"
    conf.write_text(
        '[subscriptions]\ntable_path = "tables/subs"\nrejects_path = "/abs/rejects"\n'
        '[router]\ncheckpoint_path = "../checkpoints"\nmetrics_path = ""\n',
        encoding="utf-8",
    )
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    monkeypatch.chdir(elsewhere)
    loaded = load_settings(
        conf,
        env={"ROUTER__ROUTER__DELIVERIES_PATH": "out/deliveries"},
        overrides={"router": {"dead_letters_path": "out/dead"}},
    )
    assert loaded.subscriptions.table_path == str(folder / "tables" / "subs")
    assert loaded.subscriptions.rejects_path == "/abs/rejects"
    assert Path(loaded.router.checkpoint_path).resolve() == tmp_path / "deploy" / "checkpoints"
    assert loaded.router.metrics_path == ""  # empty stays empty: off
    # From the environment, a flag or a default (not in the file): the current directory.
    assert loaded.router.deliveries_path == str(elsewhere / "out" / "deliveries")
    assert loaded.router.dead_letters_path == str(elsewhere / "out" / "dead")
    assert loaded.subscriptions.checkpoint_path == str(elsewhere / "var" / "checkpoints" / "refresh_subscriptions")
    # The same file gives the same paths from any directory.
    monkeypatch.chdir(tmp_path)
    assert load_settings(conf, env={}).subscriptions.table_path == loaded.subscriptions.table_path


#: (section, key, value, kept): URIs stay as written where Spark opens the path; ``None`` means refused.
URI_PATH_CASES = [
    ("router", "deliveries_path", "s3a://bucket/router/deliveries", True),
    ("router", "checkpoint_path", "abfss://box@account.dfs.core.windows.net/checkpoints/route", True),
    ("router", "metrics_path", "gs://bucket/metrics", True),
    ("subscriptions", "table_path", "s3a://bucket/subscriptions", True),
    ("subscriptions", "checkpoint_path", "file:/tmp/checkpoints/refresh", True),
    # Opened by this process (or the broker it starts): local only.
    ("kafka", "data_dir", "s3a://bucket/kafka", None),
    ("spark", "jars_dir", "hdfs://namenode:8020/jars", None),
]


@pytest.mark.parametrize(("section", "key", "value", "kept"), URI_PATH_CASES)
def test_uri_paths_are_kept_where_spark_opens_them_and_refused_elsewhere(
    tmp_path: Path, section: str, key: str, value: str, kept: bool | None
) -> None:
    conf = tmp_path / "router.toml"
    conf.write_text(f'[{section}]\n{key} = "{value}"\n', encoding="utf-8")
    sources: list[Callable[[], Settings]] = [
        lambda: load_settings(conf, env={}),  # from a file (relative paths there resolve against its folder)
        lambda: load_settings(env={f"ROUTER__{section.upper()}__{key.upper()}": value}),
        lambda: load_settings(env={}, overrides={section: {key: value}}),
    ]
    for load in sources:
        if kept:
            assert getattr(getattr(load(), section), key) == value
        else:
            with pytest.raises(ConfigError, match=rf"{section}\.{key} must be a local path, got the URI"):
                load()


def test_the_repository_file_puts_state_in_the_repository_var_wherever_a_job_starts(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    loaded = load_settings(DEFAULT_CONF, env={})
    assert loaded.spark.jars_dir == str(config.REPO_ROOT / "var" / "jars" / "spark")
    assert loaded.router.deliveries_path == str(config.REPO_ROOT / "var" / "delta" / "deliveries")


def test_the_repository_root_is_computed_once() -> None:
    assert settings.REPO_ROOT is config.REPO_ROOT
    assert config.DEFAULT_CONF == config.REPO_ROOT / "conf" / "router.toml"


# -- files, environment, flags and secrets --------------------------------------------------------

PASSWORD = 'pa"ss\\w0rd-never-logged'
SASL = {"security_protocol": "SASL_SSL", "sasl_mechanism": "SCRAM-SHA-512", "sasl_username": "router"}


def write_conf(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "router.toml"
    path.write_text(textwrap.dedent(text))
    return path


def test_defaults_load_and_relative_paths_resolve_against_the_settings_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (tmp_path / "cwd").mkdir()
    monkeypatch.chdir(tmp_path / "cwd")
    conf = write_conf(tmp_path, '[subscriptions]\ntable_path = "somewhere/table"\n[kafka]\ndata_dir = "/abs/kafka"\n')
    settings = load_settings(conf, env={})
    assert settings.subscriptions.table_path == str(tmp_path / "somewhere" / "table")
    assert settings.kafka.data_dir == "/abs/kafka"
    # Not in the file: the code's default, relative to the current directory (tests/test_settings.py).
    assert settings.spark.jars_dir == str(tmp_path / "cwd" / "var" / "jars" / "spark")
    assert settings.kafka.bootstrap_servers == f"127.0.0.1:{settings.kafka.client_port}"


def test_the_repository_settings_file_loads() -> None:
    settings = load_settings(REPO_ROOT / "conf" / "router.toml", env={})
    assert settings.spark.master.startswith("local[")
    assert settings.kafka.client_port != settings.kafka.controller_port


@pytest.mark.parametrize(
    ("toml", "named"),
    [
        ("[kafka]\nnope = 1\n", "kafka.nope"),
        ("[router]\nmax_offsets_per_trigger = 'four'\n", "router.max_offsets_per_trigger"),
        ("[spark.conf]\n'spark.sql.execution.arrow.maxRecordsPerBatch' = 'four'\n", "maxRecordsPerBatch"),
        ("[spark.conf]\n'spark.sql.execution.arrow.maxBytesPerOutputBatch' = 0\n", "maxBytesPerOutputBatch"),
        ("[spark.conf]\n'spark.sql.execution.arrow.maxBytesPerOutputBatch' = 2147483648\n", "maxBytesPerOutputBatch"),
        ("[router]\nfail_on_data_loss = 'yes'\n", "router.fail_on_data_loss"),
        ("[kafka]\nclient_port = 70000\n", "kafka.client_port"),
        ("[kafka]\nclient_port = 20000\ncontroller_port = 20000\n", "kafka.controller_port"),
        ("[kafka]\nsecurity_protocol = 'TLS'\n", "kafka.security_protocol"),
        ("[kafka]\nsecurity_protocol = 'SASL_SSL'\nsasl_username = 'u'\n", "kafka.sasl_mechanism"),
        ("[kafka]\nstart_timeout_s = 'lots'\n", "kafka.start_timeout_s"),
        ("[subscriptions]\nstarting_offsets = 'middle'\n", "subscriptions.starting_offsets"),
        ("[subscriptions]\nmax_offsets_per_trigger = 0\n", "subscriptions.max_offsets_per_trigger"),
        ("[spark.conf]\n'spark.x' = ['a']\n", "spark.conf.spark.x"),
        ("[limits]\nmax_key_bytes = 0\n", "max_key_bytes"),
        ("[validation]\npolicy = 'lenient'\n", "lenient"),
    ],
)
def test_bad_settings_are_rejected_naming_the_key(tmp_path: Path, toml: str, named: str) -> None:
    with pytest.raises(ConfigError, match=rf"(^|\W){named}(\W|$)"):
        load_settings(write_conf(tmp_path, toml), env={})


def test_environment_overrides_the_file_and_flags_override_the_environment(tmp_path: Path) -> None:
    conf = write_conf(tmp_path, "[kafka]\nclient_port = 20001\n[router]\nmax_offsets_per_trigger = 3\n")
    env = {"ROUTER__KAFKA__CLIENT_PORT": "20002", "ROUTER__ROUTER__MAX_OFFSETS_PER_TRIGGER": "5"}
    from_env = load_settings(conf, env=env)
    assert (from_env.kafka.client_port, from_env.router.max_offsets_per_trigger) == (20002, 5)
    assert from_env.kafka.bootstrap_servers.endswith(":20002")

    parser = argparse.ArgumentParser()
    add_settings_arguments(parser)
    flags = ["--conf", str(conf), "--set", "router.max_offsets_per_trigger=7", "--set", "router.fail_on_data_loss=off"]
    args = parser.parse_args(flags)
    from_flags = settings_from_args(args, env=env)
    assert (from_flags.kafka.client_port, from_flags.router.max_offsets_per_trigger) == (20002, 7)
    assert from_flags.router.fail_on_data_loss is False


def test_bad_environment_and_flag_values_name_the_key(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match=r"kafka\.client_port"):
        load_settings(env={"ROUTER__KAFKA__CLIENT_PORT": "lots"})
    with pytest.raises(ConfigError, match=r"spark\.nope"):
        load_settings(env={"ROUTER__SPARK__NOPE": "1"})
    with pytest.raises(ConfigError, match=r"subscriptions\.max_offsets_per_trigger"):
        load_settings(env={}, overrides=parse_overrides(["subscriptions.max_offsets_per_trigger=-5"]))
    for malformed in ("no_equals_sign", "nosection=1", "=1", "nowhere.key=1"):
        with pytest.raises(ConfigError, match="--set"):
            parse_overrides([malformed])
    with pytest.raises(ConfigError, match="nowhere"):
        load_settings(env={}, overrides={"nowhere": {"key": 1}})


def test_spark_conf_table_entries_merge_with_flags(tmp_path: Path) -> None:
    conf = write_conf(tmp_path, "[spark.conf]\n'spark.a' = 'file'\n'spark.b' = true\n")
    overrides = parse_overrides(["spark.conf.spark.b=flag", "spark.conf.spark.sql.c.d=2"])
    settings = load_settings(conf, env={}, overrides=overrides)
    assert settings.spark.conf == {"spark.a": "file", "spark.b": "flag", "spark.sql.c.d": "2"}
    assert load_settings(conf, env={}).spark.conf == {"spark.a": "file", "spark.b": "true"}


def test_validator_follows_limits_and_policy(tmp_path: Path) -> None:
    conf = write_conf(tmp_path, "[limits]\nmax_key_words = 3\n[validation]\npolicy = 'strict'\n")
    validator = load_settings(conf, env={}).validator()
    assert validator.policy is Policy.STRICT
    assert validator.limits.max_key_words == 3
    assert validator.validate_key("a.b.c") == ["a", "b", "c"]
    with pytest.raises(ValueError):
        validator.validate_key("a.b.c.d")


def test_plaintext_client_configs_carry_no_credentials() -> None:
    settings = load_settings(env={}, overrides={"kafka": {"bootstrap_servers": "h1:1,h2:2"}})
    assert settings.kafka_client_config() == {"bootstrap.servers": "h1:1,h2:2", "security.protocol": "PLAINTEXT"}
    assert settings.spark_kafka_options() == {
        "kafka.bootstrap.servers": "h1:1,h2:2",
        "kafka.security.protocol": "PLAINTEXT",
    }


def _assert_masked(settings: Settings) -> None:
    assert PASSWORD not in repr(settings)
    assert PASSWORD not in str(settings)
    assert PASSWORD not in repr(settings.kafka)
    assert "********" in repr(settings.kafka)


def test_sasl_password_from_environment_is_masked_but_reaches_clients() -> None:
    settings = load_settings(env={SASL_PASSWORD_ENV: PASSWORD}, overrides={"kafka": SASL})
    _assert_masked(settings)
    client = settings.kafka_client_config()
    assert client["sasl.password"] == PASSWORD
    assert (client["sasl.username"], client["sasl.mechanism"]) == ("router", "SCRAM-SHA-512")
    jaas = settings.spark_kafka_options()["kafka.sasl.jaas.config"]
    assert jaas == (
        'org.apache.kafka.common.security.scram.ScramLoginModule required username="router" '
        'password="pa\\"ss\\\\w0rd-never-logged";'
    )


def test_sasl_password_from_file(tmp_path: Path) -> None:
    secret_file = tmp_path / "password"
    secret_file.write_text(PASSWORD + "\n")
    overrides = {"kafka": {**SASL, "sasl_password_file": str(secret_file)}}
    settings = load_settings(env={}, overrides=overrides)
    _assert_masked(settings)
    assert settings.kafka.sasl_password == Secret(PASSWORD)
    assert settings.kafka_client_config()["sasl.password"] == PASSWORD

    with pytest.raises(ConfigError, match=r"kafka\.sasl_password_file") as missing:
        load_settings(env={}, overrides={"kafka": {**SASL, "sasl_password_file": str(tmp_path / "absent")}})
    assert PASSWORD not in str(missing.value)


def test_sasl_password_is_refused_from_the_file_variables_and_flags(tmp_path: Path) -> None:
    conf = write_conf(tmp_path, f"[kafka]\nsasl_password = '''{PASSWORD}'''\n")
    attempts: list[Callable[[], object]] = [
        lambda: load_settings(conf, env={}),
        lambda: load_settings(env={"ROUTER__KAFKA__SASL_PASSWORD": PASSWORD}),
        lambda: load_settings(env={}, overrides=parse_overrides([f"kafka.sasl_password={PASSWORD}"])),
    ]
    for attempt in attempts:
        with pytest.raises(ConfigError, match=SASL_PASSWORD_ENV) as refused:
            attempt()
        assert "kafka.sasl_password" in str(refused.value)
        assert PASSWORD not in str(refused.value)


def test_sasl_without_a_password_is_an_error() -> None:
    with pytest.raises(ConfigError, match=SASL_PASSWORD_ENV):
        load_settings(env={}, overrides={"kafka": SASL})


def test_settings_are_hashable_values() -> None:
    assert hash(load_settings(env={})) == hash(load_settings(env={}))
    assert load_settings(env={}) == load_settings(env={})


# -- settings that must agree, and ranges -----------------------------------------------------------

#: Every integer setting of every section, as (section, key).
INTEGER_SETTINGS = [
    (name, field.name)
    for name, cls in SECTIONS.items()
    for field in dataclasses.fields(cls)
    if typing.get_type_hints(cls)[field.name] is int
]


def test_there_are_integer_settings_to_bound() -> None:
    assert ("limits", "max_batch_rows") in INTEGER_SETTINGS and ("router", "retain_batches") in INTEGER_SETTINGS
    assert len(INTEGER_SETTINGS) >= 20


@pytest.mark.parametrize(("section", "key"), INTEGER_SETTINGS)
@pytest.mark.parametrize("value", ["below", -1, "above", 2**31, 2**63, 2**70])
def test_every_integer_setting_is_bounded(section: str, key: str, value: int | str) -> None:
    """Past its range (at most what the native side's usize/u32/i32 and Spark's int take), a value fails at load."""
    low, high, _ = integer_range(SECTIONS[section], key)
    number = low - 1 if value == "below" else high + 1 if value == "above" else int(value)
    for overrides in ({section: {key: number}}, parse_overrides([f"{section}.{key}={number}"])):
        with pytest.raises(ConfigError, match=rf"(^|\W){section}\.{key}(\W|$)"):
            load_settings(env={}, overrides=overrides)


#: Ends of a range that a rule across two settings refuses on its own (the rule has its own tests).
CROSS_FIELD_REFUSALS = {
    ("limits", "max_pattern_words", 1),
    ("limits", "max_hash_words", 2**31 - 1),
    ("limits", "max_batch_rows", 1),
}


@pytest.mark.parametrize(("section", "key"), INTEGER_SETTINGS)
def test_every_integer_setting_takes_both_ends_of_its_range(section: str, key: str) -> None:
    for end in integer_range(SECTIONS[section], key)[:2]:
        if (section, key, end) in CROSS_FIELD_REFUSALS:
            continue
        assert getattr(getattr(load_settings(env={}, overrides={section: {key: end}}), section), key) == end


def test_the_largest_integer_settings_load() -> None:
    limits = {key: 2**31 - 1 for section, key in INTEGER_SETTINGS if section == "limits"}
    arrow = {ARROW_BATCH_ROWS: str(2**31 - 1), ARROW_OUTPUT_BATCH_BYTES: str(2**31 - 1)}
    loaded = load_settings(env={}, overrides={"limits": limits, "spark": {"conf": arrow}})
    assert loaded.limits.max_batch_rows == loaded.spark.arrow_batch_rows == 2**31 - 1
    assert loaded.spark.arrow_output_batch_bytes == 2**31 - 1


@pytest.mark.parametrize(
    ("flag", "named"),
    [
        ("router.arrow_batch_rows=100", '"spark.sql.execution.arrow.maxRecordsPerBatch"'),
        ("router.max_output_batch_bytes=100", '"spark.sql.execution.arrow.maxBytesPerOutputBatch"'),
        ("spark.jars_provided=true", 'jars_dir = ""'),
    ],
)
def test_a_setting_of_an_earlier_release_says_where_it_went(tmp_path: Path, flag: str, named: str) -> None:
    key, value = flag.split("=")
    section, name = key.split(".")
    with pytest.raises(ConfigError, match=rf"setting {key} is gone: .*{re.escape(named)}"):
        load_settings(env={}, overrides=parse_overrides([flag]))
    with pytest.raises(ConfigError, match=rf"setting {key} from environment variable ROUTER__.* is gone"):
        load_settings(env={f"ROUTER__{section.upper()}__{name.upper()}": value})
    with pytest.raises(ConfigError, match=rf"setting {key} is gone"):
        load_settings(write_conf(tmp_path, f"[{section}]\n{name} = {value}\n"), env={})


def test_arrow_batches_must_fit_one_matcher_call() -> None:
    """Spark's Arrow batch rows above limits.max_batch_rows would load and then fail every full batch at run time."""
    disagree: dict[str, dict[str, object]] = {
        "spark": {"conf": {ARROW_BATCH_ROWS: "20000"}},
        "limits": {"max_batch_rows": 10_000},
    }
    with pytest.raises(ConfigError, match=r"maxRecordsPerBatch=20000.*limits\.max_batch_rows=10000"):
        load_settings(env={}, overrides=disagree)
    with pytest.raises(ConfigError, match=r"maxRecordsPerBatch=10000.*limits\.max_batch_rows=9999"):
        Settings().replace(limits=Settings().limits.replace(max_batch_rows=9_999))
    equal: dict[str, dict[str, object]] = {
        "spark": {"conf": {ARROW_BATCH_ROWS: "10000"}},
        "limits": {"max_batch_rows": 10_000},
    }
    agree = load_settings(env={}, overrides=equal)
    assert agree.spark.arrow_batch_rows == agree.limits.max_batch_rows
    unset = load_settings(env={}, overrides={"spark": {"conf": {}}})  # a [spark.conf] without it: Spark's key's default
    assert unset.spark.arrow_batch_rows == 10_000 and unset.spark.arrow_output_batch_bytes == 64 * 2**20


# -- every command line: a settings mistake is a clear error and exit status 2 ----------------------


def run_cli(command: str, settings_argv: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[int, str]:
    """(exit status, stderr) of one command line given these settings flags; none gets far enough to start Spark."""
    import sys

    from jobs import local_kafka, produce, refresh_subscriptions, route
    from routing import __main__ as routing_cli

    def to_stderr(line: str) -> None:
        print(line, file=sys.stderr)

    samples = str(REPO_ROOT / "conf" / "samples" / "subscriptions.csv")
    runners = {
        "routing explain": lambda: routing_cli.main(["explain", *settings_argv, "a", "a"], err=to_stderr),
        "routing match": lambda: routing_cli.main(
            ["match", "--subscriptions", samples, *settings_argv, "a"], err=to_stderr
        ),
        "refresh_subscriptions": lambda: refresh_subscriptions.main(settings_argv, spark_factory=_no_spark),
        "route": lambda: route.main(settings_argv),
        "produce": lambda: produce.main([*settings_argv, "--count", "0"]),
        "local_kafka": lambda: local_kafka.main(["status", *settings_argv]),
    }
    capsys.readouterr()
    code = runners[command]()
    return code, capsys.readouterr().err


def _no_spark(*args: object, **kwargs: object) -> Any:
    raise AssertionError("Spark must not start")


CLI_COMMANDS = ["routing explain", "routing match", "refresh_subscriptions", "route", "produce", "local_kafka"]

#: (settings flags, text the error must show)
BAD_SETTINGS_FLAGS = [
    (["--set", "limits.max_batch_rows=1180591620717411303424"], "limits.max_batch_rows"),
    (["--set", "spark.conf.spark.sql.execution.arrow.maxRecordsPerBatch=2000000"], "limits.max_batch_rows"),
    (["--set", "kafak.sasl_password=hunter2"], "did you mean [kafka]"),
    (["--set", "kafka.start_timeout_s=0"], "kafka.start_timeout_s"),
    (["--set", "router.refresh_interval_s=inf"], "router.refresh_interval_s"),
    (["--set", "router.max_offsets_per_trigger=١٢"], "router.max_offsets_per_trigger"),
    (["--set", "spark.conf.spark.sql.execution.arrow.maxRecordsPerBatch=١٢"], "maxRecordsPerBatch must be an integer"),
    # Files that are no settings file: a directory, a binary file, an endless device. {tmp} is a fresh directory.
    (["--conf", "{tmp}"], "cannot be read: Is a directory"),
    (["--conf", "{tmp}/binary.toml"], "is not UTF-8 text"),
    (["--conf", "/dev/zero"], "larger than 1 MiB"),
    (["--set", "kafka.sasl_password_file=/dev/zero"], "larger than 64 KiB"),
    (["--set", "kafka.sasl_password_file={tmp}"], "kafka.sasl_password_file"),
    # Past Python's own guards: a 5,000-digit integer (its 4,300-digit conversion limit) and nesting past its stack.
    (["--set", "limits.max_fanout=" + "9" * 5000], "limits.max_fanout must be an integer of at most 30 digits"),
    (["--conf", "{tmp}/huge_integer.toml"], "holds an integer too long to read"),
    (["--conf", "{tmp}/deep.toml"], "nests arrays or tables too deeply to read"),
    (["--set", "acl.rules=" + "[" * 5000 + "]" * 5000], "acl.rules must be JSON text"),
]


@pytest.mark.parametrize("command", CLI_COMMANDS)
@pytest.mark.parametrize(("flags", "named"), BAD_SETTINGS_FLAGS)
def test_every_command_line_refuses_bad_settings_with_exit_2(
    command: str,
    flags: list[str],
    named: str,
    capsys: pytest.CaptureFixture[str],
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.delenv(SASL_PASSWORD_ENV, raising=False)
    (tmp_path / "binary.toml").write_bytes(bytes(range(256)) * 4)
    (tmp_path / "huge_integer.toml").write_text("[limits]\nmax_fanout = " + "9" * 5000 + "\n")
    (tmp_path / "deep.toml").write_text("[limits]\nmax_fanout = " + "[" * 5000 + "]" * 5000 + "\n")
    code, err = run_cli(command, [flag.replace("{tmp}", str(tmp_path)) for flag in flags], capsys)
    assert code == 2, err
    assert named in err
    assert max(map(len, err.splitlines())) < 400, "an error quotes a value cut short"
    assert "Traceback" not in err
    assert "hunter2" not in err


# -- strict parsing ---------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("toml", "message"),
    [
        ("[kafak]\nheap = '1g'\n", r"unknown settings section \[kafak\].*did you mean \[kafka\]"),
        ("[limit]\nmax_key_bytes = 10\n", r"unknown settings section \[limit\].*did you mean \[limits\]"),
        ("[nothing_like_it]\nx = 1\n", r"unknown settings section \[nothing_like_it\] \(known: limits, "),
        ("heap = '1g'\n[kafka]\n", r"setting 'heap' is outside any section"),
    ],
)
def test_an_unknown_section_in_the_file_is_refused_with_a_hint(tmp_path: Path, toml: str, message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        load_settings(write_conf(tmp_path, toml), env={})


def test_an_unknown_section_in_the_environment_or_a_flag_is_refused_with_a_hint() -> None:
    with pytest.raises(ConfigError, match=r"ROUTER__KAFAK__HEAP.*unknown settings section \[kafak\].*\[kafka\]"):
        load_settings(env={"ROUTER__KAFAK__HEAP": "1g"})
    with pytest.raises(ConfigError, match=r"unknown settings section \[rooter\].*did you mean \[router\]"):
        parse_overrides(["rooter.topics=x"])
    for malformed in ("ROUTER__", "ROUTER__KAFKA", "ROUTER__KAFKA__", "ROUTER____HEAP"):
        with pytest.raises(ConfigError, match=rf"{malformed}: expected ROUTER__<SECTION>__<KEY>"):
            load_settings(env={malformed: "1"})
    assert load_settings(env={"ROUTER_CONF_X": "1", "OTHER__KAFAK__HEAP": "1"}) == Settings()


@pytest.mark.parametrize("digits", ["١٢٣", "۱۲۳", "१२३", "１２３", "12３", "²", " 123", "123 ", "1__2", "_12", "0x1f"])
def test_numbers_are_ascii_digits_only(digits: str) -> None:
    """Arabic-Indic (and every other non-ASCII) digits are not numbers in a setting, nor is stray text."""
    for key in ("router.max_offsets_per_trigger", "kafka.start_timeout_s"):
        with pytest.raises(ConfigError, match=rf"{key} must be"):
            load_settings(env={}, overrides=parse_overrides([f"{key}={digits}"]))
        section, name = key.split(".")
        with pytest.raises(ConfigError, match=rf"{key} must be"):
            load_settings(env={f"ROUTER__{section.upper()}__{name.upper()}": digits})


def test_ascii_numbers_still_parse() -> None:
    loaded = load_settings(
        env={"ROUTER__ROUTER__MAX_OFFSETS_PER_TRIGGER": "1_2", "ROUTER__KAFKA__START_TIMEOUT_S": "2.5e1"},
        overrides=parse_overrides(["router.refresh_interval_s=+.5"]),
    )
    assert (loaded.router.max_offsets_per_trigger, loaded.kafka.start_timeout_s) == (12, 25.0)
    assert loaded.router.refresh_interval_s == 0.5


@pytest.mark.parametrize("key", ["router.refresh_interval_s", "kafka.start_timeout_s"])
@pytest.mark.parametrize("value", ["inf", "-inf", "nan", "Infinity", "1e999", "0", "-1", "-0.5", "1e12"])
def test_durations_are_finite_positive_and_bounded(key: str, value: str) -> None:
    with pytest.raises(ConfigError, match=rf"{key.replace('.', '[.]')} must be"):
        load_settings(env={}, overrides=parse_overrides([f"{key}={value}"]))


@pytest.mark.parametrize("value", ["inf", "nan", "-inf"])
def test_toml_infinities_are_refused(tmp_path: Path, value: str) -> None:
    with pytest.raises(ConfigError, match=r"router\.refresh_interval_s must be"):
        load_settings(write_conf(tmp_path, f"[router]\nrefresh_interval_s = {value}\n"), env={})


# -- secrets never echoed ---------------------------------------------------------------------------

SECRET_FLAGS = [
    "kafak.sasl_password=hunter2",  # a misspelled section
    "kafka.sasl_passwrd=hunter2",  # a misspelled key
    "kafka.sasl_password=hunter2",  # the right key, refused there
    "kafkasasl_password=hunter2",  # no dot
    "spark.conf.spark.hadoop.fs.s3a.secret.key=hunter2",  # fine, but never echoed either way
    "spark.conf.spark.kafka.sasl.jaas.config=hunter2",
    "kafka.api_token=hunter2",
    "nowhere.secret=hunter2",
]


@pytest.mark.parametrize("flag", SECRET_FLAGS)
def test_an_error_never_echoes_a_secret_looking_value(flag: str) -> None:
    try:
        load_settings(env={}, overrides=parse_overrides([flag]))
    except ConfigError as error:
        assert "hunter2" not in str(error)


@pytest.mark.parametrize(
    "toml",
    [
        "[kafak]\nsasl_password = 'hunter2'\n",
        "[kafka]\nsasl_password = 'hunter2'\n",
        "[spark.conf]\n'spark.hadoop.fs.s3a.secret.key' = ['hunter2']\n",
        "[kafka]\nsasl_password_file = ['hunter2']\n",
    ],
)
def test_a_settings_file_error_never_echoes_a_secret_looking_value(tmp_path: Path, toml: str) -> None:
    with pytest.raises(ConfigError) as refused:
        load_settings(write_conf(tmp_path, toml), env={})
    assert "hunter2" not in str(refused.value)


def test_a_password_file_error_never_shows_its_content(tmp_path: Path) -> None:
    secret_file = tmp_path / "password"
    secret_file.write_bytes(b"hunter\xff2\n")
    with pytest.raises(ConfigError, match=r"kafka\.sasl_password_file: .*password is not UTF-8 text") as refused:
        load_settings(env={}, overrides={"kafka": {**SASL, "sasl_password_file": str(secret_file)}})
    for leak in ("hunter", "xff", "position", "byte 6"):
        assert leak not in str(refused.value).replace(str(tmp_path), "")


# -- files that are no settings or password file -------------------------------------------------


def test_a_settings_file_that_is_no_file_is_a_clear_error(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match=rf"settings file {tmp_path} cannot be read: Is a directory"):
        load_settings(tmp_path, env={})
    binary = tmp_path / "binary.toml"
    binary.write_bytes(b"[kafka]\nheap = '\xff\xfe'\n")
    with pytest.raises(ConfigError, match=r"binary\.toml is not UTF-8 text"):
        load_settings(binary, env={})
    with pytest.raises(ConfigError, match=r"settings file /dev/zero is larger than 1 MiB"):
        load_settings("/dev/zero", env={})


def test_a_password_file_is_read_with_a_bound(tmp_path: Path) -> None:
    """At most 64 KiB: /dev/zero (or a huge file named by mistake) is an error, not a read without end."""
    overrides = {"kafka": {**SASL, "sasl_password_file": "/dev/zero"}}
    with pytest.raises(ConfigError, match=r"kafka\.sasl_password_file: /dev/zero is larger than 64 KiB"):
        load_settings(env={}, overrides=overrides)
    largest = tmp_path / "largest"
    largest.write_bytes(b"p" * 65_536)
    loaded = load_settings(env={}, overrides={"kafka": {**SASL, "sasl_password_file": str(largest)}})
    assert loaded.kafka.sasl_password == Secret("p" * 65_536)
    too_large = tmp_path / "too_large"
    too_large.write_bytes(b"p" * 65_537)
    with pytest.raises(ConfigError, match="larger than 64 KiB") as refused:
        load_settings(env={}, overrides={"kafka": {**SASL, "sasl_password_file": str(too_large)}})
    assert "ppp" not in str(refused.value)
    with pytest.raises(ConfigError, match=r"kafka\.sasl_password_file: .* cannot be read: Is a directory"):
        load_settings(env={}, overrides={"kafka": {**SASL, "sasl_password_file": str(tmp_path)}})


# -- the local broker's SCRAM listener ------------------------------------------------------------


def test_sasl_port_is_the_local_scram_listener_and_the_jobs_default_address() -> None:
    scram = {"sasl_mechanism": "SCRAM-SHA-256", "sasl_username": "router", "sasl_port": 19094}
    jobs = load_settings(
        env={SASL_PASSWORD_ENV: PASSWORD}, overrides={"kafka": {**scram, "security_protocol": "SASL_PLAINTEXT"}}
    )
    assert jobs.kafka.bootstrap_servers == "127.0.0.1:19094"
    # The process managing the broker may stay on PLAINTEXT: its clients then use client_port.
    assert load_settings(env={}, overrides={"kafka": scram}).kafka.bootstrap_servers == "127.0.0.1:19092"
    assert (
        load_settings(
            env={},
            overrides=parse_overrides(
                ["kafka.sasl_port=19094", "kafka.sasl_mechanism=SCRAM-SHA-512", "kafka.sasl_username=u"]
            ),
        ).kafka.sasl_port
        == 19094
    )
    refused = [
        ({**scram, "sasl_port": 0}, r"kafka\.sasl_port must be a TCP port"),
        ({**scram, "sasl_port": 65536}, r"kafka\.sasl_port must be a TCP port"),
        ({**scram, "sasl_port": 19092}, r"kafka\.sasl_port must differ"),
        ({**scram, "sasl_mechanism": "PLAIN"}, r"kafka\.sasl_port .* needs kafka\.sasl_mechanism SCRAM-SHA-256 or"),
        ({**scram, "sasl_mechanism": None}, r"kafka\.sasl_mechanism SCRAM"),
        ({**scram, "sasl_username": None}, r"kafka\.sasl_port needs kafka\.sasl_username"),
    ]
    for kafka, message in refused:
        with pytest.raises(ConfigError, match=message):
            load_settings(env={}, overrides={"kafka": kafka})


def test_spark_remote_must_be_a_spark_connect_url() -> None:
    base = load_settings()
    assert base.spark.remote == ""  # classic Spark unless configured
    assert dataclasses.replace(base.spark, remote="sc://127.0.0.1:15002").remote == "sc://127.0.0.1:15002"
    with pytest.raises(ConfigError, match=r"spark\.remote must be a Spark Connect URL"):
        dataclasses.replace(base.spark, remote="http://localhost:15002")


@pytest.mark.parametrize("router", [{"snapshot_transport": "broadcast"}])
def test_spark_connect_needs_the_snapshot_files_as_the_transport(router: dict[str, object]) -> None:
    with pytest.raises(ConfigError, match="Spark Connect has no broadcasts"):
        load_settings(overrides={"spark": {"remote": "sc://127.0.0.1:15002"}, "router": router})
    load_settings(overrides={"router": router})  # classic: either is fine


def test_the_snapshot_transport_is_file_or_broadcast() -> None:
    assert load_settings().router.snapshot_transport == "file"
    with pytest.raises(ConfigError, match="snapshot_transport must be one of broadcast, file"):
        load_settings(overrides={"router": {"snapshot_transport": "carrier-pigeon"}})


@pytest.mark.parametrize(("trigger", "background"), [("available_now", True), ("processing_time", False)])
def test_the_append_state_warm_runs_in_the_background_only_for_a_drain(trigger: str, background: bool) -> None:
    from routing.router.pipeline import warm_in_background

    assert warm_in_background(load_settings(overrides={"router": {"trigger": trigger}}).router) is background


def field_docstrings(cls: type) -> dict[str, str | None]:
    """Each dataclass field of ``cls`` and the attribute docstring after it in the source (None: none)."""
    import ast
    import inspect
    import textwrap

    tree = ast.parse(textwrap.dedent(inspect.getsource(cls)))
    body = tree.body[0]
    assert isinstance(body, ast.ClassDef)
    found: dict[str, str | None] = {}
    for statement, following in zip(body.body, [*body.body[1:], None], strict=True):
        if isinstance(statement, ast.AnnAssign) and isinstance(statement.target, ast.Name):
            docstring = None
            if isinstance(following, ast.Expr) and isinstance(following.value, ast.Constant):
                docstring = following.value.value if isinstance(following.value.value, str) else None
            found[statement.target.id] = docstring
    return {field.name: found.get(field.name) for field in dataclasses.fields(cls)}


@pytest.mark.parametrize("section", sorted(SECTIONS))
def test_every_setting_says_what_it_is_for_in_its_docstring(section: str) -> None:
    """The settings reference is generated from these attribute docstrings: no setting goes without one."""
    docstrings = field_docstrings(SECTIONS[section])
    assert docstrings, section
    missing = sorted(name for name, text in docstrings.items() if not text or len(text.split()) < 3)
    assert missing == [], f"[{section}] settings without an attribute docstring: {missing}"


@pytest.mark.parametrize(
    ("source", "kind", "name"),
    [("key", "key", ""), ("header:routing_key", "header", "routing_key"), ("json:meta.key", "json", "meta.key")],
)
def test_the_key_source_names_where_the_routing_key_is(source: str, kind: str, name: str) -> None:
    router = load_settings(env={}, overrides={"router": {"key_source": source}}).router
    assert (router.key_kind, router.key_name) == (kind, name)


@pytest.mark.parametrize("source", ["header", "json:", "key:x", "value", "Header:x", ""])
def test_a_key_source_without_its_name_or_of_another_kind_is_refused(source: str) -> None:
    with pytest.raises(ConfigError, match=r"router\.key_source must be key, header:NAME or json:FIELD"):
        load_settings(env={}, overrides={"router": {"key_source": source}})


def test_kafka_spark_options_reach_sparks_source_and_cannot_replace_the_connection_or_carry_a_secret() -> None:
    settings = load_settings(env={}, overrides={"kafka": {"spark_options": {"kafka.request.timeout.ms": 3000}}})
    assert settings.kafka.spark_options == {"request.timeout.ms": "3000"}  # Spark's prefix is the loader's
    options = settings.spark_kafka_options()
    assert options["kafka.request.timeout.ms"] == "3000"
    assert options["kafka.bootstrap.servers"] == settings.kafka.bootstrap_servers
    for name in ("bootstrap.servers", "kafka.security.protocol", "sasl.jaas.config"):
        with pytest.raises(ConfigError, match=r"is set by the \[kafka\] settings themselves"):
            load_settings(env={}, overrides={"kafka": {"spark_options": {name: "elsewhere:9092"}}})
    with pytest.raises(ConfigError, match="looks like a secret") as raised:
        load_settings(env={}, overrides={"kafka": {"spark_options": {"ssl.key.password": "hunter2"}}})
    assert "hunter2" not in str(raised.value)

"""Settings: one loader, defaults in the code restated by ``conf/router.toml``, paths relative to their file.

No JVM, no broker: these only load settings.
"""

from __future__ import annotations

import dataclasses
import tomllib
from pathlib import Path

import pytest

from routing import config, settings
from routing.config import DEFAULT_CONF
from routing.settings import SECTIONS, Settings, load_settings


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
    loaded = load_settings(conf, env={"ROUTER__ROUTER__DELIVERIES_PATH": "out/deliveries"},
                           overrides={"router": {"dead_letters_path": "out/dead"}})
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

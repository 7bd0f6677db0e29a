"""The ``[acl]`` settings section: rules from the file (inline or ``[[acl.rules]]``), JSON from the
environment or ``--set``, the defaults (no rules: everything allowed), and one-line errors naming the key."""

from __future__ import annotations

import json
import textwrap
from pathlib import Path

import pytest

from routing.acl import AclRule, AclSettings
from routing.config import DEFAULT_CONF, ConfigError
from routing.settings import load_settings, parse_overrides

RULES_JSON = json.dumps(
    [{"subscribers": "tenant-42-*", "patterns": ["tenant.42.#"]}, {"subscribers": "audit", "patterns": ["#"]}]
)
EXPECTED = (AclRule("tenant-42-*", ("tenant.42.#",)), AclRule("audit", ("#",)))


def write_conf(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "router.toml"
    path.write_text(textwrap.dedent(text), encoding="utf-8")
    return path


def test_default_is_no_rules_and_everything_allowed() -> None:
    acl = load_settings(DEFAULT_CONF, env={}).acl
    assert acl == AclSettings()
    assert acl.rules == () and not acl.policy.enabled
    assert acl.policy.is_allowed("anyone", "#")


def test_inline_rules_from_the_file(tmp_path: Path) -> None:
    conf = write_conf(
        tmp_path,
        """
        [acl]
        default_allow = true
        rules = [
          { subscribers = "tenant-42-*", patterns = ["tenant.42.#"] },
          { subscribers = "audit", patterns = ["#"] },
        ]
        """,
    )
    acl = load_settings(conf, env={}).acl
    assert acl.rules == EXPECTED and acl.default_allow is True
    assert acl.policy.is_allowed("tenant-42-a", "tenant.42.x.*")
    assert not acl.policy.is_allowed("tenant-42-a", "#")
    assert acl.policy.is_allowed("nobody-named", "#")  # default_allow


def test_array_of_tables_from_the_file(tmp_path: Path) -> None:
    conf = write_conf(
        tmp_path,
        """
        [[acl.rules]]
        subscribers = "tenant-42-*"
        patterns = ["tenant.42.#"]

        [[acl.rules]]
        subscribers = "audit"
        patterns = ["#"]
        """,
    )
    acl = load_settings(conf, env={}).acl
    assert acl.rules == EXPECTED and acl.default_allow is False
    assert not acl.policy.is_allowed("nobody-named", "a")


def test_rules_as_json_from_the_environment_and_flags() -> None:
    from_env = load_settings(DEFAULT_CONF, env={"ROUTER__ACL__RULES": RULES_JSON, "ROUTER__ACL__DEFAULT_ALLOW": "yes"})
    assert from_env.acl.rules == EXPECTED and from_env.acl.default_allow is True
    flags = load_settings(DEFAULT_CONF, env={}, overrides=parse_overrides([f"acl.rules={RULES_JSON}"]))
    assert flags.acl.rules == EXPECTED
    cleared = load_settings(DEFAULT_CONF, env={"ROUTER__ACL__RULES": ""})
    assert cleared.acl.rules == ()


@pytest.mark.parametrize(
    ("toml", "message"),
    [
        ('[acl]\nrules = "not json"\n', r"acl\.rules must be JSON text"),
        ("[acl]\nrules = 3\n", r"acl\.rules must be a list of rules"),
        ('[acl]\nrules = ["tenant-*"]\n', r"acl\.rules\[0\] must be a table"),
        ('[acl]\nrules = [{subscribers = "a"}]\n', r"acl\.rules\[0\] must name both"),
        ('[acl]\nrules = [{subscribers = "a", patterns = "x.#"}]\n', r"acl\.rules\[0\]\.patterns must be a list"),
        ('[acl]\nrules = [{subscribers = "a", patterns = [1]}]\n', r"acl\.rules\[0\]\.patterns must be a list"),
        ('[acl]\nrules = [{subscribers = "", patterns = []}]\n', r"acl\.rules\[0\]\.subscribers must be a non-empty"),
        ('[acl]\nrules = [{subscribers = "a", patterns = [], subscriber = "b"}]\n', r"unknown key 'subscriber'"),
        ('[acl]\ndefault_allow = "no"\n', r"acl\.default_allow must be a boolean"),
        ("[acl]\nrule = []\n", r"unknown setting acl\.rule"),
        ("[acls]\n", r"did you mean \[acl\]"),
    ],
)
def test_bad_rules_are_refused_naming_the_key(tmp_path: Path, toml: str, message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        load_settings(write_conf(tmp_path, toml), env={})


def test_an_empty_pattern_list_allows_nothing() -> None:
    policy = AclSettings(rules=(AclRule("blocked-*", ()),), default_allow=True).policy
    assert not policy.is_allowed("blocked-1", "a")
    assert policy.is_allowed("other", "a")

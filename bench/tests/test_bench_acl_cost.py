"""``bench/acl_cost.py`` at a tiny size: every rule set gets its row, and the figures it prints hold together."""

from __future__ import annotations

from pathlib import Path

import acl_cost

from routing.acl import automaton_of, search
from routing.validation import Validator


def test_attack_patterns_are_distinct_valid_and_within_their_bound() -> None:
    for case in acl_cost.cases():
        validator = Validator(acl=case.rules)
        patterns = acl_cost.attack_patterns(case, 50, 3, validator)
        assert len(set(patterns)) == 50
        allowed = case.rules.allowed_patterns(case.subscriber)
        assert allowed is not None
        own = automaton_of(tuple(sorted(set(allowed))), case.rules.max_rule_states)
        for pattern in patterns:
            validator.validate_pattern(pattern)
            assert search(own, pattern)[1] <= 3 * (len(pattern.split(".")) + 1) * own.states


def test_a_tiny_run_reports_every_rule_set(tmp_path: Path) -> None:
    assert acl_cost.main(["--patterns", "20", "--events", "300", "--results-dir", str(tmp_path)]) == 0
    report = (tmp_path / "acl_cost.md").read_text(encoding="utf-8")
    assert (tmp_path / "acl_cost.png").stat().st_size > 0
    assert "load average (1/5/15 min)" in report
    rows = [line.strip("|").split(" | ") for line in report.splitlines() if line.startswith("| ") and "---" not in line]
    names = [row[0].strip() for row in rows[1:]]
    assert names == [case.name for case in acl_cost.cases()]
    for row in rows[1:]:
        subscribed, forbidden, other = (int(cell.replace(",", "")) for cell in row[7].split(" / "))
        assert subscribed + forbidden + other == 300, row  # every event has one outcome

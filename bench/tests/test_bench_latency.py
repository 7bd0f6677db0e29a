"""``bench/latency.py``: its accounting and verdicts on synthetic steps, and a run end to end at tiny rates.

The end-to-end run uses the broker of ``bench/tests/conftest.py`` (the benchmark reuses a broker that answers at its
configured ports, leaves it running, and deletes only its own topics), runs both
variants (passthrough and router) with a warm-up and two small rates, and checks the structure of
its report and JSON and that every message sent is accounted for in a histogram: sent = rows =
distinct messages = histogram count, every row found in a Delta commit. No timing is asserted (the
machine is shared; the figures belong to the benchmark's own output); the generous drain bound only
keeps a loaded machine from turning a tiny step into a "saturated" one.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from harness import section_rows as section

from routing.settings import Settings

BENCH = Path(__file__).resolve().parents[1] / "latency.py"
RATES = (20, 40)
STEP_SECONDS = 3
WARMUP_SECONDS = 2
VARIANTS = ("(a) passthrough", "(b) native router")


#: (file names in ``_delta_log``, the versions with a checkpoint).
CHECKPOINT_TABLE = [
    (["00000000000000000009.json", "00000000000000000010.json"], set()),
    (["00000000000000000010.checkpoint.parquet", "_last_checkpoint"], {10}),
    (["00000000000000000020.checkpoint.0000000001.0000000002.parquet"], {20}),  # multi-part
    (["00000000000000000030.checkpoint.80a083e8-7026-4e79-81be-64bd76c43a11.json"], {30}),  # V2, top-level
    ([".00000000000000000010.checkpoint.parquet.crc", "00000000000000000040.crc"], set()),  # checksums
    (["00000000000000000050.checkpoint.parquet", "00000000000000000060.checkpoint.parquet"], {50, 60}),
]


@pytest.mark.parametrize(("names", "expected"), CHECKPOINT_TABLE)
def test_checkpoint_versions_come_from_the_log_file_names(
    names: list[str], expected: set[int], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.syspath_prepend(str(BENCH.parent))
    import latency

    log = tmp_path / "_delta_log"
    log.mkdir()
    for name in names:
        (log / name).write_text("")
    assert latency.checkpoint_versions(tmp_path) == expected


def test_batches_whose_commit_was_checkpointed_are_counted_apart(monkeypatch: pytest.MonkeyPatch) -> None:
    """The phases table splits off the batches whose commit carried a Delta checkpoint (their whole batch p50)."""
    from types import SimpleNamespace

    monkeypatch.syspath_prepend(str(BENCH.parent))
    import latency

    def event(batch_id: int, whole_ms: int) -> SimpleNamespace:
        return SimpleNamespace(
            numInputRows=100,
            timestamp=f"2026-11-27T10:00:{batch_id:02d}.000Z",
            durationMs={"triggerExecution": whole_ms, "addBatch": whole_ms - 100},
        )

    wholes = {0: 500, 1: 2400, 2: 600, 3: 700, 4: 2600, 5: 0}
    progress = {batch_id: event(batch_id, whole) for batch_id, whole in wholes.items()}
    progress[5].numInputRows = 0  # read nothing: left out
    commits = {batch_id: 1_795_000_000_000 + batch_id for batch_id in range(5)}
    phases = latency.batch_phases(progress, range(6), {}, commits, checkpointed={1, 4, 5})
    assert [(phase.batch_id, phase.checkpointed) for phase in phases] == [
        (0, False),
        (1, True),
        (2, False),
        (3, False),
        (4, True),
    ]
    step = latency.Step(variant="(a) passthrough", index=1, rate=10, seconds=1.0)
    step.batches = phases
    run = latency.VariantRun(variant="(a) passthrough")
    run.steps.append(step)
    plan = latency.Plan(
        rates=(10,),
        step_seconds=1.0,
        warmup_seconds=0.0,
        trigger_seconds=1.0,
        drain_seconds=1.0,
        subscriptions=1,
        max_offsets=1,
        variants=("a",),
        seed=1,
        vocabulary=1,
        payload_bytes=1,
    )
    lines = "\n".join(latency.phase_lines(plan, [run])).splitlines()
    header = next(line for line in lines if line.startswith("| variant"))
    row = next(line for line in lines if line.startswith("| (a) passthrough"))
    cells = dict(zip(header.strip("|").split(" | "), row.strip("|").split(" | "), strict=True))
    assert cells["of them with a Delta checkpoint: batches, whole batch p50"].strip() == "2, 2,600"
    assert cells["whole batch, p50 / max"].strip() == "700 / 2,600"


def run_bench(settings: Settings, tmp_path: Path, *options: str) -> tuple[Path, Path, str]:
    """Run the benchmark at tiny rates against the tests' broker: (results dir, JSON file, stdout)."""
    from jobs.local_kafka import answers

    results, figures = tmp_path / "results", tmp_path / "latency.json"
    kafka = settings.kafka
    overrides = {
        "kafka.client_port": kafka.client_port,
        "kafka.controller_port": kafka.controller_port,
        "kafka.bootstrap_servers": kafka.bootstrap_servers,
        "kafka.data_dir": kafka.data_dir,
        "spark.conf.spark.local.dir": tmp_path / "spark-local",
        "spark.conf.spark.sql.warehouse.dir": tmp_path / "spark-warehouse",
    }
    command = [sys.executable, str(BENCH), "--step-seconds", str(STEP_SECONDS), "--warmup-seconds", str(WARMUP_SECONDS)]
    command += ["--trigger-seconds", "1", "--drain-seconds", "300", *options]
    command += ["--work-dir", str(tmp_path / "work"), "--results-dir", str(results), "--json", str(figures)]
    for name, value in overrides.items():
        command += ["--set", f"{name}={value}"]
    done = subprocess.run(command, capture_output=True, text=True, check=False, timeout=880)
    assert done.returncode == 0, done.stderr[-4000:]
    assert answers(settings), "the benchmark reused the tests' broker and must leave it running"
    return results, figures, done.stdout


@pytest.mark.integration
@pytest.mark.slow
@pytest.mark.timeout(900)
def test_tiny_run_accounts_for_every_message(settings: Settings, kafka_broker: object, tmp_path: Path) -> None:
    rates = ",".join(map(str, RATES))
    results, figures, stdout = run_bench(settings, tmp_path, "--rates", rates, "--subscriptions", "50")

    report = (results / "latency.md").read_text()
    assert stdout.strip() == report.strip()  # the same markdown on stdout
    assert (results / "latency.png").stat().st_size > 0
    assert "load average (1/5/15 min)" in report

    by_rate = section(report, "Latency by rate (ms)")
    assert [(row[0], row[1]) for row in by_rate] == [(v, f"{rate:,}") for v in VARIANTS for rate in RATES]
    for row in by_rate:
        assert row[2] == f"{int(row[1].replace(',', '')) * STEP_SECONDS:,}", row  # sent
        assert all(cell.replace(",", "").isdigit() for cell in row[3:7]), row  # p50, p99, p99.9, max
    sustained = section(report, "Highest sustained rate")
    assert [row[0] for row in sustained] == list(VARIANTS)
    assert "Router / passthrough:" in report

    phases = section(report, "Where a batch's time goes")
    assert [(row[0], row[1]) for row in phases] == [
        (v, rate) for v in VARIANTS for rate in ["warm-up", *(f"{rate:,}" for rate in RATES)]
    ]
    accounting = section(report, "Accounting")
    assert len(accounting) == len(VARIANTS) * (1 + len(RATES))
    assert all(row[-1] == "yes" for row in accounting), accounting

    data = json.loads(figures.read_text())
    assert set(data["variants"]) == set(VARIANTS)
    for variant, run in data["variants"].items():
        steps = run["steps"]
        assert [(step["step"], step["rate"]) for step in steps] == [(0, RATES[0]), *enumerate(RATES, start=1)]
        assert run["skipped_rates"] == {}
        for step in steps:
            seconds = WARMUP_SECONDS if step["warmup"] else STEP_SECONDS
            expected = step["rate"] * seconds
            where = f"{variant}, step {step['step']}"
            assert step["caught_up"], where
            # Every sent message is in the histogram, exactly once, and every row's commit was found.
            assert step["sent"] == step["rows"] == step["distinct"] == step["recorded"] == expected, where
            assert step["not_visible"] == step["without_commit"] == step["nonpositive"] == 0, where
            assert step["commits"] >= 1, where
            values = [step["percentiles_ms"][f"p{p}"] for p in ("50", "99", "99.9")] + [step["max_ms"]]
            assert values == sorted(values) and values[0] >= 1, where
            assert step["histogram"], where
            # The step's batches read exactly its messages, each committed (after its trigger) with its stages.
            batches = step["batches"]
            assert sum(batch["input_rows"] for batch in batches) == expected, where
            assert all(batch["commit_ms"] is not None and batch["commit_ms"] > batch["trigger_ms"] for batch in batches)
            # Both append with one Spark job and nothing to warm: the passthrough plainly, the router's first
            # attempts directly (routing.appends.first_append).
            stages = {"write_deliveries"} if "router" in variant else {"write"}
            assert all(stages <= set(batch["stage_seconds"]) for batch in batches), where
            assert not any({"warm", "warm_wait"} & set(batch["stage_seconds"]) for batch in batches), where
            assert all("addBatch" in batch["duration_ms"] for batch in batches), where
        assert run["operations"] and set(run["operations"]) <= {"WRITE"}
        # Steps never share a commit (each step starts once the previous one is committed).
        assert run["history_is_mtime"][1] == sum(step["commits"] for step in steps)


#: (router's and passthrough's highest sustained rate, the grid) -> (verdict, the true ratio's bounds).
RATIO_TABLE = [
    ((40_000, 60_000), (10_000, 40_000, 50_000, 60_000), "not decided by this grid", "under 0.83x"),
    ((60_000, 80_000), (10_000, 60_000, 70_000, 80_000), "not decided by this grid", "under 0.88x"),
    ((50_000, 60_000), (10_000, 50_000, 60_000, 70_000), "met", "from 0.71x to under 1.00x"),
    ((30_000, 60_000), (10_000, 30_000, 40_000, 60_000, 70_000), "MISSED", "from 0.43x to under 0.67x"),
    ((70_000, 70_000), (10_000, 70_000), "not decided by this grid", "unknown"),
    ((80_000, 60_000), (10_000, 60_000, 70_000, 80_000), "met", "above 1.14x"),
]


@pytest.mark.parametrize(("sustained", "rates", "verdict", "bounds"), RATIO_TABLE)
def test_the_ratio_verdict_holds_only_what_the_grid_proves(
    sustained: tuple[int, int], rates: tuple[int, ...], verdict: str, bounds: str
) -> None:
    """A variant at the grid's top rate has a limit of that or more, so only bounds both ends agree on decide."""
    sys.path.insert(0, str(BENCH.parent))
    import latency

    line = latency.ratio_line(*sustained, rates)
    assert f"target >= 0.7x: {verdict})" in line
    assert line.endswith(f"the true ratio is {bounds}.")


def test_a_variant_that_missed_the_bound_below_its_highest_rate_decides_nothing() -> None:
    """Passes and misses that alternate with the rate are noise at the bound, not a limit the grid places."""
    sys.path.insert(0, str(BENCH.parent))
    import latency
    from hdrh.histogram import HdrHistogram

    grid = (40_000, 50_000, 60_000, 70_000, 80_000)
    assert "target >= 0.7x: met)" in latency.ratio_line(60_000, 70_000, grid)
    line = latency.ratio_line(60_000, 70_000, grid, not_monotone=("(a) passthrough",))
    assert "target >= 0.7x: not decided: (a) passthrough missed the bound at a lower rate)" in line

    def step(rate: int, p99_ms: int) -> latency.Step:
        """A caught-up step of one message, whose latency (so its p99) is ``p99_ms``."""
        histogram = HdrHistogram(1, 3_600_000, 3)
        histogram.record_value(p99_ms)
        return latency.Step("v", 1, rate, 1.0, sent=1, caught_up=True, rows=1, distinct=1, histogram=histogram)

    rates = grid[:4]
    alternating = (2_000, 3_500, 2_900, 4_000)
    run = latency.VariantRun("v", [step(rate, p99) for rate, p99 in zip(rates, alternating, strict=True)])
    assert run.sustained(3_000) == 60_000
    assert run.missed_below(3_000) == [50_000]
    rising = (2_000, 2_500, 2_900, 4_000)
    steady = latency.VariantRun("v", [step(rate, p99) for rate, p99 in zip(rates, rising, strict=True)])
    assert steady.sustained(3_000) == 60_000 and steady.missed_below(3_000) == []
    assert latency.VariantRun("v", [step(40_000, 3_500)]).missed_below(3_000) == []


#: Rates of the run without the catch-all: enough messages that some match and some do not.
MATCHED_RATES = (100, 200)


@pytest.mark.integration
@pytest.mark.slow
@pytest.mark.timeout(900)
def test_tiny_run_without_the_catch_all_times_each_matched_message_once(
    settings: Settings, kafka_broker: object, tmp_path: Path
) -> None:
    """Only matched messages have deliveries; each is timed once, and the table holds exactly what the Python
    trie expects from the step's seeded keys (every delivery row, every matched message)."""
    rates = ",".join(map(str, MATCHED_RATES))
    options = ("--rates", rates, "--subscriptions", "2000", "--variants", "b", "--no-catch-all")
    results, figures, stdout = run_bench(settings, tmp_path, *options)
    report = (results / "latency_matched.md").read_text()
    assert stdout.strip() == report.strip()
    assert not (results / "latency.md").exists(), "the catch-all workload's results are left alone"
    assert "no catch-all" in report
    accounting = section(report, "Accounting")
    assert len(accounting) == 1 + len(MATCHED_RATES)
    assert all(row[-1] == "yes" for row in accounting), accounting

    steps = json.loads(figures.read_text())["variants"]["(b) native router"]["steps"]
    assert [step["rate"] for step in steps] == [MATCHED_RATES[0], *MATCHED_RATES]
    for step in steps:
        where = f"step {step['step']}"
        assert step["caught_up"] and step["accounted"], where
        assert 0 < step["expected_messages"] < step["sent"], f"{where}: some messages match, not all"
        # Every expected delivery there once; a message with several deliveries is one histogram value.
        assert step["rows"] == step["expected_rows"] >= step["expected_messages"], where
        assert step["distinct"] == step["recorded"] == step["expected_messages"], where
        assert step["not_visible"] == step["without_commit"] == 0, where


#: (fan-outs of a step's key pool, messages sent, max fan-out).
POOL_TABLE = [
    ([0, 1, 3], 7, 10),  # two laps and one key more
    ([2, 0], 1, 10),  # fewer messages than keys
    ([5, 1, 12], 10, 10),  # a key over the limit is dead-lettered
    ([0, 0], 5, 10),  # nothing matches
    ([], 0, 10),
]


@pytest.mark.parametrize(("fanouts", "count", "max_fanout"), POOL_TABLE)
def test_expected_deliveries_follow_the_producers_key_cycle(
    fanouts: list[int], count: int, max_fanout: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Message ``j`` carries key ``j % len(pool)``: the expectation equals a message-by-message count."""
    monkeypatch.syspath_prepend(str(BENCH.parent))
    import latency

    rows = messages = 0
    for j in range(count if fanouts else 0):
        fanout = fanouts[j % len(fanouts)]
        if 0 < fanout <= max_fanout:
            rows, messages = rows + fanout, messages + 1
    assert latency.expected_from_pool(fanouts, count, max_fanout) == (rows, messages)

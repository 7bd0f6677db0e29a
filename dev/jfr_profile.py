"""Where a running Spark JVM spends its CPU: a JDK Flight Recorder profile, summed by thread and by frame.

    python -m dev.jfr_profile --seconds 40                 # the first local Spark driver JVM (SparkSubmit)
    python -m dev.jfr_profile --pid 1234 --keep /tmp/x.jfr # that JVM; keep the recording for JDK Mission Control

It starts a recording with ``jcmd <pid> JFR.start settings=profile`` (execution samples every 10 ms per
running Java thread, native-method samples every 20 ms), waits for it to end, reads it with ``jfr print --json``
and prints, per thread group (a thread's name without its numbers: Spark's task threads are one group):

* its share of the samples;
* the frames it spends its own time in (*self*: the top frame of a sample);
* the frames its time passes through (*total*: a frame counted once per sample it is on), which is how a cost
  spread over many leaf frames (an interpreted expression, a Kafka producer's send) shows as one line.

Samples are taken of Java threads only; time in native code through JNI shows as the native method's frame
(``--native`` adds the native-method samples, whose threads were not running Java). It is the method the
benchmarks' profiles in ``bench/results/`` were made with (``realtime.md``, ``stream.md``).
"""

from __future__ import annotations

import argparse
import collections
import json
import re
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

#: How a local Spark driver JVM (the demo's, a job's, a benchmark's) is started.
SPARK_SUBMIT = "org.apache.spark.deploy.SparkSubmit"
#: Frames whose samples are an idle wait, not work (``--all`` keeps them).
IDLE_FRAMES = (
    "jdk.internal.misc.Unsafe.park",
    "java.lang.Object.wait",
    "java.lang.Thread.sleep",
    "sun.nio.ch.EPoll.wait",
    "sun.nio.ch.Net.poll",
)


@dataclass
class Group:
    """One thread group's samples: counts of self frames and of frames on the stack."""

    samples: int = 0
    self_frames: collections.Counter[str] = field(default_factory=collections.Counter)
    total_frames: collections.Counter[str] = field(default_factory=collections.Counter)


#: Spark's task threads: renamed per task while running (``launch worker for task ...``) and when idle, and JFR
#: keeps the name a thread had when first recorded, so either name is the one group.
TASK_THREADS = "Executor task threads"


def thread_group(name: str) -> str:
    """A thread's name without its numbers and parenthesised details (``C2 CompilerThread0`` and its siblings are
    one group); every Spark task thread is :data:`TASK_THREADS`."""
    if name.startswith("Executor task "):
        return TASK_THREADS
    name = re.sub(r"\s*[(\[].*[)\]]$", "", name)
    return re.sub(r"\d+", "#", name).strip() or "?"


def frame_name(frame: dict[str, Any]) -> str:
    method = frame.get("method") or {}
    owner = str((method.get("type") or {}).get("name", "?")).replace("/", ".")  # JFR writes internal names
    return f"{owner}.{method.get('name', '?')}"


def events_of(recording: dict[str, Any]) -> Iterator[tuple[str, list[str]]]:
    """(thread name, frame names from the top of the stack) for each sample of ``jfr print --json``'s output."""
    for event in recording.get("recording", {}).get("events", []):
        values = event.get("values", {})
        thread = values.get("sampledThread") or {}
        name = thread.get("javaName") or thread.get("osName") or "?"
        frames = (values.get("stackTrace") or {}).get("frames") or []
        yield name, [frame_name(frame) for frame in frames]


def summarize(samples: Iterable[tuple[str, list[str]]], *, keep_idle: bool = False) -> dict[str, Group]:
    """Samples summed by thread group (:func:`thread_group`); idle waits (:data:`IDLE_FRAMES`) left out unless
    ``keep_idle``."""
    groups: dict[str, Group] = collections.defaultdict(Group)
    for thread, frames in samples:
        if not frames or (not keep_idle and frames[0] in IDLE_FRAMES):
            continue
        group = groups[thread_group(thread)]
        group.samples += 1
        group.self_frames[frames[0]] += 1
        group.total_frames.update(set(frames))
    return dict(groups)


def report(groups: dict[str, Group], *, top: int, groups_shown: int) -> str:
    """The summary as text: groups by samples, each with its top self and total frames (percent of the group)."""
    everything = sum(group.samples for group in groups.values())
    if not everything:
        return "no samples (was the JVM running Java code?)\n"
    lines = [f"{everything} samples\n"]
    ranked = sorted(groups.items(), key=lambda item: -item[1].samples)[:groups_shown]
    for name, group in ranked:
        lines.append(f"== {name}: {group.samples} samples, {100 * group.samples / everything:.1f}% of all")
        for title, counter in (("self", group.self_frames), ("total", group.total_frames)):
            lines.append(f"   {title}:")
            for frame, count in counter.most_common(top):
                lines.append(f"   {100 * count / group.samples:6.1f}%  {frame}")
        lines.append("")
    return "\n".join(lines) + "\n"


def spark_pid() -> int | None:
    """The first local Spark driver JVM's pid (by its command line), or None."""
    for proc in sorted(Path("/proc").iterdir(), key=lambda path: path.name):
        if not proc.name.isdigit():
            continue
        try:
            argv = (proc / "cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        if SPARK_SUBMIT.encode() in argv:
            return int(proc.name)
    return None


def record(pid: int, seconds: int, path: Path) -> None:
    """A ``settings=profile`` recording of ``pid`` for ``seconds`` into ``path``; returns once it is written."""
    subprocess.run(
        ["jcmd", str(pid), "JFR.start", f"duration={seconds}s", f"filename={path}", "settings=profile"],
        check=True,
        capture_output=True,
    )
    deadline = time.monotonic() + seconds + 60
    while not (path.exists() and path.stat().st_size > 0):
        if time.monotonic() > deadline:
            raise TimeoutError(f"no recording at {path} {seconds + 60} s after it started")
        time.sleep(1)
    time.sleep(2)  # written at the end of the recording: let the JVM finish the file


def read_samples(path: Path, *, native: bool) -> list[tuple[str, list[str]]]:
    events = "jdk.ExecutionSample,jdk.NativeMethodSample" if native else "jdk.ExecutionSample"
    printed = subprocess.run(
        ["jfr", "print", "--json", "--stack-depth", "96", "--events", events, str(path)],
        check=True,
        capture_output=True,
        text=True,
    )
    return list(events_of(json.loads(printed.stdout)))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m dev.jfr_profile", description=__doc__.split("\n\n")[0] if __doc__ else None
    )
    parser.add_argument("--pid", type=int, help=f"the JVM (default: the first {SPARK_SUBMIT} process)")
    parser.add_argument("--seconds", type=int, default=40, help="how long to record (default 40)")
    parser.add_argument("--top", type=int, default=15, help="frames shown per group and kind (default 15)")
    parser.add_argument("--groups", type=int, default=6, help="thread groups shown (default 6)")
    parser.add_argument("--native", action="store_true", help="add the native-method samples")
    parser.add_argument("--all", action="store_true", help="keep idle waits (park, wait, sleep, poll)")
    parser.add_argument("--keep", type=Path, help="keep the recording here (default: a temporary file)")
    parser.add_argument("--read", type=Path, help="summarize this recording instead of making one")
    args = parser.parse_args(argv)
    if args.seconds < 1 or args.top < 1 or args.groups < 1:
        parser.error("--seconds, --top and --groups must be at least 1")
    with tempfile.TemporaryDirectory(prefix="jfr-") as scratch:
        path = args.read
        if path is None:
            pid = args.pid or spark_pid()
            if pid is None:
                print(f"jfr_profile: no {SPARK_SUBMIT} JVM is running; give --pid", file=sys.stderr)
                return 2
            path = args.keep or Path(scratch) / "profile.jfr"
            print(f"recording JVM {pid} for {args.seconds} s into {path} ...", file=sys.stderr, flush=True)
            try:
                record(pid, args.seconds, path)
            except (subprocess.CalledProcessError, TimeoutError) as error:
                detail = getattr(error, "stderr", b"") or b""
                print(f"jfr_profile: recording failed: {error} {detail.decode(errors='replace')}", file=sys.stderr)
                return 1
        elif not path.is_file():
            print(f"jfr_profile: no recording at {path}", file=sys.stderr)
            return 2
        groups = summarize(read_samples(path, native=args.native), keep_idle=args.all)
    sys.stdout.write(report(groups, top=args.top, groups_shown=args.groups))
    return 0


if __name__ == "__main__":
    sys.exit(main())

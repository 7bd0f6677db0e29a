"""The generated reference pages are committed fresh: settings (docs/reference/settings.md) and commands
(docs/reference/cli.md), each naming everything it documents."""

from __future__ import annotations

import dataclasses
import importlib.util
import os
import re
import subprocess
import sys
import tomllib
from pathlib import Path
from types import ModuleType

import pytest

from routing.settings import SECTIONS

ROOT = Path(__file__).resolve().parent.parent
GENERATOR = ROOT / "docs" / "gen_settings.py"
CLI_GENERATOR = ROOT / "docs" / "gen_cli.py"
PAGE = ROOT / "docs" / "reference" / "settings.md"
CLI_PAGE = ROOT / "docs" / "reference" / "cli.md"
CONF = ROOT / "conf" / "router.toml"
HINT = "docs/reference/settings.md is stale: run `make docs`"  # the one-line fix a failure names


def load_generator() -> ModuleType:
    # docs/ is tooling, not a package: load the script by path.
    spec = importlib.util.spec_from_file_location("gen_settings", GENERATOR)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # a dataclass's module must be importable while it is defined
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="module")
def generator() -> ModuleType:
    return load_generator()


def page_keys(text: str) -> set[str]:
    """The settings the page documents: one ``### `section.key` `` heading each."""
    return set(re.findall(r"^### `([a-z_]+\.[a-z_0-9]+)`", text, flags=re.MULTILINE))


def file_keys(path: Path) -> set[str]:
    """Every key of a settings file, with the optional keys it shows commented out (``# sasl_port = 19094``)."""
    with path.open("rb") as handle:
        conf = tomllib.load(handle)
    keys = {f"{section}.{key}" for section, table in conf.items() for key in table}
    for line_section, key in commented_keys(path.read_text(encoding="utf-8")):
        keys.add(f"{line_section}.{key}")
    return keys


def commented_keys(text: str) -> list[tuple[str, str]]:
    found = []
    section = ""
    for line in text.splitlines():
        header = re.match(r"^\[([a-z_.]+)\]", line)
        if header:
            section = header.group(1)
        elif "." not in section and (match := re.match(r"^#\s*([a-z_][a-z0-9_]*)\s*=", line)):
            found.append((section, match.group(1)))
    return found


def test_the_committed_settings_page_is_the_generators_output(generator: ModuleType) -> None:
    assert PAGE.read_text(encoding="utf-8") == generator.render(), HINT


def test_every_setting_of_the_file_is_on_the_page_and_every_one_on_the_page_in_the_file(
    generator: ModuleType,
) -> None:
    documented = page_keys(PAGE.read_text(encoding="utf-8"))
    in_file = file_keys(CONF)
    # The SASL password has no place in the file: the loader refuses it there (routing.settings).
    secrets = {field.key for _, _, fields in generator.collect() for field in fields if field.kind == "secret"}
    assert secrets == {"kafka.sasl_password"}
    assert sorted(in_file - documented) == [], f"keys of conf/router.toml the page lacks (a stale page: {HINT})"
    assert sorted(documented - in_file - secrets) == [], "settings on the page that conf/router.toml does not show"


def test_the_page_documents_every_field_of_every_settings_dataclass(generator: ModuleType) -> None:
    # An oracle independent of the generator's walk: the dataclasses themselves.
    fields = {f"{section}.{field.name}" for section, cls in SECTIONS.items() for field in dataclasses.fields(cls)}
    assert page_keys(generator.render()) == fields


def test_a_field_is_described_by_its_attribute_docstring_else_its_comment(
    generator: ModuleType, tmp_path: Path
) -> None:
    source = tmp_path / "sample_settings.py"
    source.write_text(
        "import dataclasses\n\n\n"
        "@dataclasses.dataclass(frozen=True)\n"
        "class Sample:\n"
        '    """A sample section."""\n\n'
        "    #: The comment block, unused: the docstring wins.\n"
        "    documented: int = 1\n"
        '    """The docstring, with a :func:`~routing.topic.match_cost` role."""\n'
        "    #: Only a comment.\n"
        "    #: On two lines.\n"
        "    commented: str = 'x'\n"
        "    bare: bool = False\n",
        encoding="utf-8",
    )
    spec = importlib.util.spec_from_file_location("sample_settings", source)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules["sample_settings"] = module
    try:
        spec.loader.exec_module(module)
        docs, annotations = generator.code_docs(module.Sample)
    finally:
        del sys.modules["sample_settings"]
    assert docs == {
        "documented": "The docstring, with a :func:`~routing.topic.match_cost` role.",
        "commented": "Only a comment.\nOn two lines.",
    }
    assert annotations == {"documented": "int", "commented": "str", "bare": "bool"}
    assert generator.markdown(docs["documented"]) == "The docstring, with a `routing.topic.match_cost` role."


def test_a_stale_page_is_caught_with_the_fix_named(generator: ModuleType, tmp_path: Path) -> None:
    page = tmp_path / "settings.md"
    fresh = generator.render()
    page.write_text(fresh, encoding="utf-8")
    assert generator.stale(page) is None
    page.write_text(fresh.replace("Words in a routing key.", "Words in a key.", 1), encoding="utf-8")
    assert generator.stale(page) == f"{page} is stale: run `make docs`"
    page.unlink()
    assert generator.stale(page) == f"{page} is stale: run `make docs`"


# -- the command-line reference ----------------------------------------------------------------------
# The generator runs every command's main() to capture its help: in a process of its own, not in pytest's.


def test_the_committed_command_page_is_the_generators_output() -> None:
    result = subprocess.run(
        [sys.executable, str(CLI_GENERATOR), "--check"], capture_output=True, text=True, cwd=ROOT, check=False
    )
    assert result.returncode == 0, result.stderr.strip()


def test_the_command_page_names_every_job_and_every_routing_subcommand() -> None:
    # Oracles apart from the generator: the files of jobs/ that run as scripts, and the subcommands
    # `python -m routing --help` lists.
    jobs = {
        f"python -m jobs.{path.stem}"
        for path in (ROOT / "jobs").glob("*.py")
        if 'if __name__ == "__main__":' in path.read_text(encoding="utf-8")
    }
    assert {"python -m jobs.route", "python -m jobs.refresh_subscriptions"} <= jobs
    usage = run_help("routing").splitlines()[0]
    subcommands = re.search(r"\{([a-z_,]+)\}", usage)
    assert subcommands is not None, usage
    routing = {f"python -m routing {name}" for name in subcommands.group(1).split(",")}
    assert set(cli_sections()) == {"python -m routing"} | routing | jobs


def cli_sections() -> dict[str, str]:
    """{command: the help text the page shows for it}."""
    text = CLI_PAGE.read_text(encoding="utf-8")
    return dict(re.findall(r"^## `(python -m [a-z_. ]+)`\n\n```text\n(.*?)```$", text, re.MULTILINE | re.DOTALL))


def run_help(*command: str) -> str:
    environment = {**os.environ, "COLUMNS": "100", "PYTHONPATH": str(ROOT)}
    result = subprocess.run(
        [sys.executable, "-m", *command, "--help"],
        capture_output=True,
        text=True,
        env=environment,
        cwd=ROOT,
        check=True,
    )
    return result.stdout


@pytest.mark.parametrize("command", [("jobs.route",), ("routing", "tail")])
def test_a_section_is_what_the_command_prints_when_a_user_runs_it(command: tuple[str, ...]) -> None:
    assert cli_sections()["python -m " + " ".join(command)] == run_help(*command).rstrip() + "\n"

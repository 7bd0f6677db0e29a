"""Loading typed, frozen settings sections from ``conf/router.toml``.

A section is described by a frozen dataclass, whose field defaults are the
defaults (``conf/router.toml`` restates every one of them, and a test keeps the
two equal); loading it:

1. starts from the dataclass defaults,
2. applies the section's table from the TOML file,
3. applies environment variables ``ROUTER__<SECTION>__<KEY>``,
4. applies explicit overrides (CLI flags),

and rejects unknown keys and badly typed values with an error naming the key.
"""

from __future__ import annotations

import dataclasses
import math
import os
import re
import tomllib
import types
import typing
from collections.abc import Mapping
from pathlib import Path
from typing import Any, TypeVar

ENV_PREFIX = "ROUTER__"
#: A key whose value an error must never echo (a password, token, JAAS line...), whatever its section.
SECRET_KEY = re.compile(r"password|passwd|secret|token|jaas|credential", re.IGNORECASE)
#: Numbers written as text (environment, flags): ASCII digits only (``int``/``float`` also take Arabic-Indic,
#: full-width and other Unicode digits, surrounding spaces, ``inf`` and ``nan``); ``_`` between digits as in TOML.
_DIGITS = r"[0-9]+(?:_[0-9]+)*"
INTEGER_TEXT = re.compile(rf"[+-]?{_DIGITS}")
NUMBER_TEXT = re.compile(rf"[+-]?(?:{_DIGITS}(?:\.(?:{_DIGITS})?)?|\.{_DIGITS})(?:[eE][+-]?{_DIGITS})?")
CONF_ENV = "ROUTER_CONF"
#: A settings file larger than this is no settings file (conf/router.toml is 6 KB).
MAX_CONF_BYTES = 1 << 20
#: The checkout this package runs from (the one place it is computed; installed, it is site-packages, which
#: holds no ``conf/``). Only repository tools use it (samples, templates, ``var/`` of the demo and benchmarks);
#: settings paths never resolve against it.
REPO_ROOT = Path(__file__).resolve().parent.parent
DEFAULT_CONF = REPO_ROOT / "conf" / "router.toml"

T = TypeVar("T")


class ConfigError(ValueError):
    """A settings file, variable or flag that cannot be used; names the key."""


#: The most characters of a value an error quotes (a 5,000-digit number is shown by its length).
MAX_SHOWN_CHARS = 80
#: The most digits an integer setting may be written with: far past any limit (2**31), short of Python's
#: 4,300-digit conversion guard, which raised a ValueError traceback.
MAX_INTEGER_DIGITS = 30


def shown(key: str, value: object) -> str:
    """``value`` quoted for an error about setting ``key`` (cut to :data:`MAX_SHOWN_CHARS`), or a mask when the key
    looks secret."""
    if SECRET_KEY.search(key):
        return "<hidden: the key looks secret>"
    text = repr(value) if not isinstance(value, int) or abs(value) < 10**MAX_INTEGER_DIGITS else "<a huge integer>"
    return text if len(text) <= MAX_SHOWN_CHARS else f"{text[:MAX_SHOWN_CHARS]}... ({len(text)} characters)"


def conf_path(path: str | os.PathLike[str] | None = None) -> Path:
    """The settings file in force: the argument, else $ROUTER_CONF, else conf/router.toml."""
    if path is not None:
        return Path(path)
    return Path(os.environ.get(CONF_ENV, DEFAULT_CONF))


def read_conf(path: str | os.PathLike[str] | None = None) -> dict[str, Any]:
    """Parse the whole settings file; a missing default file reads as empty."""
    chosen = conf_path(path)
    if not chosen.exists():
        if path is None and CONF_ENV not in os.environ:
            return {}
        raise ConfigError(f"settings file {chosen} does not exist")
    content = read_bounded(chosen, MAX_CONF_BYTES, what=f"settings file {chosen}", limit_text="1 MiB")
    try:
        text = content.decode("utf-8")
    except UnicodeDecodeError:
        raise ConfigError(f"settings file {chosen} is not UTF-8 text (is it a settings file?)") from None
    try:
        return tomllib.loads(text)
    except tomllib.TOMLDecodeError as error:
        raise ConfigError(f"settings file {chosen} is not valid TOML: {error}") from None
    except RecursionError:
        raise ConfigError(f"settings file {chosen} nests arrays or tables too deeply to read") from None
    except ValueError:  # tomllib converting an integer past Python's 4,300-digit guard
        raise ConfigError(f"settings file {chosen} holds an integer too long to read") from None


def read_bounded(path: Path, limit: int, *, what: str, limit_text: str) -> bytes:
    """At most ``limit`` bytes of ``path``, else a :class:`ConfigError` (``what`` names the file in it).

    Any kind of file (a pipe, ``/dev/zero``, a huge file named by mistake) is read at most ``limit`` + 1 bytes;
    one that cannot be read (missing, a directory, no permission) is an error naming the reason.
    """
    try:
        with path.open("rb") as handle:
            content = handle.read(limit + 1)
    except OSError as error:
        raise ConfigError(f"{what} cannot be read: {error.strerror or error}") from None
    if len(content) > limit:
        raise ConfigError(f"{what} is larger than {limit_text}")
    return content


def _coerce(section: str, key: str, raw: object, annotation: Any, from_text: bool) -> object:
    """Check (and, for environment text, convert) one value against its field type."""
    origin = typing.get_origin(annotation)
    if origin in (typing.Union, types.UnionType):
        options = [arg for arg in typing.get_args(annotation) if arg is not type(None)]
        if raw is None or (from_text and raw == ""):
            return None
        annotation = options[0]
        origin = typing.get_origin(annotation)
    where = f"{section}.{key}"
    got = shown(key, raw)
    if annotation is bool:
        if isinstance(raw, bool):
            return raw
        if from_text and isinstance(raw, str) and raw.lower() in {"1", "true", "yes", "on", "0", "false", "no", "off"}:
            return raw.lower() in {"1", "true", "yes", "on"}
        raise ConfigError(f"setting {where} must be a boolean, got {got}")
    if annotation is int:
        if isinstance(raw, bool):
            raise ConfigError(f"setting {where} must be an integer, got {got}")
        if isinstance(raw, int):
            return raw
        if from_text and isinstance(raw, str) and INTEGER_TEXT.fullmatch(raw):
            if len(raw.lstrip("+-")) > MAX_INTEGER_DIGITS:
                raise ConfigError(
                    f"setting {where} must be an integer of at most {MAX_INTEGER_DIGITS} digits, got {got}"
                )
            return int(raw)
        raise ConfigError(f"setting {where} must be an integer (ASCII digits), got {got}")
    if annotation is float:
        if from_text and isinstance(raw, str) and NUMBER_TEXT.fullmatch(raw):
            raw = float(raw)
        if isinstance(raw, bool) or not isinstance(raw, (int, float)):
            raise ConfigError(f"setting {where} must be a number (ASCII digits), got {got}")
        number = float(raw)
        if not math.isfinite(number):
            raise ConfigError(f"setting {where} must be a finite number, got {got}")
        return number
    if annotation is str:
        if isinstance(raw, str):
            return raw
        raise ConfigError(f"setting {where} must be a string, got {got}")
    if origin is tuple:
        if from_text and isinstance(raw, str):
            raw = [item.strip() for item in raw.split(",") if item.strip()]
        if isinstance(raw, (list, tuple)) and all(isinstance(item, str) for item in raw):
            return tuple(raw)
        raise ConfigError(f"setting {where} must be a list of strings, got {got}")
    if origin is dict or annotation is dict:
        if isinstance(raw, Mapping):
            return dict(raw)
        raise ConfigError(f"setting {where} must be a table, got {got}")
    return raw


def _unknown_setting(cls: type[Any], section: str, key: str, fields: set[str], source: str = "") -> str:
    """The complaint about ``section.key``: where it went if the section's ``MOVED`` names it, else the known keys."""
    moved: Mapping[str, str] = getattr(cls, "MOVED", {})
    if key in moved:
        return f"setting {section}.{key}{source} is gone: {moved[key]}"
    return f"unknown setting {section}.{key}{source} (known: {', '.join(sorted(fields))})"


def load_section(
    cls: type[T],
    section: str,
    *,
    conf: Mapping[str, Any],
    env: Mapping[str, str] | None = None,
    overrides: Mapping[str, object] | None = None,
) -> T:
    """Build the frozen dataclass ``cls`` from defaults, the parsed file ``conf``, environment and overrides.

    One section; :func:`routing.settings.load_settings` is the loader that calls it for every section.
    """
    if not dataclasses.is_dataclass(cls):
        raise TypeError(f"{cls!r} is not a dataclass")
    hints = typing.get_type_hints(cls)
    fields = {field.name for field in dataclasses.fields(cls)}
    values: dict[str, object] = {}

    table = conf.get(section, {})
    if not isinstance(table, Mapping):
        raise ConfigError(f"settings section [{section}] must be a table")
    for key, raw in table.items():
        if key not in fields:
            raise ConfigError(_unknown_setting(cls, section, key, fields))
        values[key] = _coerce(section, key, raw, hints[key], from_text=False)

    prefix = f"{ENV_PREFIX}{section.upper()}__"
    for name, raw in (os.environ if env is None else env).items():
        if not name.startswith(prefix):
            continue
        key = name[len(prefix) :].lower()
        if key not in fields:
            raise ConfigError(_unknown_setting(cls, section, key, fields, f" from environment variable {name}"))
        values[key] = _coerce(section, key, raw, hints[key], from_text=True)

    for key, raw in (overrides or {}).items():
        if key not in fields:
            raise ConfigError(_unknown_setting(cls, section, key, fields))
        if raw is not None:
            values[key] = _coerce(section, key, raw, hints[key], from_text=isinstance(raw, str))
    try:
        return cls(**values)
    except ConfigError:
        raise
    except (TypeError, ValueError) as error:
        raise ConfigError(f"settings section [{section}]: {error}") from None

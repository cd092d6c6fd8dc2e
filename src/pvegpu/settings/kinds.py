"""How one setting is read: its data key, its kind (which coerces a raw value) and the checks
every setting of a kind gets (paths well-formed, no control character in free text).

A part of the settings is a frozen dataclass whose fields are declared with ``setting()``:

>>> from dataclasses import dataclass
>>> @dataclass(frozen=True)
... class Demo(Part):
...     cores: int = setting("ct_cores", integer)
...     name: str | None = setting("ct_template", optional_text)
>>> values, errors = read_part(Demo, {"ct_cores": "8"}.get)
>>> values, errors
({'name': None}, ["ct_cores='8' must be an integer: write a whole number"])
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator, Mapping
from dataclasses import MISSING, Field, field, fields
from typing import Any

from ..guard import path_problem

# Paths end up in shell commands, Proxmox property strings and the systemd unit: only characters
# none of them treats specially (no space, quote, $, %, \\, ',', '=', ';'), so no escaping can fail.
SAFE_PATH_RE = re.compile(r"^/[A-Za-z0-9._+@/-]*$")
CONTROL_RE = re.compile(r"[\x00-\x1f\x7f]")

#: A kind: turns a raw data value (possibly a --data string) into the field's type, or raises
#: ValueError with one line naming the key, the value and the fix.
Kind = Callable[[str, Any], Any]


def gpu_list(key: str, raw: Any) -> tuple[int, ...]:
    if not isinstance(raw, (list, tuple)) or not all(
        isinstance(i, int) and not isinstance(i, bool) for i in raw
    ):
        raise ValueError(f"{key}={raw!r} must be a list of GPU indices: write it like [0, 1, 2]")
    return tuple(raw)


def text_list(key: str, raw: Any) -> tuple[str, ...]:
    if isinstance(raw, str):
        raw = [raw]
    if not isinstance(raw, (list, tuple)) or not all(isinstance(i, str) for i in raw):
        raise ValueError(
            f'{key}={raw!r} must be a list of strings: write it like ["transformers==5.6.0"]'
        )
    return tuple(raw)


def flag(key: str, raw: Any) -> bool:
    if isinstance(raw, bool):
        return raw
    if isinstance(raw, int) and raw in (0, 1):
        return bool(raw)
    raise ValueError(f"{key}={raw!r} must be a boolean: use true or false")


def integer(key: str, raw: Any) -> int:
    if isinstance(raw, bool) or not isinstance(raw, int):
        raise ValueError(f"{key}={raw!r} must be an integer: write a whole number")
    return raw


def mapping(key: str, raw: Any) -> Mapping[str, Any]:
    if not isinstance(raw, Mapping):
        raise ValueError(
            f'{key}={raw!r} must be a mapping: write it like {{"cu130": {{"token_budget": 49152}}}}'
        )
    return raw


def optional_text(key: str, raw: Any) -> str | None:
    """A string, or None for ``--data key=none`` (and "", None, null)."""
    if raw in ("", "none", "None", "null"):
        return None
    return str(raw)


def text(key: str, raw: Any) -> str:
    if isinstance(raw, (dict, list)):
        raise ValueError(f"{key}={raw!r} must be a string: write a plain value")
    return str(raw)


def setting(
    key: str, kind: Kind, *, where: str | None = None, strict: bool = False, default: Any = MISSING
) -> Any:
    """Declare a field read from data ``key`` by ``kind``. ``where``: "ct" or "node" for a path
    there (checked as a path); ``strict``: the part checks its characters itself; ``default``:
    the field's value when a part is built by hand (data always gives every key)."""
    meta = {"key": key, "kind": kind, "where": where, "strict": strict}
    if isinstance(default, Mapping):  # a mutable default: each part gets its own copy
        return field(default_factory=lambda: dict(default), metadata=meta)
    return field(default=default, metadata=meta)


def key_of(f: Field) -> str:
    return f.metadata["key"]


class Part:
    """A group of settings (a frozen dataclass of ``setting()`` fields)."""

    def problems(self) -> list[str]:
        """Checks across this part's values; each problem one line naming the value and fix."""
        return []

    def items(self) -> Iterator[tuple[Field, Any]]:
        """Each field with its value, in declaration order."""
        for f in fields(self):  # type: ignore[arg-type]
            yield f, getattr(self, f.name)

    def paths(self, where: str | None = None) -> dict[str, str]:
        """Path settings of this part by data key (those on ``where`` only, when given)."""
        return {
            key_of(f): v
            for f, v in self.items()
            if f.metadata["where"] and where in (None, f.metadata["where"])
        }

    def field_problems(self) -> list[str]:
        """Per-field rules: paths well-formed, no control character in other strings."""
        return [p for f, v in self.items() for p in _field_problem(key_of(f), f, v)]


def _field_problem(key: str, f: Field, value: Any) -> list[str]:
    if f.metadata["where"]:
        problem = path_shape_problem(value)
        return (
            [f"{key}={value!r} {problem}: fix it in group_data/all.py or --data"] if problem else []
        )
    if f.metadata["strict"]:
        return []  # checked more strictly by the part
    values = value if isinstance(value, tuple) else (value,)
    if any(isinstance(v, str) and CONTROL_RE.search(v) for v in values):
        return [f"{key}={value!r} contains a newline or control character: remove it"]
    return []


def path_shape_problem(path: str) -> str | None:
    """Why ``path`` cannot be a pvegpu path setting (None: it can).

    >>> path_shape_problem("/data"), path_shape_problem("/")
    (None, 'is the root directory /')
    """
    problem = path_problem(path)
    if problem is None and not SAFE_PATH_RE.match(path):
        problem = "has a character outside letters, digits and / . _ - + @"
    if problem is None and path == "/":
        problem = "is the root directory /"
    return problem


def read_part(part: type, get: Callable[..., Any]) -> tuple[dict[str, Any], list[str]]:
    """The coerced values of ``part``'s fields from ``get(key, None)``, and one line per value
    that is missing or has the wrong type (an unset optional setting is None)."""
    values: dict[str, Any] = {}
    errors: list[str] = []
    for f in fields(part):
        key, kind = key_of(f), f.metadata["kind"]
        raw = get(key, None)
        if raw is None:
            if kind is optional_text:
                values[f.name] = None
            else:
                errors.append(
                    f"{key} is not set: define it in group_data/all.py or pass --data {key}=..."
                )
            continue
        try:
            values[f.name] = kind(key, raw)
        except ValueError as e:
            errors.append(str(e))
    return values, errors

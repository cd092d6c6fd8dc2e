"""The venv's packages equal its lock (or, without one, its pins and their dependency closure),
and ``uv pip check`` is clean.

>>> inst = {"a": {"requires": ["b>=1", "c; extra == 'x'"]}, "b": {"requires": []},
...         "c": {"requires": []}, "junk": {"requires": []}}
>>> sorted(required_closure(inst, {"a": set()}))
['a', 'b']
"""

from __future__ import annotations

import re

from ..locks import normalize as normalize_name
from ..settings import Settings
from .inputs import Inputs
from .verdict import Problem, Verdict

#: Packages a venv may carry without any pin asking for them (only when there is no lock).
SEED_PACKAGES = {"pip", "setuptools", "wheel"}


def _requirement(text: str) -> tuple[str, set[str], str] | None:
    """(name, extras, marker-text) of a Requires-Dist value, or None if unreadable."""
    try:
        from packaging.requirements import InvalidRequirement, Requirement
    except ImportError:  # pragma: no cover (packaging comes with pyinfra)
        m = re.match(r"\s*([A-Za-z0-9][A-Za-z0-9._-]*)", text)
        return (normalize_name(m.group(1)), set(), text.partition(";")[2]) if m else None
    try:
        req = Requirement(text)
    except InvalidRequirement:
        return None
    return normalize_name(req.name), set(req.extras), str(req.marker or "")


def required_closure(installed: dict[str, dict], seeds: dict[str, set[str]]) -> set[str]:
    """Normalized names reachable from ``seeds`` (name -> requested extras) through the installed
    packages' Requires-Dist. Markers other than ``extra == ...`` are treated as possibly true, so
    the closure never calls a legitimately installed dependency extra.

    >>> inst = {"a": {"requires": ["b>=1", "c; extra == 'x'"]}, "b": {"requires": []},
    ...         "c": {"requires": []}, "junk": {"requires": []}}
    >>> sorted(required_closure(inst, {"a": set()}))
    ['a', 'b']
    """
    meta = {normalize_name(k): v for k, v in installed.items()}
    seen: set[str] = set()
    todo = list(seeds.items())
    while todo:
        name, extras = todo.pop()
        name = normalize_name(name)
        if name in seen:
            continue
        seen.add(name)
        for text in (meta.get(name) or {}).get("requires") or []:
            req = _requirement(text)
            if req is None:
                continue
            dep, dep_extras, marker = req
            wanted = re.findall(r"extra\s*==\s*['\"]([^'\"]+)['\"]", marker)
            if wanted and not set(wanted) & extras:
                continue
            todo.append((dep, dep_extras))
    return seen


def pin_seeds(settings: Settings) -> dict[str, tuple[str, set[str]]]:
    """name -> (version, extras) of the pins the venv was asked for (torch + training stack)."""
    seeds: dict[str, tuple[str, set[str]]] = {
        "torch": (f"{settings.torch_version}+{settings.torch_variant}", set())
    }
    for pin in settings.training_requirements:
        m = re.fullmatch(r"([A-Za-z0-9][A-Za-z0-9._-]*)(?:\[([^\]]*)\])?==(\S+)", pin)
        if m:
            extras = {e.strip() for e in (m.group(2) or "").split(",") if e.strip()}
            seeds[normalize_name(m.group(1))] = (m.group(3), extras)
    return seeds


def package_drift(
    installed: dict[str, dict], settings: Settings, lock: dict[str, str] | None
) -> tuple[list[str], list[str], list[tuple[str, str, str | None]]]:
    """(missing, extra, wrong) of a venv against its lock, or (without one) against the pins and
    their dependency closure. ``wrong`` is a list of (name, expected, found).

    >>> from pvegpu.settings import defaults
    >>> s = Settings.from_data({**defaults(), "training_requirements": []})
    >>> package_drift({"torch": {"version": "2.11.0+cu128", "requires": []},
    ...                "junk": {"version": "1", "requires": []}}, s, None)
    ([], ['junk==1'], [('torch', '2.11.0+cu130', '2.11.0+cu128')])
    """
    have = {normalize_name(k): v for k, v in installed.items()}
    if lock is not None:
        expected = dict(lock)
        allowed = set(expected)
    else:
        seeds = pin_seeds(settings)
        expected = {n: v for n, (v, _) in seeds.items()}
        allowed = required_closure(have, {n: e for n, (_, e) in seeds.items()}) | SEED_PACKAGES
    missing = sorted(f"{n}=={v}" for n, v in expected.items() if n not in have)
    wrong = sorted(
        (n, v, have[n].get("version"))
        for n, v in expected.items()
        if n in have and have[n].get("version") != v
    )
    extra = sorted(f"{n}=={have[n].get('version')}" for n in have if n not in allowed)
    return missing, extra, wrong


def drift_report(f: Inputs) -> dict | None:
    """The venv's drift for the summary: missing, extra and wrong packages and what they are
    measured against (None without the container's package list)."""
    installed = (f.ct or {}).get("packages")
    if installed is None:
        return None
    missing, extra, wrong = package_drift(installed, f.settings, f.lock)
    basis = f.lock_source or "its pins and their dependencies (no lock)"
    return {"missing": missing, "extra": extra, "wrong": wrong, "basis": basis}


def check_packages(v: Verdict, f: Inputs) -> None:
    """No package missing, extra or of another version; ``uv pip check`` clean (a warning when
    uv is not there to run it). Runs after the torch checks: a wrong torch build is said once."""
    drift = drift_report(f)
    if drift is None:
        return
    torch_reported = any(p.check == "torch build" for p in v.problems)
    wrong = [w for w in drift["wrong"] if not (torch_reported and w[0] == "torch")]
    found = []
    if drift["missing"]:
        found.append("missing " + ", ".join(drift["missing"]))
    if wrong:
        found.append("wrong " + ", ".join(f"{n} {have} (want {exp})" for n, exp, have in wrong))
    if drift["extra"]:
        found.append("extra " + ", ".join(drift["extra"]))
    if found:
        v.problems.append(
            Problem(
                "venv packages",
                f"exactly {drift['basis']}",
                "; ".join(found),
                "run deploy.py (re-syncs the venv), or deploy.py --data rebuild=venv",
            )
        )
    _check_pip_check(v, f.ct.get("pip_check"))


def _check_pip_check(v: Verdict, pip_check: dict | None) -> None:
    if pip_check and pip_check.get("rc") not in (0, None):
        lines = [
            x
            for x in (pip_check.get("output") or "").splitlines()
            if x.strip() and not x.startswith("Checked ")
        ]
        v.problems.append(
            Problem(
                "venv dependencies",
                "uv pip check clean",
                "; ".join(lines[:3]) or f"exit {pip_check['rc']}",
                "run deploy.py --data rebuild=venv",
            )
        )
    elif pip_check is None:
        v.warnings.append("uv pip check not run (uv not installed in the container)")

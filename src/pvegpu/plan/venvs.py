"""The layout of per-build venvs, and the pure decisions the python env stage takes on it.

Layout in the container (``venvs_dir=/root/venvs``, ``venv_path=/root/venv``)::

    /root/venv -> /root/venvs/torch-2.11.0-cu130            the live link (switched by
                                                            renaming a temp link)
    /root/venvs/torch-2.11.0-cu130 -> torch-2.11.0-cu130.b2  the build's link (switched the same
                                                            way)
    /root/venvs/torch-2.11.0-cu130.b2/                      a real venv (relocatable), with
        .pvegpu-build.json   what it was built from (marker)
        .pvegpu-lock.txt     the exact hashed pins it was synced to (drift is measured against it)
        .pvegpu-selected     touched whenever the live link switches to it (recency, for pruning)
    /root/venvs/torch-2.11.0-cu130.building/                a build in progress (never live)
    /root/venvs/torch-2.11.0-cu130.next/                    a finished build waiting for its check

A rebuild of the live build (drift repair, a new lock) is built beside it as ``.next``, checked,
renamed to ``.b<n+1>`` and switched in with one rename of the build's link: the live venv is never
modified in place and never missing.

>>> real_name("torch-2.11.0-cu130", 3), parse_real("torch-2.11.0-cu130.b3")
('torch-2.11.0-cu130.b3', ('torch-2.11.0-cu130', 3))
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from ..locks import LockPlan, normalize
from ..settings import PythonEnvSettings

MARKER = ".pvegpu-build.json"
LOCK_FILE = ".pvegpu-lock.txt"
SELECTED_FILE = ".pvegpu-selected"
CACHE_PTH = "pvegpu_compile_cache.pth"
REAL_RE = re.compile(r"^(?P<build>.+)\.b(?P<n>\d+)$")


def real_name(build: str, n: int) -> str:
    return f"{build}.b{n}"


def parse_real(name: str) -> tuple[str, int] | None:
    m = REAL_RE.match(name)
    return (m.group("build"), int(m.group("n"))) if m else None


def next_number(venvs: dict, build: str) -> int:
    """The next free build number of ``build`` (1 for the first).

    >>> next_number({"t.b1": {}, "t.b4": {}, "u.b9": {}}, "t")
    5
    """
    nums = [p[1] for p in map(parse_real, venvs) if p and p[0] == build]
    return max(nums, default=0) + 1


def python_minor(version: str | None) -> str | None:
    """``3.11.2`` -> ``3.11``.

    >>> python_minor("3.11.2"), python_minor(None)
    ('3.11', None)
    """
    return ".".join(version.split(".")[:2]) if version else None


def effective_python_version(python_env: PythonEnvSettings, state: dict) -> str | None:
    """The Python version (X.Y) the venvs and locks are for: ``python_version`` when set, else
    the container's ``python_interpreter`` as the container state probe found it.

    >>> from types import SimpleNamespace as S
    >>> effective_python_version(S(version=None), {"python": {"version": "3.13.5"}})
    '3.13'
    >>> effective_python_version(S(version="3.11"), {"python": {"version": "3.13.5"}})
    '3.11'
    """
    if python_env.version:
        return python_env.version
    return python_minor((state.get("python") or {}).get("version"))


def marker(settings, plan: LockPlan, python_version: str | None) -> dict:
    """What a finished build records in ``.pvegpu-build.json`` (compared on every run)."""
    return {
        "build": settings.torch.build_name,
        "torch": f"{settings.torch.version}+{settings.torch.variant}",
        "variant": settings.torch.variant,
        "input_sha256": plan.sha256,
        "source": plan.source,
        "python": settings.python_env.interpreter,
        "python_version": python_minor(python_version),
        "compile_cache_dir": settings.compile_cache_dir,
    }


# --- drift ---------------------------------------------------------------------------------------
def _label(version: str) -> str:
    return version.partition("+")[2]


@dataclass
class Drift:
    """A venv's installed packages against its lock."""

    extra: dict[str, str] = field(default_factory=dict)
    missing: dict[str, str] = field(default_factory=dict)
    wrong_version: dict[str, tuple[str, str]] = field(default_factory=dict)
    wrong_variant: dict[str, tuple[str, str]] = field(default_factory=dict)

    def __bool__(self) -> bool:
        return bool(self.extra or self.missing or self.wrong_version or self.wrong_variant)

    def lines(self) -> list[str]:
        out = []
        for name, (have, want) in sorted(self.wrong_variant.items()):
            what = (
                "PyPI's unlabeled build, not the " + _label(want) + " build"
                if not _label(have)
                else f"the {_label(have)} build, not {_label(want)}"
            )
            out.append(f"{name} is {have}, the lock says {want} (wrong variant: {what})")
        for name, (have, want) in sorted(self.wrong_version.items()):
            out.append(f"{name} is {have}, the lock says {want} (wrong version)")
        for name, want in sorted(self.missing.items()):
            out.append(f"{name} {want} is in the lock but not installed (missing)")
        for name, have in sorted(self.extra.items()):
            out.append(f"{name} {have} is installed but not in the lock (extra)")
        return out

    def as_dict(self) -> dict:
        return {
            "extra": self.extra,
            "missing": self.missing,
            "wrong_version": {k: list(v) for k, v in self.wrong_version.items()},
            "wrong_variant": {k: list(v) for k, v in self.wrong_variant.items()},
        }


def drift(installed: dict[str, str], locked: dict[str, str]) -> Drift:
    """Compare a venv's packages with its lock: extra, missing, wrong version, wrong variant (a
    different or missing local label, e.g. ``2.11.0+cu128`` or PyPI's unlabeled ``2.11.0`` where
    the lock says ``2.11.0+cu130``).

    >>> d = drift({"torch": "2.11.0+cu128", "sglang-junk": "0.1.0"},
    ...           {"torch": "2.11.0+cu130", "transformers": "5.6.0"})
    >>> for line in d.lines(): print(line)
    torch is 2.11.0+cu128, the lock says 2.11.0+cu130 (wrong variant: the cu128 build, not cu130)
    transformers 5.6.0 is in the lock but not installed (missing)
    sglang-junk 0.1.0 is installed but not in the lock (extra)
    """
    have = {normalize(k): v.strip() for k, v in installed.items()}
    want = {normalize(k): v.strip() for k, v in locked.items()}
    d = Drift()
    for name, version in want.items():
        found = have.get(name)
        if found is None:
            d.missing[name] = version
        elif found.lower() != version.lower():
            if _label(found) != _label(version):
                d.wrong_variant[name] = (found, version)
            else:
                d.wrong_version[name] = (found, version)
    for name, version in have.items():
        if name not in want:
            d.extra[name] = version
    return d


# --- what to build -------------------------------------------------------------------------------
def selected_entry(state: dict, build: str) -> dict | None:
    """The selected build's entry, read through its link (None when it has no finished build)."""
    entry = (state.get("venvs") or {}).get(build)
    if not entry or "link" not in entry or not entry.get("path"):
        return None
    return entry


def build_reasons(state: dict, settings, plan: LockPlan) -> list[str]:
    """Why the selected build must be built (again); empty when its current build is good.

    A build is good when its marker matches what this run would build (torch build, lock input,
    python, compile cache dir), its python runs, and its packages are exactly its lock.
    """
    venvs = state.get("venvs") or {}
    build = settings.torch.build_name
    reasons = []
    if f"{build}.next" in venvs:
        reasons.append(
            f"an unchecked build {build}.next was left by an earlier run (rebuilt from scratch)"
        )
    entry = selected_entry(state, build)
    if entry is None:
        return reasons + [f"{build} is not built yet"]
    python = state.get("python") or {}
    want = marker(settings, plan, python.get("version"))
    have = entry.get("build") or {}
    if not entry.get("python_ok") or not have:
        return reasons + [f"{build} ({entry.get('real')}) is incomplete"]
    for key, what in (
        ("torch", "torch build"),
        ("input_sha256", "lock input"),
        ("python", "python_interpreter"),
        ("python_version", "python version"),
        ("compile_cache_dir", "compile cache dir"),
    ):
        if have.get(key) != want[key]:
            reasons.append(
                f"{build}: its {what} changed ({_short(have.get(key))} -> {_short(want[key])})"
            )
    if entry.get("locked") is None:
        reasons.append(f"{build}: it records no lock ({LOCK_FILE})")
    elif not reasons:
        found = drift(entry.get("installed") or {}, entry["locked"])
        reasons += [f"{build}: {line}" for line in found.lines()]
    return reasons


def _short(value) -> str:
    s = str(value)
    return s[:12] if re.fullmatch(r"[0-9a-f]{64}", s) else s


# --- pruning -------------------------------------------------------------------------------------
def prune_plan(state: dict, selected: str, keep_venvs: int) -> tuple[list[str], list[str]]:
    """``(remove, kept_in_use)``: names in venvs_dir to delete, and those kept only because a
    process uses them (``selected``: the selected build's name).

    Kept: the live venv, the selected build, the ``keep_venvs - 1`` most recently selected other
    builds, anything a running process uses, and anything pvegpu did not make. Removed: builds
    beyond that, superseded real dirs of kept builds, and leftover ``.building``/``.next`` dirs.
    """
    venvs = state.get("venvs") or {}
    live_real = (state.get("venv_real") or "").rstrip("/").rsplit("/", 1)[-1] or None
    links = {name: e for name, e in venvs.items() if "link" in e}
    current = {name: e.get("real") for name, e in links.items()}
    others = sorted(
        (name for name in links if name != selected),
        key=lambda n: (links[n].get("selected_at") or links[n].get("built") or 0, n),
        reverse=True,
    )
    kept_builds = {selected, *others[: max(keep_venvs - 1, 0)]}
    live_build = next((b for b, real in current.items() if real and real == live_real), None)
    if live_build:
        kept_builds.add(live_build)
    remove, in_use = [], []

    def drop(name):
        entry = venvs.get(name) or {}
        if entry.get("in_use"):
            in_use.append(name)
        elif name != live_real:
            remove.append(name)

    for name, entry in sorted(venvs.items()):
        if "link" in entry:
            if name not in kept_builds:
                real = entry.get("real")
                if real and (real == live_real or (venvs.get(real) or {}).get("in_use")):
                    continue  # keep the link to a dir we keep
                remove.append(name)
            continue
        parsed = parse_real(name)
        if parsed:
            build = parsed[0]
            if build in kept_builds and current.get(build) == name:
                continue
            if (entry.get("build") or {}).get("build") != build:
                continue  # not made by pvegpu
            drop(name)
        elif name.endswith((".building", ".next")):
            base = name.rsplit(".", 1)[0]
            if name.endswith(".next") and base == selected:
                continue  # waiting for its check in this very run
            drop(name)
    return remove, in_use


def python_problem(state: dict, python_env: PythonEnvSettings) -> str | None:
    """Why the container's ``python_interpreter`` cannot build the venv (None when it can).

    >>> from types import SimpleNamespace as S
    >>> python_problem({"python": {"version": "3.12.3"}},
    ...                S(interpreter="python3", version="3.12"))
    """
    found = (state.get("python") or {}).get("version")
    if not found:
        return (
            f"python_interpreter={python_env.interpreter} does not run in the container: "
            "install it (apt install python3) or set python_interpreter"
        )
    want = python_env.version
    if want is not None and found != want and python_minor(found) != want:
        return (
            f"python_interpreter={python_env.interpreter} is Python {found}, "
            f"python_version={want}: point python_interpreter at a Python {want} or set "
            f"python_version={python_minor(found)} (and make the locks for it)"
        )
    return None


def drift_report(state: dict, settings) -> list[str]:
    """One line per difference between the live venv and the lock it was built from (empty when
    it matches). Pure: give it a ``ContainerState`` document.

    >>> drift_report({}, None)
    []
    """
    real = (state.get("venv_real") or "").rstrip("/").rsplit("/", 1)[-1]
    entry = (state.get("venvs") or {}).get(real) if real else None
    if not entry:
        return []  # no live venv: the torch runtime check says so
    where = f"{settings.python_env.venv_path} ({real})"
    if entry.get("locked") is None:
        return [
            f"{where} records no lock ({LOCK_FILE}): it was not built by this pvegpu; "
            "run deploy.py to rebuild it from the lock"
        ]
    return [
        f"{where}: {line}" for line in drift(entry.get("installed") or {}, entry["locked"]).lines()
    ]


def aside_path(venv_path: str, now: float) -> str:
    """Where the switch moves a venv made by hand at ``venv_path`` (kept, never deleted).

    >>> aside_path("/root/venv", 1700000000.5)
    '/root/venv.pre-pvegpu.1700000000'
    """
    return f"{venv_path}.pre-pvegpu.{int(now)}"

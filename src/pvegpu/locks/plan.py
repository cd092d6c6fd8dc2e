"""The lock plan: where a variant's ``.in`` and locks are, and whether the recorded lock can be
installed as is, must be made, or the deploy must refuse (reading only controller files).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from ..digests import text_digest
from ..paths import PROJECT
from ..settings import Settings
from .credentials import credential_conflict
from .pins import desired_pins, desired_pins_list, parse_pins, unhashed_pins


def locks_dir(settings: Settings, project: Path = PROJECT) -> Path:
    path = Path(settings.torch.locks_dir)
    return path if path.is_absolute() else project / path


def display(path: Path, project: Path = PROJECT) -> str:
    try:
        return str(path.relative_to(project))
    except ValueError:
        return str(path)


def lock_name(variant: str, python_version: str) -> str:
    """``cu130-py3.11.lock``: locks differ per Python version (torch ships wheels per cpXY)."""
    return f"{variant}-py{python_version}.lock"


def lock_path(settings: Settings, python_version: str, project: Path = PROJECT) -> Path:
    return locks_dir(settings, project) / lock_name(settings.torch.variant, python_version)


def in_path(settings: Settings, project: Path = PROJECT) -> Path:
    return locks_dir(settings, project) / f"{settings.torch.variant}.in"


@dataclass(frozen=True)
class LockPlan:
    """What a build of the selected variant installs.

    ``kind`` is ``lock`` (``text`` is the hashed lock, synced as is) or ``make`` (no usable
    lock: ``reason`` says why; the deploy makes it with :func:`make_lock`). ``sha256``
    identifies the lock: a build whose marker records another one is stale. ``error`` means:
    refuse (``require_lock=true`` and no lock, or an ``.in`` that pins other things than the
    settings; without require_lock such an ``.in`` is rewritten and the lock made again).
    """

    kind: str
    text: str
    sha256: str
    source: str
    reason: str | None = None
    error: str | None = None
    made: bool = False


def _in_problem(settings: Settings, project: Path) -> str | None:
    """Why ``<variant>.in`` cannot be used for these settings (None: it pins them, or is
    missing and will be written from them)."""
    path = in_path(settings, project)
    try:
        in_pins = parse_pins(path.read_text())
    except OSError:
        return None
    wanted = desired_pins(settings.torch)
    if in_pins == wanted:
        return None
    differ = sorted(
        f"{k} {in_pins.get(k, '(absent)')} vs {wanted.get(k, '(absent)')}"
        for k in set(in_pins) | set(wanted)
        if in_pins.get(k) != wanted.get(k)
    )
    return f"{display(path, project)} does not pin what the settings ask for ({'; '.join(differ)})"


def _lock_problem(settings: Settings, text: str | None, path: Path, project: Path) -> str | None:
    if text is None:
        return f"{display(path, project)} is missing"
    wanted = desired_pins(settings.torch)
    locked = parse_pins(text)
    stale = sorted(k for k, ver in wanted.items() if locked.get(k) != ver)
    if stale:
        return (
            f"{display(path, project)} is out of date (it does not pin "
            f"{', '.join(f'{k}=={wanted[k]}' for k in stale)})"
        )
    unhashed = unhashed_pins(text)
    if unhashed:
        return f"{display(path, project)} has entries without hashes ({', '.join(unhashed)})"
    return None


def lock_plan(settings: Settings, python_version: str, project: Path = PROJECT) -> LockPlan:
    """Decide, reading only controller files, whether the lock for ``python_version`` (X.Y)
    can be installed as is, must be made, or the deploy must refuse."""
    path = lock_path(settings, python_version, project)
    source = display(path, project)
    problem = _in_problem(settings, project)
    if problem:
        # The settings are the source of truth: changed pins make a new .in and lock (printed,
        # to be committed) unless require_lock says the recorded ones are the only ones allowed.
        if not settings.torch.require_lock:
            return LockPlan("make", "", "", source, reason=problem)
        fix = (
            f"write the settings' pins ({', '.join(desired_pins_list(settings))}) to "
            f"{display(in_path(settings, project), project)} and delete its "
            f"{settings.torch.variant}-py*.lock files, or run deploy.py once without "
            "require_lock (it makes them), review and commit them"
        )
        return LockPlan(
            "make", "", "", source, reason=problem, error=f"require_lock=true and {problem}: {fix}"
        )
    try:
        text = path.read_text()
    except OSError:
        text = None
    reason = _lock_problem(settings, text, path, project)
    if reason is None:
        assert text is not None  # a missing file is a reason
        return LockPlan("lock", text, text_digest(text), source)
    error = None
    if settings.torch.require_lock:
        error = (
            f"require_lock=true and {reason}: run deploy.py once without require_lock (it "
            f"makes {source} on this machine from the configured indexes), review it and "
            "commit it"
        )
    return LockPlan("make", "", "", source, reason=reason, error=error)


def early_lock_error(settings: Settings, project: Path = PROJECT) -> str | None:
    """What :func:`lock_plan` refuses, decided before the run (the container's Python unknown
    when ``python_version`` is unset: then any ``<variant>-py*.lock`` may be the one)."""
    conflict = credential_conflict(settings)
    if conflict:
        return conflict
    if settings.python_env.version:
        return lock_plan(settings, settings.python_env.version, project).error
    v = settings.torch.variant
    found = sorted(locks_dir(settings, project).glob(f"{v}-py*.lock"))
    versions = [f.name[len(v) + 3 : -len(".lock")] for f in found]
    errors = [lock_plan(settings, version, project).error for version in versions]
    if errors and not all(errors):
        return None  # one of them may be the container's: venv_built decides
    if errors:
        return errors[0]
    problem = _in_problem(settings, project)
    if problem:
        return lock_plan(settings, "X.Y", project).error
    if settings.torch.require_lock:
        where = display(locks_dir(settings, project) / f"{v}-py<X.Y>.lock", project)
        return (
            f"require_lock=true and there is no {where}: run deploy.py once without "
            "require_lock (it makes the lock for the container's Python on this machine "
            "from the configured indexes), review it and commit it"
        )
    return None

"""Locks: what the python env stage installs into a build's venv, and how the lock is made.

Each variant has an input ``locks/<variant>.in`` (the exact pins: ``torch==<version>+<variant>``
and the training stack) and, made from it by one documented command, a hashed lock
``locks/<variant>.lock`` (``uv pip compile --generate-hashes`` output). A build applies it with
``uv pip sync --require-hashes``, so anything not in the lock is removed.

The lock applies when its ``.in`` pins exactly what the settings ask for (``torch_version``,
``torch_variant``, ``training_requirements``) and the lock pins each of those at that version.
Otherwise the build installs from the settings' pins (resolved in the container, no hashes from
the controller) with a warning naming the command that makes the lock, or, with
``require_lock=true``, refuses before anything changes.

>>> from pvegpu.settings import Settings, defaults
>>> s = Settings.from_data({**defaults(), "torch_variant": "cu128"})
>>> print(requirements_in(s), end="")
torch==2.11.0+cu128
transformers==5.6.0
>>> parse_pins("torch==2.11.0+cu130 \\\\\\n    --hash=sha256:ab\\n    # via -r x.in\\nNumPy==2.3.0\\n")
{'torch': '2.11.0+cu130', 'numpy': '2.3.0'}
"""

from __future__ import annotations

import hashlib
import re
import shlex
import tomllib
from dataclasses import dataclass
from pathlib import Path

from .settings import Settings

PROJECT = Path(__file__).resolve().parents[2]
PIN_LINE = re.compile(
    r"^([A-Za-z0-9][A-Za-z0-9._-]*)(?:\[[^\]]*\])?\s*==\s*([A-Za-z0-9.+!_-]+)\s*(?:;.*)?$"
)


def normalize(name: str) -> str:
    """PEP 503 name normalisation.

    >>> normalize("Sglang_Junk")
    'sglang-junk'
    """
    return re.sub(r"[-_.]+", "-", name).lower()


def _logical_lines(text: str) -> list[str]:
    """Requirement-file lines with comments dropped and backslash continuations joined."""
    out, current = [], ""
    for raw in text.splitlines():
        line = raw.split(" #", 1)[0] if not raw.lstrip().startswith("#") else ""
        line = line.rstrip()
        if line.endswith("\\"):
            current += line[:-1] + " "
            continue
        current += line
        if current.strip():
            out.append(current.strip())
        current = ""
    if current.strip():
        out.append(current.strip())
    return out


def parse_pins(text: str) -> dict[str, str]:
    """``{normalized name: version}`` of every ``name==version`` line (hashes, options, comments
    and markers ignored)."""
    pins = {}
    for line in _logical_lines(text):
        if line.startswith("-"):
            continue
        spec = line.split(" --", 1)[0].strip()
        m = PIN_LINE.match(spec)
        if m:
            pins[normalize(m.group(1))] = m.group(2)
    return pins


def unhashed_pins(text: str) -> list[str]:
    """Names of lock entries that carry no ``--hash`` (``uv pip sync --require-hashes`` refuses
    them).

    >>> unhashed_pins("a==1 \\\\\\n    --hash=sha256:00\\nb==2\\n")
    ['b']
    """
    bad = []
    for line in _logical_lines(text):
        if line.startswith("-"):
            continue
        m = PIN_LINE.match(line.split(" --", 1)[0].strip())
        if m and "--hash=" not in line:
            bad.append(normalize(m.group(1)))
    return bad


def desired_pins(settings: Settings) -> dict[str, str]:
    """The exact pins the settings ask for: torch with its full local label, then the stack."""
    pins = {"torch": f"{settings.torch_version}+{settings.torch_variant}"}
    for req in settings.training_requirements:
        name, _, version = req.partition("==")
        pins[normalize(name.split("[")[0])] = version
    return pins


def requirements_in(settings: Settings) -> str:
    """The ``.in`` text for the settings: ``torch==<version>+<variant>`` first, then the stack."""
    lines = [settings.torch_pin, *sorted(settings.training_requirements, key=str.lower)]
    return "".join(f"{line}\n" for line in lines)


def constraints(settings: Settings) -> str:
    """A constraint every uv call carries: no dependency can pull another torch build."""
    return f"{settings.torch_pin}\n"


def locks_dir(settings: Settings, project: Path = PROJECT) -> Path:
    path = Path(settings.locks_dir)
    return path if path.is_absolute() else project / path


def display(path: Path, project: Path = PROJECT) -> str:
    try:
        return str(path.relative_to(project))
    except ValueError:
        return str(path)


def compile_command(settings: Settings, python_version: str | None = None,
                    project: Path = PROJECT) -> str:
    """The one command that makes ``<locks_dir>/<variant>.lock`` from its ``.in``.

    Explicit indexes and ``first-index`` (never ``--torch-backend=auto``), the exact pins of the
    ``.in``, hashes of every file; run it on the controller, where the indexes are reachable.

    >>> from pvegpu.settings import defaults
    >>> cmd = compile_command(Settings.from_data(defaults()))
    >>> "--extra-index-url https://download.pytorch.org/whl/cu130" in cmd, "auto" in cmd
    (True, False)
    """
    d = locks_dir(settings, project)
    v = settings.torch_variant
    pyver = python_version or settings.python_version
    return " ".join([
        "uv pip compile --no-config --generate-hashes --index-strategy first-index",
        f"--index-url {shlex.quote(settings.package_index_url)}",
        f"--extra-index-url {shlex.quote(settings.torch_index_url)}",
        f"--python-version {shlex.quote(pyver)} --python-platform x86_64-manylinux_2_28",
        f"{shlex.quote(display(d / f'{v}.in', project))}",
        f"-o {shlex.quote(display(d / f'{v}.lock', project))}",
    ])


@dataclass(frozen=True)
class LockPlan:
    """What a build of the selected variant installs.

    ``kind`` is ``lock`` (``text`` is the hashed lock, synced as is) or ``pins`` (``text`` is the
    ``.in`` of the settings, resolved with hashes in the container, then synced). ``sha256``
    identifies the input: a build whose marker records another one is stale. ``warning`` is set
    when pins are used; ``error`` (with ``require_lock=true``) means: refuse.
    """

    kind: str
    text: str
    sha256: str
    source: str
    warning: str | None = None
    error: str | None = None


def _sha(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()


def lock_plan(settings: Settings, project: Path = PROJECT) -> LockPlan:
    """Decide lock or pins for the selected variant (reads only controller files)."""
    d = locks_dir(settings, project)
    v = settings.torch_variant
    in_path, lock_path = d / f"{v}.in", d / f"{v}.lock"
    wanted = desired_pins(settings)
    reason = None
    try:
        in_pins = parse_pins(in_path.read_text())
    except OSError:
        in_pins = None
        reason = f"{display(in_path, project)} is missing"
    if in_pins is not None and in_pins != wanted:
        differ = sorted(
            f"{k} {in_pins.get(k, '(absent)')} vs {wanted.get(k, '(absent)')}"
            for k in set(in_pins) | set(wanted) if in_pins.get(k) != wanted.get(k)
        )
        reason = (f"{display(in_path, project)} does not pin what the settings ask for "
                  f"({'; '.join(differ)})")
    lock_text = None
    if reason is None:
        try:
            lock_text = lock_path.read_text()
        except OSError:
            reason = f"{display(lock_path, project)} is missing"
    if lock_text is not None:
        locked = parse_pins(lock_text)
        stale = sorted(k for k, ver in wanted.items() if locked.get(k) != ver)
        unhashed = unhashed_pins(lock_text)
        if stale:
            reason = (f"{display(lock_path, project)} is out of date (it does not pin "
                      f"{', '.join(f'{k}=={wanted[k]}' for k in stale)})")
        elif unhashed:
            reason = f"{display(lock_path, project)} has entries without hashes ({', '.join(unhashed)})"
        else:
            return LockPlan("lock", lock_text, _sha(lock_text), display(lock_path, project))
    make = compile_command(settings, project=project)
    if in_pins != wanted:
        make = (f"write the pins ({', '.join(settings.torch_pin.split() + list(settings.training_requirements))})"
                f" to {display(in_path, project)}, then run: {make}")
    else:
        make = f"run: {make}"
    text = requirements_in(settings)
    if settings.require_lock:
        return LockPlan("pins", text, _sha(text), "pins",
                        error=f"require_lock=true and {reason}: to make the lock, {make}")
    return LockPlan(
        "pins", text, _sha(text), "pins",
        warning=(f"no usable lock for {settings.build_name}: {reason}; installing from the pins "
                 f"(resolved with hashes in the container); to make the lock, {make}"),
    )


def uv_wheel_hashes(version: str, project: Path = PROJECT) -> dict[str, str]:
    """``{wheel filename: sha256}`` of ``uv==version`` from the project's own uv.lock (the one pin
    for the controller's uv and the container's): the container install checks the wheel
    against it. Empty when uv.lock does not know that version.

    >>> from importlib.metadata import version as v
    >>> any("manylinux" in name for name in uv_wheel_hashes(v("uv")))
    True
    """
    try:
        lock = tomllib.loads((project / "uv.lock").read_text())
    except (OSError, tomllib.TOMLDecodeError):
        return {}
    for pkg in lock.get("package", []):
        if pkg.get("name") == "uv" and pkg.get("version") == version:
            out = {}
            for wheel in pkg.get("wheels", []):
                name = wheel.get("url", "").rsplit("/", 1)[-1]
                algo, _, digest = wheel.get("hash", "").partition(":")
                if name and algo == "sha256" and digest:
                    out[name] = digest
            return out
    return {}

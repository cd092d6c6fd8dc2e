"""Locks: what the python env stage installs into a build's venv, and how the lock is made.

Each variant has an input ``<locks_dir>/<variant>.in`` (the exact pins:
``torch==<version>+<variant>`` and the training stack) and, per Python version (the venv's X.Y:
wheels differ per Python), a hashed lock ``<locks_dir>/<variant>-py<X.Y>.lock`` (``uv pip compile
--generate-hashes`` output). A build applies it with ``uv pip sync --require-hashes``, so anything
not in the lock is removed and any file whose hash differs is refused.

Locks on first use: when the lock is missing (or out of date) the deploy compiles it on the
controller against the configured indexes (``make_lock``), writes it, says so ("commit it") and
installs from it; later deploys install from the recorded lock, so an index that changes a wheel
afterwards is refused by hash. ``require_lock=true`` refuses instead of making one. An ``.in``
that pins something else than the settings is refused (its locks were made for other pins).

Torch comes only from the torch index and everything else only from ``package_index_url``: the
per-CUDA torch index also hosts older copies of many of torch's dependencies (filelock,
typing-extensions, ...), so ``first-index`` with the torch index as an *extra* index pins those
stale copies or fails. uv's mechanism for this (docs/guides/integration/pytorch.md) is a named
index with ``explicit = true`` that only packages bound to it in ``[tool.uv.sources]`` use; ``uv
pip compile`` and ``uv pip sync`` honour both when the requirements come from a ``pyproject.toml``
(``training_pyproject``). docs/real-tools.md ("uv", "PyTorch wheel index") records the tests.

>>> from pvegpu.settings import Settings, defaults
>>> s = Settings.from_data({**defaults(), "torch_variant": "cu128"})
>>> print(requirements_in(s), end="")
torch==2.11.0+cu128
transformers==5.6.0
>>> parse_pins("torch==2.11.0+cu130 \\\\\\n    --hash=sha256:ab\\n"
...            "    # via -r x.in\\nNumPy==2.3.0\\n")
{'torch': '2.11.0+cu130', 'numpy': '2.3.0'}
"""

from __future__ import annotations

import base64
import json
import os
import re
import subprocess
import tempfile
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import unquote, urlsplit, urlunsplit

from .digests import text_digest
from .paths import PROJECT
from .settings import Settings, TorchSettings

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


def desired_pins(torch: TorchSettings) -> dict[str, str]:
    """The exact pins the torch settings ask for: torch with its full local label, then the
    stack."""
    pins = {"torch": f"{torch.version}+{torch.variant}"}
    for req in torch.requirements:
        name, _, version = req.partition("==")
        pins[normalize(name.split("[")[0])] = version
    return pins


def requirements_in(settings: Settings) -> str:
    """The ``.in`` text for the settings: ``torch==<version>+<variant>`` first, then the stack."""
    lines = [settings.torch.pin, *sorted(settings.torch.requirements, key=str.lower)]
    return "".join(f"{line}\n" for line in lines)


def constraints(settings: Settings) -> str:
    """A constraint every uv call carries: no dependency can pull another torch build."""
    return f"{settings.torch.pin}\n"


def locks_dir(settings: Settings, project: Path = PROJECT) -> Path:
    path = Path(settings.torch.locks_dir)
    return path if path.is_absolute() else project / path


def display(path: Path, project: Path = PROJECT) -> str:
    try:
        return str(path.relative_to(project))
    except ValueError:
        return str(path)


# --- credentials: never in argv, output or files other than a 0600 netrc -----------------------
def split_credentials(url: str) -> tuple[str, tuple[str, str] | None]:
    """``(url without user:token@, (user, token) or None)``; the token is URL-decoded.

    >>> split_credentials("https://me:s%40cret@mirror.example/simple")
    ('https://mirror.example/simple', ('me', 's@cret'))
    >>> split_credentials("https://pypi.org/simple")
    ('https://pypi.org/simple', None)
    """
    parts = urlsplit(url)
    if parts.username is None and parts.password is None:
        return url, None
    netloc = parts.hostname or ""
    if ":" in netloc:
        netloc = f"[{netloc}]"
    if parts.port is not None:
        netloc += f":{parts.port}"
    clean = urlunsplit((parts.scheme, netloc, parts.path, parts.query, parts.fragment))
    return clean, (unquote(parts.username or ""), unquote(parts.password or ""))


def redact(text: str) -> str:
    """Every ``scheme://user:token@`` in ``text`` with the token replaced by ``***``.

    >>> redact("package_index_url=https://me:tok@mirror.example/simple is down")
    'package_index_url=https://me:***@mirror.example/simple is down'
    """
    return re.sub(r"(\b[a-z][a-z0-9+.-]*://[^/@:\s]*):[^/@\s]*@", r"\1:***@", text, flags=re.I)


def netrc_text(torch: TorchSettings) -> str:
    """A netrc (``machine <host> login <user> password <token>``) for the indexes that carry
    credentials, '' when none does. uv reads it from ``$NETRC``; so does the reachability check.
    netrc is per host: two indexes on one host share its credentials."""
    lines = {}
    for url in (torch.package_index_url, torch.index_url):
        _, cred = split_credentials(url)
        host = urlsplit(url).hostname
        if cred and host and host not in lines:
            lines[host] = f"machine {host} login {cred[0]} password {cred[1]}\n"
    return "".join(lines.values())


def credential_conflict(settings: Settings) -> str | None:
    """One line when the two index URLs carry different credentials for one host (a netrc holds
    one login per host), else None."""
    seen: dict[str, tuple[str, tuple[str, str]]] = {}
    for key in ("package_index_url", "torch_index_base"):
        url = settings.value(key)
        _, cred = split_credentials(url)
        host = urlsplit(url).hostname
        if not cred or not host:
            continue
        if host in seen and seen[host][1] != cred:
            return (
                f"{seen[host][0]} and {key} carry different credentials for {host}: uv reads "
                "one login per host (netrc): give both the same user:token"
            )
        seen[host] = (key, cred)
    return None


def index_problem(settings: Settings, urlopen=None) -> str | None:
    """One line when an index does not answer this machine or refuses its credentials (uv
    reports a refused login only as "not found"); None when both answer."""
    # imported here: only making a lock needs them, and every run imports this module
    import urllib.error
    import urllib.request

    urlopen = urlopen or urllib.request.urlopen
    for key, url in (
        ("package_index_url", settings.torch.package_index_url),
        ("torch_index_base", settings.torch.index_url),
    ):
        clean, cred = split_credentials(url)
        req = urllib.request.Request(clean.rstrip("/") + "/", method="HEAD")
        if cred:
            token = base64.b64encode(f"{cred[0]}:{cred[1]}".encode()).decode()
            req.add_header("Authorization", f"Basic {token}")
        try:
            urlopen(req, timeout=20).close()
        except urllib.error.HTTPError as e:
            if e.code in (401, 403):
                return (
                    f"{key}={redact(url)} refused the credentials (HTTP {e.code}): fix the "
                    f"user:token in {key}"
                )
        except Exception as e:  # noqa: BLE001 - any failure is one line
            why = redact(str(getattr(e, "reason", e)))
            return (
                f"{key}={redact(url)} is not reachable from this machine ({why}), where "
                f"locks are made: fix {key} or start the index"
            )
    return None


# --- the lock file and its input --------------------------------------------------------------
def lock_name(variant: str, python_version: str) -> str:
    """``cu130-py3.11.lock``: locks differ per Python version (torch ships wheels per cpXY)."""
    return f"{variant}-py{python_version}.lock"


def lock_path(settings: Settings, python_version: str, project: Path = PROJECT) -> Path:
    return locks_dir(settings, project) / lock_name(settings.torch.variant, python_version)


def in_path(settings: Settings, project: Path = PROJECT) -> Path:
    return locks_dir(settings, project) / f"{settings.torch.variant}.in"


#: The name of the torch index in the pyproject given to uv (credentials would be
#: ``UV_INDEX_PYTORCH_USERNAME``; we use the netrc, which covers both indexes).
TORCH_INDEX = "pytorch"


def training_pyproject(settings: Settings, pins: list[str]) -> str:
    """A ``pyproject.toml`` whose dependencies are ``pins`` and that binds torch, and only
    torch, to the torch index (``explicit = true``; uv's PyTorch guide): every other package
    comes from ``package_index_url`` (``--index-url``), even when the torch index has a copy.

    >>> from pvegpu.settings import defaults
    >>> text = training_pyproject(Settings.from_data(defaults()), ["torch==2.11.0+cu130"])
    >>> 'explicit = true' in text, 'torch = { index = "pytorch" }' in text
    (True, True)
    """
    url, _ = split_credentials(settings.torch.index_url)
    deps = "".join(f"    {json.dumps(pin)},\n" for pin in pins)
    return (
        "# Made by pvegpu for one uv call: torch from the torch index only, the rest from\n"
        "# package_index_url only (see pvegpu.locks).\n"
        "[project]\n"
        'name = "pvegpu-training-env"\n'
        'version = "0"\n'
        f"dependencies = [\n{deps}]\n\n"
        "[[tool.uv.index]]\n"
        f'name = "{TORCH_INDEX}"\n'
        f"url = {json.dumps(url)}\n"
        "explicit = true\n\n"
        "[tool.uv.sources]\n"
        f'torch = {{ index = "{TORCH_INDEX}" }}\n'
    )


def index_args(settings: Settings) -> list[str]:
    """``--index-url <package_index_url>`` (without credentials: those come from the netrc) and
    ``first-index`` (uv's default, stated against any config); the torch index is in the
    pyproject, never an extra index."""
    url, _ = split_credentials(settings.torch.package_index_url)
    return ["--index-url", url, "--index-strategy", "first-index"]


def compile_argv(
    settings: Settings, uv: str, pyproject: str, output: str, python_version: str
) -> list[str]:
    """``uv pip compile`` of the pyproject into a hashed lock for CPython ``python_version`` on
    x86_64 glibc Linux (what the container runs), without uv's header (it would name temp
    paths)."""
    return [
        uv,
        "pip",
        "compile",
        "--no-config",
        "--quiet",
        "--generate-hashes",
        "--no-header",
        *index_args(settings),
        "--python-version",
        python_version,
        "--python-platform",
        "x86_64-manylinux_2_28",
        pyproject,
        "-o",
        output,
    ]


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


def desired_pins_list(settings: Settings) -> list[str]:
    return [line for line in requirements_in(settings).splitlines() if line]


IN_HEADER = (
    "# Input of the {variant} locks ({variant}-py<X.Y>.lock): torch built for {variant} and the\n"
    "# training stack, pinned exactly as the settings ask (torch_version, torch_variant,\n"
    "# training_requirements). A deploy makes a missing lock from it; commit both.\n"
)


def make_lock(
    settings: Settings,
    python_version: str,
    project: Path = PROJECT,
    uv: str | None = None,
    run=subprocess.run,
    check=index_problem,
) -> LockPlan:
    """Compile ``<variant>-py<X.Y>.lock`` on this machine (the controller) from the settings'
    pins against the configured indexes, write it (and a missing ``.in``) atomically, and
    return its plan; on failure a plan with ``error`` (one line: what, why, the fix).

    Credentials in the index URLs reach uv only through a temporary 0600 netrc (``$NETRC``),
    never its argv; its output is redacted before it is shown.
    """
    plan = lock_plan(settings, python_version, project)
    if plan.kind == "lock" or plan.error:
        return plan
    path = lock_path(settings, python_version, project)
    source = display(path, project)
    problem = check(settings)
    if problem:
        return LockPlan(
            "make", "", "", source, reason=plan.reason, error=f"making {source} failed: {problem}"
        )
    if uv is None:
        import uv as uv_package

        uv = uv_package.find_uv_bin()
    with tempfile.TemporaryDirectory(prefix="pvegpu-lock-") as tmp:
        pyproject = Path(tmp) / "pyproject.toml"
        pyproject.write_text(training_pyproject(settings, desired_pins_list(settings)))
        out = Path(tmp) / "lock.txt"
        env = {
            k: v
            for k, v in os.environ.items()
            if not k.startswith("UV_") and k not in ("VIRTUAL_ENV", "NETRC")
        }
        env.update(UV_NO_PROGRESS="1", UV_PYTHON_DOWNLOADS="never")
        netrc = netrc_text(settings.torch)
        if netrc:
            env["NETRC"] = str(Path(tmp) / "netrc")
            fd = os.open(env["NETRC"], os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
            with os.fdopen(fd, "w") as f:
                f.write(netrc)
        argv = compile_argv(settings, uv, str(pyproject), str(out), python_version)
        proc = run(argv, env=env, capture_output=True, text=True, cwd=tmp)
        if proc.returncode != 0 or not out.is_file():
            why = uv_reason(redact(proc.stdout + proc.stderr).splitlines())
            return LockPlan(
                "make",
                "",
                "",
                source,
                reason=plan.reason,
                error=(
                    f"making {source} failed: {why}: fix the pins or the indexes "
                    "(package_index_url, torch_index_base) and run deploy.py again"
                ),
            )
        body = out.read_text()
    problem = _lock_problem(settings, body, path, project)
    if problem:
        return LockPlan(
            "make", "", "", source, reason=plan.reason, error=f"making {source} failed: {problem}"
        )
    text = lock_header(settings, python_version, project) + body
    if not in_path(settings, project).exists() or _in_problem(settings, project):
        _write_atomically(in_path(settings, project), None, settings, replace_in=True)
    _write_atomically(path, text, settings)
    return LockPlan("lock", text, text_digest(text), source, reason=plan.reason, made=True)


def lock_header(settings: Settings, python_version: str, project: Path = PROJECT) -> str:
    return (
        f"# Hashed lock of {display(in_path(settings, project), project)} for Python "
        f"{python_version}, made by pvegpu with uv pip compile --generate-hashes:\n"
        f"# torch from {redact(settings.torch.index_url)} (explicit index), everything else from\n"
        f"# {redact(settings.torch.package_index_url)}. Commit it; "
        "deploys install exactly these files.\n"
    )


def _write_atomically(
    path: Path, text: str | None, settings: Settings, replace_in: bool = False
) -> None:
    """Write ``text`` to ``path`` via a temp file and a rename; ``None`` writes the ``.in`` of
    the settings (only when it is missing, unless ``replace_in``)."""
    if text is None:
        if path.exists() and not replace_in:
            return
        text = IN_HEADER.format(variant=settings.torch.variant) + requirements_in(settings)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.pvegpu-tmp")
    tmp.write_text(text)
    os.replace(tmp, path)


def uv_error(lines: list[str]) -> str | None:
    """uv's own explanation, as one line, from its output (None when it gave none).

    >>> uv_error(["error: No solution found when resolving dependencies",
    ...           "  cause: Because transformers==9.9.9 was not found ...", "", "hint: ..."])
    'No solution found when resolving dependencies Because transformers==9.9.9 was not found ...'
    >>> uv_error(["  × No solution found when resolving dependencies:",
    ...           "  ╰─▶ Because torch==2.11.0+cu128 was not found in the package registry ..."])
    ... # doctest: +NORMALIZE_WHITESPACE
    'No solution found when resolving dependencies: Because torch==2.11.0+cu128 was not found in
    the package registry ...'
    """
    picked = []
    for line in lines:
        s = line.strip()
        s = re.sub(r"^(×|╰─▶|├─▶|│|error:|Caused by:|cause:)\s*", "", s)
        if s != line.strip() and s:
            picked.append(s)
    return " ".join(picked) if picked else None


def uv_reason(lines: list[str]) -> str:
    """:func:`uv_error`, else uv's last line of output.

    >>> uv_reason(["resolving", "something odd"])
    'something odd'
    """
    return uv_error(lines) or next(
        (line.strip() for line in reversed(lines) if line.strip()), "no output"
    )


def uv_wheel_hashes(version: str, project: Path = PROJECT) -> dict[str, str]:
    """``{wheel filename: sha256}`` of ``uv==version`` from the project's own uv.lock (the one pin
    for the controller's uv and the container's): the container install checks the wheel
    against it. Empty when uv.lock does not know that version.

    >>> from importlib.metadata import version as v
    >>> any("manylinux" in name for name in uv_wheel_hashes(v("uv")))
    True
    """
    import tomllib  # here: verify.py imports this module and never needs it

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

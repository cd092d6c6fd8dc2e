"""The build script: one shell command that builds a venv from scratch beside the live one (pure).

It starts from an empty ``<build>.building`` dir, syncs the lock offline from uv's cache when the
cache has everything (no index contacted), else checks the indexes answer and syncs online, then
records the marker and renames the finished venv to ``<build>.next``. The layout is described in
:mod:`pvegpu.plan.venvs`; the uv command lines come from :mod:`pvegpu.plan.uv_commands`.

>>> quoted(["uv", "venv", "/root/venvs/a b"])
"uv venv '/root/venvs/a b'"
"""

from __future__ import annotations

import base64
import gzip
import json
import shlex

from ..guard import delete_command
from ..locks import LockPlan, training_pyproject
from ..settings import Settings
from .uv_commands import (
    NETRC,
    has_credentials,
    lock_requirements,
    reach_command,
    sync_argv,
    uv_bin,
    uv_env,
)
from .venvs import CACHE_PTH, LOCK_FILE, MARKER, marker


def quoted(argv: list[str]) -> str:
    """``argv`` as one shell-quoted command line."""
    return " ".join(shlex.quote(a) for a in argv)


def gzip_write_command(path: str, text: str) -> str:
    """A command writing ``text`` to ``path`` (gzip + base64: no quoting can break it)."""
    payload = base64.b64encode(gzip.compress(text.encode(), mtime=0)).decode()
    return f"printf %s {payload} | base64 -d | gzip -dc > {shlex.quote(path)}"


#: uv's cache size (KiB) when the build began, inside ``<build>.building``.
CACHE_START = ".pvegpu-sync/cache-kb"


def build_progress_poll(settings: Settings) -> str:
    """The container command a running build's progress line reads: ``<KiB uv's cache grew
    since the build began> <packages installed in the new venv>`` (nothing before the build dir
    exists or once it is renamed). uv streams each wheel into its cache as it downloads it, then
    installs them all from there, so the cache grows during the download and dist-info dirs
    appear during the install.

    >>> from pvegpu.settings import defaults
    >>> print(build_progress_poll(Settings.from_data(defaults())))  # doctest: +ELLIPSIS
    T=/root/venvs/torch-2.11.0-cu130.building; [ -f "$T/.pvegpu-sync/cache-kb" ] || exit 0; ...
    """
    T = shlex.quote(f"{settings.build_venv}.building")
    cache = shlex.quote(settings.python_env.uv_cache_dir)
    return (
        f'T={T}; [ -f "$T/{CACHE_START}" ] || exit 0; '
        f'start=$(cat "$T/{CACHE_START}"); now=$(du -sk {cache} 2>/dev/null | cut -f1); '
        'n=$(ls -d "$T"/lib/python*/site-packages/*.dist-info 2>/dev/null | wc -l); '
        'echo "$((${now:-0} - ${start:-0})) $n"'
    )


def size_text(kib: int) -> str:
    """A size in KiB as a person reads it.

    >>> size_text(900), size_text(20480), size_text(5 * 1024 * 1024)
    ('900 KiB', '20.0 MiB', '5.0 GiB')
    """
    if kib < 1024:
        return f"{kib} KiB"
    if kib < 1024 * 1024:
        return f"{kib / 1024:.1f} MiB"
    return f"{kib / 1024 / 1024:.1f} GiB"


def build_progress_detail(packages: int):
    """-> a function turning :func:`build_progress_poll`'s output into the line's end: the phase
    (download until the first package is installed), what uv's cache received, and how many of
    the lock's ``packages`` are installed.

    >>> detail = build_progress_detail(23)
    >>> detail(["20480 0"])
    "download: 20.0 MiB into uv's cache so far, 0 of 23 packages installed"
    >>> detail(["512000 5"])
    "install: 5 of 23 packages installed (500.0 MiB into uv's cache)"
    >>> detail([])
    ''
    """

    def detail(lines: list[str]) -> str:
        fields = (lines[-1].split() if lines else []) + ["", ""]
        if not (fields[0].lstrip("-").isdigit() and fields[1].isdigit()):
            return ""
        size, installed = size_text(max(int(fields[0]), 0)), int(fields[1])
        if installed == 0:
            return f"download: {size} into uv's cache so far, 0 of {packages} packages installed"
        return f"install: {installed} of {packages} packages installed ({size} into uv's cache)"

    return detail


def compile_cache_pth(settings: Settings) -> str:
    """The ``.pth`` line pointing torch.compile's caches at the build's cache dirs (unless the
    environment already sets them)."""
    cache = settings.compile_cache_dir
    return (
        "import os; "
        f"os.environ.setdefault('TORCHINDUCTOR_CACHE_DIR', {cache + '/inductor'!r}); "
        f"os.environ.setdefault('TRITON_CACHE_DIR', {cache + '/triton'!r})\n"
    )


def build_script(settings: Settings, plan: LockPlan, python_version: str | None) -> str:
    """The one shell command that builds the selected build from scratch into ``<build>.next``.

    It starts from an empty ``.building`` dir, syncs the lock offline from uv's cache when the
    cache has everything (no index contacted), else checks the indexes answer and syncs online,
    then records the marker and renames the finished venv to ``.next``. Nothing outside
    ``.building``/``.next`` and uv's cache is touched.
    """
    V = settings.python_env.venvs_dir.rstrip("/")
    B = settings.build_venv
    T, N = f"{B}.building", f"{B}.next"
    uv = uv_bin(settings.python_env)
    env = uv_env(settings)
    reach = reach_command(settings)
    if has_credentials(settings.torch):
        env += f" NETRC={NETRC}"
        reach = f"NETRC={NETRC} {reach}"
    py = f"{T}/bin/python"
    pyproject, lock = f"{T}/.pvegpu-sync/pyproject.toml", f"{T}/{LOCK_FILE}"
    venv_argv = [uv, "venv", "--no-config", "--quiet", "--relocatable"]
    lines = [
        "set -e",
        f"mkdir -p {shlex.quote(V)} {shlex.quote(settings.python_env.uv_cache_dir)}",
        delete_command([T, N], venvs_dir=V),
        f"{env} " + quoted([*venv_argv, "--python", settings.python_env.interpreter, T]),
        f"mkdir {shlex.quote(T + '/.pvegpu-sync')}",
        # where uv's cache starts, for the progress lines (build_progress_poll)
        f"du -sk {shlex.quote(settings.python_env.uv_cache_dir)} | cut -f1 > "
        f"{shlex.quote(T + '/' + CACHE_START)}",
        gzip_write_command(lock, plan.text),
        gzip_write_command(pyproject, training_pyproject(settings, lock_requirements(plan.text))),
    ]
    offline = f"{env} {quoted(sync_argv(settings, uv, py, pyproject, lock, offline=True))}"
    online = f"{env} {quoted(sync_argv(settings, uv, py, pyproject, lock))}"
    lines += [
        f"if {offline} 2>/dev/null; then echo 'pvegpu: installed offline from uv'\"'\"'s cache' "
        ">&2;"
        f" else {reach}; {online}; fi",
    ]
    pth_b64 = base64.b64encode(compile_cache_pth(settings).encode()).decode()
    lines += [
        f"for d in {shlex.quote(T)}/lib/python*/site-packages; do "
        f'printf %s {pth_b64} | base64 -d > "$d/{CACHE_PTH}"; done',
        gzip_write_command(
            f"{T}/{MARKER}",
            json.dumps(marker(settings, plan, python_version), sort_keys=True) + "\n",
        ),
        f"mv {shlex.quote(T)} {shlex.quote(N)}",
    ]
    return "\n".join(lines)

"""Container-side operations for the python env: uv, one venv per torch build, the live link.

pyinfra's stock ``uv.venv`` does not fit here: it takes no package list per venv and checks
existence at another path than it creates. These own their fact (``ContainerState``); the layout
they manage is described in :mod:`pvegpu.venvs`, the locks in :mod:`pvegpu.locks`.

The stage, in order (tasks/python_env.py): ``uv_installed`` -> ``venv_built`` (a fresh build
beside the live one, as ``<build>.next``, only when needed) -> ``compile_caches`` ->
``venv_checked`` (the torch runtime check on ``.next``) -> ``venv_selected`` (promote ``.next``,
switch the links) -> ``venvs_pruned``. ``venv_matches_lock`` is the read-only drift check for
verify.py.

Every uv call: ``--no-config`` (no stray uv.toml can add an index or a torch backend), the
index-changing ``UV_*`` variables unset, ``--index-url <package_index_url>`` and the torch index
only as an *explicit* index that torch alone is bound to (a generated ``pyproject.toml``, see
:mod:`pvegpu.locks`): the torch index's stale copies of torch's dependencies are never used, and
PyPI's unlabeled torch, a CUDA 13 build, can never replace the variant. Never ``--torch-backend``
(``auto`` falls back to CPU wheels where no driver is visible). The lock is made on the controller
(locks on first use) and synced with ``--require-hashes``.

One composite fact per run and host: operations share the ``ContainerState`` document; it is read
again only after an operation of the run changed something (``container_state``), or patched by
the operation that made a change it knows exactly (``remember``).
"""

from __future__ import annotations

import base64
import gzip
import io
import json
import shlex

from gevent import subprocess as gevent_subprocess
from gevent.lock import Semaphore
from pyinfra import host, logger
from pyinfra.api import FunctionCommand, StringCommand, operation
from pyinfra.operations import files

from ..ct_reads import container_fact
from ..facts.probe import probe_command
from ..facts.python_env import ContainerState
from ..guard import delete_command, delete_refusal
from ..locks import (
    LockPlan,
    index_args,
    lock_plan,
    make_lock,
    netrc_text,
    parse_pins,
    redact,
    split_credentials,
    training_pyproject,
    uv_error,
    uv_wheel_hashes,
)
from ..settings import Settings
from ..unit import started_record, unit_file, unit_path
from ..venvs import (
    CACHE_PTH,
    LOCK_FILE,
    MARKER,
    SELECTED_FILE,
    build_reasons,
    drift,
    effective_python_version,
    marker,
    next_number,
    prune_plan,
    python_minor,
    real_name,
)
from .util import fail, note, run_point

#: Resolved locks of pin-only builds, by input sha256, so a rebuild needs no index (outside
#: venvs_dir: rebuild=venv deletes that).
LOCKS_CACHE = "/var/lib/pvegpu/resolved-locks"
#: The container's apt packages right after creation (operations.rebuild.baseline_recorded writes
#: it; the pollution report reads it). Its existence is part of the shared fact.
BASELINE = "/var/lib/pvegpu/baseline-packages"
#: Environment variables that would change what uv installs or from where; unset for every call.
UV_UNSET = (
    "UV_TORCH_BACKEND",
    "UV_INDEX",
    "UV_INDEX_URL",
    "UV_DEFAULT_INDEX",
    "UV_EXTRA_INDEX_URL",
    "UV_INDEX_STRATEGY",
    "UV_FIND_LINKS",
    "UV_NO_INDEX",
    "UV_CONSTRAINT",
    "UV_OVERRIDE",
    "UV_PRERELEASE",
    "UV_RESOLUTION",
    "UV_EXCLUDE_NEWER",
    "UV_CONFIG_FILE",
    "UV_OFFLINE",
    "UV_PYTHON",
    "UV_SYSTEM_PYTHON",
    "UV_LINK_MODE",
    "VIRTUAL_ENV",
)


def uv_home(settings: Settings) -> str:
    return f"/opt/pvegpu/uv-{settings.uv_version}"


def uv_bin(settings: Settings) -> str:
    """Where the pinned uv lives in the container (its own directory, one per version)."""
    return f"{uv_home(settings)}/bin/uv"


# --- the shared fact --------------------------------------------------------------------------
_CACHE_ATTR = "_pvegpu_container_state"


def container_state_args(settings: Settings) -> dict:
    """The ``ContainerState`` fact's arguments for ``settings``."""
    return dict(
        uv_bin=uv_bin(settings),
        venvs_dir=settings.venvs_dir,
        venv_path=settings.venv_path,
        unit_path=unit_path(settings),
        unit_name=unit_file(settings),
        cache_dir=settings.compile_cache_dir,
        started_path=started_record(settings),
        python=settings.python_interpreter,
        uv_cache_dir=settings.uv_cache_dir,
        locks_cache=LOCKS_CACHE,
        baseline_path=BASELINE,
    )


def container_state(settings: Settings) -> dict:
    """The ``ContainerState`` document, read at most once between changes of this run (served
    from the preflight's node read while nothing ran: pvegpu.ct_reads)."""
    point = run_point(host)
    cached = getattr(host, _CACHE_ATTR, None)
    if cached and cached[0] == point:
        return cached[1]
    doc = container_fact(host, ContainerState, **container_state_args(settings))
    setattr(host, _CACHE_ATTR, (point, doc))
    return doc


def remember(update) -> None:
    """After an operation's last command ran: apply ``update(doc)`` to the cached document and
    keep it valid past this operation's own completion (it knows exactly what it changed)."""
    cached = getattr(host, _CACHE_ATTR, None)
    if not cached:
        return
    update(cached[1])
    point = run_point(host)
    setattr(host, _CACHE_ATTR, ((point[0], point[1], point[2] + 1), cached[1]))


# --- uv command lines (pure; tests run them against the loopback index) ----------------------
def uv_env(settings: Settings) -> str:
    """Environment prefix of every uv call: cache beside the venvs, no Python downloads, and
    nothing from the environment that could change the indexes or the torch backend."""
    unset = " ".join(f"-u {k}" for k in UV_UNSET)
    return (
        f"env {unset} UV_CACHE_DIR={shlex.quote(settings.uv_cache_dir)} "
        "UV_PYTHON_DOWNLOADS=never UV_NO_PROGRESS=1"
    )


def sync_argv(
    settings: Settings, uv: str, python: str, pyproject: str, lock: str, offline: bool = False
) -> list[str]:
    """``uv pip sync`` of a hashed lock: exactly its packages, anything else removed.

    The requirements are the lock's pins in a pyproject that binds torch to the explicit torch
    index (``training_pyproject``); the lock itself is the constraints file that carries the
    hashes, and ``--require-hashes`` refuses any file whose hash is not in it.
    """
    return [
        uv,
        "pip",
        "sync",
        "--no-config",
        "--quiet",
        "--require-hashes",
        "--python",
        python,
        *index_args(settings),
        "--constraints",
        lock,
        *(["--offline"] if offline else []),
        pyproject,
    ]


def lock_requirements(lock_text: str) -> list[str]:
    """The lock's pins as requirement strings, for the sync's pyproject.

    >>> lock_requirements("torch==2.11.0+cu130 \\\\\\n    --hash=sha256:00\\nfilelock==3.20.0\\n")
    ['filelock==3.20.0', 'torch==2.11.0+cu130']
    """
    return [f"{name}=={version}" for name, version in sorted(parse_pins(lock_text).items())]


def _q(argv: list[str]) -> str:
    return " ".join(shlex.quote(a) for a in argv)


def _file(path: str, text: str) -> str:
    payload = base64.b64encode(gzip.compress(text.encode(), mtime=0)).decode()
    return f"printf %s {payload} | base64 -d | gzip -dc > {shlex.quote(path)}"


# The URLs it gets carry no credentials; those come from $NETRC (as for uv), so no token is in
# an argv or part of a host name to resolve.
REACH = (
    "import base64, netrc, os, sys, urllib.parse as p, urllib.request as u\n"
    "for arg in sys.argv[1:]:\n"
    "    key, _, url = arg.partition('=')\n"
    "    req = u.Request(url.rstrip('/') + '/', method='HEAD')\n"
    "    try:\n"
    "        auth = netrc.netrc(os.environ['NETRC']).authenticators(p.urlsplit(url).hostname)\n"
    "    except (KeyError, OSError, netrc.NetrcParseError):\n"
    "        auth = None\n"
    "    if auth:\n"
    "        tok = base64.b64encode(f'{auth[0]}:{auth[2]}'.encode()).decode()\n"
    "        req.add_header('Authorization', 'Basic ' + tok)\n"
    "    try:\n"
    "        u.urlopen(req, timeout=20).close()\n"
    "    except u.HTTPError as e:\n"
    "        if e.code in (401, 403):\n"
    "            print(f'pvegpu: {key}={url} refused the credentials (HTTP {e.code}): '\n"
    "                  f'fix the user:token in {key}', file=sys.stderr)\n"
    "            sys.exit(1)\n"
    "    except Exception as e:\n"
    "        r = getattr(e, 'reason', e)\n"
    "        print(f'pvegpu: {key}={url} is not reachable from the container ({r}): '\n"
    "              f'fix {key} or start the index/mirror', file=sys.stderr)\n"
    "        sys.exit(1)\n"
)


#: Where the index credentials live in the container while pvegpu needs them (mode 0600; the
#: netrc uv reads through $NETRC): never in a command line.
NETRC = "/root/.config/pvegpu/netrc"


def has_credentials(settings: Settings) -> bool:
    return any(
        split_credentials(u)[1] for u in (settings.package_index_url, settings.torch_index_url)
    )


def reach_command(settings: Settings) -> str:
    """The container-side check that both indexes answer (URLs without credentials)."""
    package, _ = split_credentials(settings.package_index_url)
    torch, _ = split_credentials(settings.torch_index_url)
    return (
        f"{shlex.quote(settings.python_interpreter)} -c {shlex.quote(REACH)} "
        f"{shlex.quote('package_index_url=' + package)} "
        f"{shlex.quote('torch_index_base=' + torch)}"
    )


def build_script(settings: Settings, plan: LockPlan, python_version: str | None) -> str:
    """The one shell command that builds the selected build from scratch into ``<build>.next``.

    It starts from an empty ``.building`` dir, syncs the lock offline from uv's cache when the
    cache has everything (no index contacted), else checks the indexes answer and syncs online,
    then records the marker and renames the finished venv to ``.next``. Nothing outside
    ``.building``/``.next`` and uv's cache is touched.
    """
    V = settings.venvs_dir.rstrip("/")
    B = settings.build_venv
    T, N = f"{B}.building", f"{B}.next"
    uv = uv_bin(settings)
    env = uv_env(settings)
    reach = reach_command(settings)
    if has_credentials(settings):
        env += f" NETRC={NETRC}"
        reach = f"NETRC={NETRC} {reach}"
    py = f"{T}/bin/python"
    pyproject, lock = f"{T}/.pvegpu-sync/pyproject.toml", f"{T}/{LOCK_FILE}"
    lines = [
        "set -e",
        f"mkdir -p {shlex.quote(V)} {shlex.quote(settings.uv_cache_dir)}",
        delete_command([T, N], venvs_dir=V),
        f"{env} "
        + _q(
            [
                uv,
                "venv",
                "--no-config",
                "--quiet",
                "--relocatable",
                "--python",
                settings.python_interpreter,
                T,
            ]
        ),
        f"mkdir {shlex.quote(T + '/.pvegpu-sync')}",
        _file(lock, plan.text),
        _file(pyproject, training_pyproject(settings, lock_requirements(plan.text))),
    ]
    offline = f"{env} {_q(sync_argv(settings, uv, py, pyproject, lock, offline=True))}"
    online = f"{env} {_q(sync_argv(settings, uv, py, pyproject, lock))}"
    lines += [
        f"if {offline} 2>/dev/null; then echo 'pvegpu: installed offline from uv'\"'\"'s cache' "
        ">&2;"
        f" else {reach}; {online}; fi",
    ]
    cache = settings.compile_cache_dir
    pth = (
        "import os; "
        f"os.environ.setdefault('TORCHINDUCTOR_CACHE_DIR', {cache + '/inductor'!r}); "
        f"os.environ.setdefault('TRITON_CACHE_DIR', {cache + '/triton'!r})\n"
    )
    pth_b64 = base64.b64encode(pth.encode()).decode()
    lines += [
        f"for d in {shlex.quote(T)}/lib/python*/site-packages; do "
        f'printf %s {pth_b64} | base64 -d > "$d/{CACHE_PTH}"; done',
        _file(
            f"{T}/{MARKER}",
            json.dumps(marker(settings, plan, python_version), sort_keys=True) + "\n",
        ),
        f"mv {shlex.quote(T)} {shlex.quote(N)}",
    ]
    return "\n".join(lines)


# --- running a step with one clear line on failure -----------------------------------------------


def remote_step(
    what: str,
    script: str,
    fix: str,
    notes: tuple[str, ...] = (),
    hints: dict[str, str] | None = None,
) -> FunctionCommand:
    """Run ``script`` on the host; on failure log one line: what failed, why, and the fix
    (``hints``: a fix that replaces it when the reason contains the key)."""

    def step(state, host):
        for line in notes:
            host.log_styled(line, fg="yellow", log_func=logger.warning)
        status, output = host.run_shell_command(
            StringCommand(script),
            print_output=state.print_output,
            print_input=state.print_input,
        )
        lines = [o.line for o in output.combined_lines]
        ours = [line.split("pvegpu: ", 1)[1] for line in lines if "pvegpu: " in line]
        if status:
            for line in ours:
                host.log_styled(line, fg="cyan", log_func=logger.info)
            return True
        for line in lines:
            logger.debug(f"{host.name}: {redact(line)}")
        reason = (
            (ours[-1] if ours else None)
            or uv_error(lines)
            or next((line.strip() for line in reversed(lines) if line.strip()), "no output")
        )
        fix_now = next((h for key, h in (hints or {}).items() if key in reason), fix)
        host.log_styled(
            redact(f"{what} failed: {reason}; {fix_now}"), fg="red", log_func=logger.error
        )
        return False

    return FunctionCommand(step, (), {})


# --- operations ---------------------------------------------------------------------------------
def index_credentials(settings: Settings) -> None:
    """Put the indexes' credentials (from ``user:token@`` in ``package_index_url`` or
    ``torch_index_base``) into the container as a 0600 netrc at ``NETRC``, for uv (``$NETRC``)
    and pvegpu's own index checks: a file transfer (``pct push``), never a command line. Nothing
    happens when no URL carries credentials.

    .. code:: python

        python_env.index_credentials(s)  # from tasks/python_env.py
    """
    text = netrc_text(settings)
    if not text:
        return
    files.put(
        name="Index credentials for uv in the container (netrc, mode 600)",
        src=io.StringIO(text),
        dest=NETRC,
        mode="600",
        create_remote_dir=True,
    )


@operation()
def uv_installed(settings: Settings):
    """Install the pinned uv from ``package_index_url`` into its own directory (never `curl | sh`,
    no pip needed): the wheel whose sha256 the project's uv.lock pins. Upgraded only when the pin
    changes.

    .. code:: python

        python_env.uv_installed(name="Install uv 0.13.9", settings=s)
    """
    state = container_state(settings)
    if state.get("uv_version") == settings.uv_version:
        return
    args = {
        "version": settings.uv_version,
        "index": split_credentials(settings.package_index_url)[0],
        "home": uv_home(settings),
        "hashes": uv_wheel_hashes(settings.uv_version),
        "link": "/usr/local/bin/uv",
        "netrc": NETRC if has_credentials(settings) else None,
    }
    yield remote_step(
        f"installing uv {settings.uv_version}",
        probe_command("install_uv", args, python=settings.python_interpreter),
        "the live venv is untouched",
    )


def _python_problem(state: dict, settings: Settings) -> str | None:
    found = (state.get("python") or {}).get("version")
    if not found:
        return (
            f"python_interpreter={settings.python_interpreter} does not run in the container: "
            "install it (apt install python3) or set python_interpreter"
        )
    want = settings.python_version
    if want is not None and found != want and python_minor(found) != want:
        return (
            f"python_interpreter={settings.python_interpreter} is Python {found}, "
            f"python_version={want}: point python_interpreter at a Python {want} or set "
            f"python_version={python_minor(found)} (and make the locks for it)"
        )
    return None


_MAKING = Semaphore()


def controller_lock(settings: Settings, python_version: str) -> LockPlan:
    """The lock for ``python_version``, made now on the controller if no host of this run made
    it yet (hosts run concurrently: one makes it, the others read it). Prints what it wrote."""
    with _MAKING:
        plan = make_lock(settings, python_version, run=gevent_subprocess.run)
    if plan.made:
        host.log_styled(
            f"wrote {plan.source} ({plan.reason}; made on this machine from the configured "
            "indexes): commit it; later deploys install exactly its files",
            fg="yellow",
            log_func=logger.warning,
        )
    return plan


@operation()
def venv_built(settings: Settings):
    """Build the selected build's venv from scratch, beside the live one, when it is missing,
    stale (another lock, python or compile cache dir) or drifted from its lock (extra, missing,
    wrong version, wrong variant: reported, then repaired by the fresh build).

    .. code:: python

        python_env.venv_built(name="Build venv torch-2.11.0-cu130", settings=s)

    The build goes into ``<build>.building`` and becomes ``<build>.next`` only when every step
    succeeded; ``venv_selected`` switches to it after its check. A failed or interrupted build
    never touches the live venv; the next run starts it again from scratch. Unchanged locks are
    installed offline from uv's cache (on the venvs' filesystem, so files are hard-linked).
    """
    state = container_state(settings)
    if not state:
        yield fail(f"{settings.venvs_dir}: the container's state could not be read: run deploy.py")
        return
    problem = _python_problem(state, settings)
    if problem:
        yield fail(problem)
        return
    python_version = effective_python_version(settings, state)
    plan = lock_plan(settings, python_version)  # type: ignore[arg-type]  # a version was found
    if plan.error:
        yield fail(plan.error)
        return
    if plan.kind == "make":
        if not host.state.is_executing:
            yield note(f"{plan.reason}: the deploy makes it on this machine")  # the preview
            return
        plan = controller_lock(settings, python_version)  # type: ignore[arg-type]
        if plan.error:
            yield fail(plan.error)
            return
    reasons = build_reasons(state, settings, plan)
    if settings.rebuild == "venv" and not reasons:
        # Built beside the live one like any build; the old builds go only after the switch.
        reasons = [f"rebuild=venv: a fresh {settings.build_name} from scratch"]
    if not reasons:
        return
    live = state.get("venv_link") or "(none)"
    notes = [
        f"{settings.build_name} needs a build: {r}" if not r.startswith(settings.build_name) else r
        for r in reasons
    ]
    if state.get("uv_cache_same_fs") is False:
        notes.append(
            f"uv_cache_dir={settings.uv_cache_dir} is on another filesystem than "
            f"venvs_dir={settings.venvs_dir}: installs copy instead of hard-linking"
        )
    yield remote_step(
        f"building {settings.build_venv}.next",
        build_script(settings, plan, (state.get("python") or {}).get("version")),
        f"{settings.venv_path} still points at {live}, untouched; fix it and run deploy.py again "
        "(the build restarts from scratch)",
        tuple(notes),
        {
            "Hash mismatch": (
                f"the index serves another file than {plan.source} records: refused; "
                f"{settings.venv_path} still points at {live}, untouched; find out why the index "
                "changed a released file (never edit the lock to match it)"
            )
        },
    )


@operation()
def compile_caches(settings: Settings):
    """Create the selected build's torch.compile caches under the data mount
    (``<data_dir_ct>/cache/torch-<version>-<variant>/{inductor,triton}``); never deletes any.

    .. code:: python

        python_env.compile_caches(name="Compile caches for torch-2.11.0-cu130", settings=s)
    """
    state = container_state(settings)
    dirs = state.get("compile_cache_dirs") or {}
    if dirs.get("inductor") and dirs.get("triton"):
        return
    cache = shlex.quote(settings.compile_cache_dir)
    yield f"mkdir -p {cache}/inductor {cache}/triton"
    remember(
        lambda doc: doc.update(
            cache_dir_exists=True, compile_cache_dirs={"inductor": True, "triton": True}
        )
    )


@operation()
def venv_checked(settings: Settings):
    """Run the torch runtime check (``checks.torch_runtime``) on a new build (``<build>.next``)
    before anything switches to it; nothing to do when no new build waits.

    .. code:: python

        python_env.venv_checked(name="Check torch in the new build", settings=s)
    """
    state = container_state(settings)
    if f"{settings.build_name}.next" not in (state.get("venvs") or {}):
        return
    from . import checks  # here: operations.checks imports this module

    yield from checks.torch_runtime._inner(
        python=f"{settings.build_venv}.next/bin/python",
        settings=settings,
    )


@operation()
def venv_selected(settings: Settings):
    """Make the selected build live: promote a checked new build (``.next`` -> ``.b<n>``, then
    rename a temp link over the build's link), and point ``venv_path`` at the build the same way.
    Each switch is one ``rename()``: the live venv is never missing or half-built.

    .. code:: python

        python_env.venv_selected(name="Switch /root/venv to torch-2.11.0-cu130", settings=s)
    """
    state = container_state(settings)
    venvs = state.get("venvs") or {}
    build, B = settings.build_name, settings.build_venv
    V = settings.venvs_dir.rstrip("/")
    link = settings.venv_path
    cmds, real = [], (venvs.get(build) or {}).get("real")
    promoted = f"{build}.next" in venvs
    if promoted:
        real = real_name(build, next_number(venvs, build))
        cmds.append(f"mv -T {shlex.quote(B + '.next')} {shlex.quote(V + '/' + real)}")
        cmds.append(f"ln -sfn {shlex.quote(real)} {shlex.quote(B + '.pvegpu-tmp')}")
        cmds.append(f"mv -T {shlex.quote(B + '.pvegpu-tmp')} {shlex.quote(B)}")
    switch = state.get("venv_link") != B
    if switch and state.get("venv_path_is_dir"):
        # A hand-made venv at the stable path: keep it aside rather than deleting anything.
        cmds.append(f"mv -T {shlex.quote(link)} {shlex.quote(link)}.pre-pvegpu.$(date +%s)")
    if switch or promoted:
        cmds.append(f"touch {shlex.quote(B + '/' + SELECTED_FILE)}")
    if switch:
        cmds.append(f"ln -sfn {shlex.quote(B)} {shlex.quote(link + '.pvegpu-tmp')}")
        cmds.append(f"mv -T {shlex.quote(link + '.pvegpu-tmp')} {shlex.quote(link)}")
    if not cmds:
        return
    yield StringCommand(" && ".join(cmds))

    def update(doc):
        vs = doc.setdefault("venvs", {})
        if promoted:
            entry = dict(vs.pop(f"{build}.next"), path=f"{V}/{real}")
            vs[real] = entry
        vs[build] = dict(vs.get(real) or {}, link=real, real=real)
        doc.update(venv_link=B, venv_real=f"{V}/{real}", venv_path_is_dir=False)

    remember(update)


@operation()
def venvs_pruned(settings: Settings):
    """Delete builds beyond ``keep_venvs`` (the selected one counts; the most recently selected
    others are kept for instant rollback), superseded rebuilds and leftovers of failed builds.
    Never the live venv, never one a running process uses, never anything pvegpu did not make.

    .. code:: python

        python_env.venvs_pruned(name="Keep 2 venv builds", settings=s)
    """
    state = container_state(settings)
    remove, in_use = prune_plan(state, settings)
    for name in in_use:
        pids = ", ".join(str(p) for p in (state["venvs"][name].get("in_use") or []))
        host.log_styled(
            f"keeping {settings.venvs_dir}/{name}: in use by pid {pids}",
            fg="yellow",
            log_func=logger.warning,
        )
    if not remove:
        return
    V = settings.venvs_dir.rstrip("/")
    for name in [n for n in remove if delete_refusal(f"{V}/{n}", V)]:
        remove.remove(name)  # not a name pvegpu gives builds: never deleted
        host.log_styled(
            f"keeping {V}/{name}: not a pvegpu build name", fg="yellow", log_func=logger.warning
        )
    if not remove:
        return
    yield StringCommand(delete_command([f"{V}/{name}" for name in remove], venvs_dir=V))
    remember(lambda doc: [doc.get("venvs", {}).pop(name, None) for name in remove])


def drift_report(state: dict, settings: Settings) -> list[str]:
    """One line per difference between the live venv and the lock it was built from (empty when
    it matches). Pure: give it a ``ContainerState`` document."""
    real = (state.get("venv_real") or "").rstrip("/").rsplit("/", 1)[-1]
    entry = (state.get("venvs") or {}).get(real) if real else None
    if not entry:
        return []  # no live venv: the torch runtime check says so
    where = f"{settings.venv_path} ({real})"
    if entry.get("locked") is None:
        return [
            f"{where} records no lock ({LOCK_FILE}): it was not built by this pvegpu; "
            "run deploy.py to rebuild it from the lock"
        ]
    return [
        f"{where}: {line}" for line in drift(entry.get("installed") or {}, entry["locked"]).lines()
    ]


@operation()
def venv_matches_lock(settings: Settings):
    """Fail, changing nothing, when the live venv's packages differ from its lock (extra,
    missing, wrong version, wrong variant). For verify.py; deploy.py repairs instead.

    .. code:: python

        python_env.venv_matches_lock(name="Check /root/venv has exactly its lock's packages",
                                     settings=s)
    """
    lines = drift_report(container_state(settings), settings)
    if lines:
        yield fail(
            *lines,
            "fix: run deploy.py (it rebuilds the venv from its lock beside the "
            "live one and switches to it)",
        )

"""Container-side operations for the python env: uv, one venv per torch build, the live link.

pyinfra's stock ``uv.venv`` does not fit here: it takes no package list per venv and checks
existence at another path than it creates. These own their fact (``ContainerState``); the layout
they manage is described in :mod:`pvegpu.plan.venvs`, the locks in :mod:`pvegpu.locks`.

The stage, in order (tasks/python_env.py): ``uv_installed`` -> ``venv_built`` (a fresh build
beside the live one, as ``<build>.next``, only when needed) -> ``compile_caches`` ->
``venv_checked`` (the torch runtime check on ``.next``) -> ``venv_promoted`` (``.next`` becomes
the build, ``<venvs_dir>/<build>``). Verify then checks that build, and only then does
``venv_path`` switch to it, in the training unit stage's one command with the unit
(``live_switch``, :func:`pvegpu.operations.training.live_build_and_unit`), followed by
``venvs_pruned``. ``venv_matches_lock`` is the read-only drift check for verify.py.

Where the parts live: uv command lines in :mod:`pvegpu.plan.uv_commands` (every uv call
``--no-config``, the index-changing ``UV_*`` variables unset, torch bound to its explicit index,
never ``--torch-backend``), the build script in :mod:`pvegpu.plan.venv_build`, the pure decisions
(what to build, drift, pruning) in :mod:`pvegpu.plan.venvs`, the shared ``ContainerState``
document in :mod:`pvegpu.operations.container_fact`. The lock is made on the controller (locks
on first use) and synced with ``--require-hashes``.
"""

from __future__ import annotations

import shlex

from gevent import subprocess as gevent_subprocess
from gevent.lock import Semaphore
from pyinfra import host, logger
from pyinfra.api import StringCommand, operation

from ..facts.probe import probe_command
from ..guard import delete_command, delete_refusal
from ..locks import (
    LockPlan,
    lock_plan,
    make_lock,
    parse_pins,
    split_credentials,
    uv_wheel_hashes,
)
from ..plan.unit import BUILD_ENV, digest, render_build_env
from ..plan.uv_commands import NETRC, has_credentials, site_assignments, uv_home
from ..plan.venv_build import build_progress_detail, build_progress_poll, build_script
from ..plan.venvs import (
    SELECTED_FILE,
    aside_path,
    build_reasons,
    drift_report,
    effective_python_version,
    next_number,
    prune_plan,
    python_problem,
    real_name,
)
from ..run.ct_reads import change_then_read
from ..run.run_context import mark_container_only
from ..settings import GpuSettings, PythonEnvSettings, Settings, TorchSettings
from .build_preview import build_notes, show_packages
from .checks import torch_runtime
from .container_fact import container_state, remember, state_reads
from .folded_reads import verification_reads_of
from .preview import show
from .progress import Progress
from .remote_step import remote_step
from .util import failure, note, write_file_command


@operation()
def uv_installed(
    python_env: PythonEnvSettings, torch: TorchSettings, settings: Settings | None = None
):
    """Install the pinned uv (``python_env.uv_version``) from ``torch.package_index_url`` into
    its own directory (never `curl | sh`, no pip needed), run by ``python_env.interpreter``: the
    wheel whose sha256 the project's uv.lock pins. Upgraded only when the pin changes.

    .. code:: python

        python_env.uv_installed(name="Install uv 0.13.9", python_env=s.python_env, torch=s.torch)
    """
    mark_container_only(host)
    state = container_state()
    if state.get("uv_version") == python_env.uv_version:
        return
    args = {
        "version": python_env.uv_version,
        "index": split_credentials(torch.package_index_url)[0],
        "home": uv_home(python_env),
        "hashes": uv_wheel_hashes(python_env.uv_version),
        "link": "/usr/local/bin/uv",
        "netrc": NETRC if has_credentials(torch) else None,
    }
    site = site_assignments(settings) if settings is not None else ""
    yield remote_step(
        f"installing uv {python_env.uv_version}",
        (f"{site} " if site else "")
        + probe_command("install_uv", args, python=python_env.interpreter),
        "the live venv is untouched",
        # the build reads the container's state next: read in the same command, right after
        reads=state_reads(settings) if settings is not None else (),
    )


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
    wrong version, wrong variant: reported, then repaired by the fresh build). Takes the whole
    ``settings``: the lock plan and the build script follow the torch, python env, container
    (compile cache) and policy (``rebuild=venv``) parts.

    .. code:: python

        python_env.venv_built(name="Build venv torch-2.11.0-cu130", settings=s)

    The build goes into ``<build>.building`` and becomes ``<build>.next`` only when every step
    succeeded; ``venv_promoted`` makes it the build after its check. A failed or interrupted build
    never touches the live venv; the next run starts it again from scratch. Unchanged locks are
    installed offline from uv's cache (on the venvs' filesystem, so files are hard-linked).
    """
    state = container_state()
    if not state:
        yield from failure(
            f"{settings.python_env.venvs_dir}: the container's state could not be read: "
            "run deploy.py"
        )
        return
    problem = python_problem(state, settings.python_env)
    if problem:
        yield from failure(problem)
        return
    python_version = effective_python_version(settings.python_env, state)
    plan = lock_plan(settings, python_version)  # type: ignore[arg-type]  # a version was found
    if plan.error:
        yield from failure(plan.error)
        return
    if plan.kind == "make":
        if not host.state.is_executing:  # the preview
            show(f"{plan.reason}: the deploy makes it on this machine, then builds from it")
            yield note(f"{plan.reason}: the deploy makes it on this machine")
            return
        plan = controller_lock(settings, python_version)  # type: ignore[arg-type]
        if plan.error:
            yield from failure(plan.error)
            return
    reasons = build_reasons(state, settings, plan)
    if settings.policy.rebuild == "venv" and not reasons:
        # Built beside the live one like any build; the old builds go only after the switch.
        reasons = [f"rebuild=venv: a fresh {settings.torch.build_name} from scratch"]
    if not reasons:
        return
    live = state.get("venv_link") or "(none)"
    notes = build_notes(state, settings, reasons)
    show_packages(state, settings, parse_pins(plan.text or ""), notes)
    yield remote_step(
        f"building {settings.build_venv}.next",
        build_script(settings, plan, (state.get("python") or {}).get("version")),
        f"{settings.python_env.venv_path} still points at {live}, untouched; fix it and run "
        "deploy.py again (the build restarts from scratch)",
        tuple(notes),
        {
            "Hash mismatch": (
                f"the index serves another file than {plan.source} records: refused; "
                f"{settings.python_env.venv_path} still points at {live}, untouched; find out why "
                "the index changed a released file (never edit the lock to match it)"
            )
        },
        Progress(
            f"building {settings.build_venv}.next",
            settings.policy.progress_interval_s,
            poll=build_progress_poll(settings),
            detail=build_progress_detail(len(parse_pins(plan.text))),
        ),
        # the compile caches read the container's state next: in the same command, right after
        state_reads(settings),
    )


@operation()
def compile_caches(cache_dir: str):
    """Create the selected build's torch.compile caches, ``cache_dir``/{inductor,triton}
    (``Settings.compile_cache_dir``: ``<data_dir_ct>/cache/torch-<version>-<variant>``, under the
    data mount); never deletes any.

    .. code:: python

        python_env.compile_caches(name="Compile caches for torch-2.11.0-cu130",
                                  cache_dir=s.compile_cache_dir)
    """
    mark_container_only(host)
    state = container_state()
    dirs = state.get("compile_cache_dirs") or {}
    if dirs.get("inductor") and dirs.get("triton"):
        return
    cache = shlex.quote(cache_dir)
    yield f"mkdir -p {cache}/inductor {cache}/triton"
    remember(
        lambda doc: doc.update(
            cache_dir_exists=True, compile_cache_dirs={"inductor": True, "triton": True}
        )
    )


@operation()
def venv_checked(torch: TorchSettings, python_env: PythonEnvSettings, gpus: GpuSettings):
    """Run the torch runtime check (``checks.torch_runtime``: the ``torch`` build on every one
    of ``gpus``) on a new build (``<build>.next`` in ``python_env.venvs_dir``) before anything
    switches to it; nothing to do when no new build waits.

    .. code:: python

        python_env.venv_checked(name="Check torch in the new build", torch=s.torch,
                                python_env=s.python_env, gpus=s.gpus)
    """
    state = container_state()
    if f"{torch.build_name}.next" not in (state.get("venvs") or {}):
        return
    yield from torch_runtime._inner(
        python=f"{python_env.build_venv(torch.build_name)}.next/bin/python",
        torch=torch,
        gpus=gpus,
    )


def promotion(
    state: dict, torch: TorchSettings, python_env: PythonEnvSettings, env_text: str | None = None
):
    """(commands, update of the container document) that promote a checked new build
    (``<build>.next`` -> ``<build>.b<n>``, its training settings file ``env_text`` written into
    it, then a temp link renamed over the build's link ``<venvs_dir>/<build>``); ([], None) when
    no new build waits. The build's link never points at a build without its settings (the live
    build repaired: the unit may start from it at any time). ``venv_path`` is not touched:
    ``live_switch`` points it at the build once verify has accepted it.

    >>> from pvegpu.settings import Settings, defaults
    >>> s = Settings.from_data(defaults())
    >>> promotion({"venvs": {}}, s.torch, s.python_env)
    ([], None)
    """
    venvs = state.get("venvs") or {}
    build = torch.build_name
    if f"{build}.next" not in venvs:
        return [], None
    B = python_env.build_venv(build)
    V = python_env.venvs_dir.rstrip("/")
    real = real_name(build, next_number(venvs, build))
    cmds = [f"mv -T {shlex.quote(B + '.next')} {shlex.quote(V + '/' + real)}"]
    if env_text is not None:
        cmds.append(str(write_file_command(f"{V}/{real}/{BUILD_ENV}", env_text, mode="0644")))
    cmds += [
        f"ln -sfn {shlex.quote(real)} {shlex.quote(B + '.pvegpu-tmp')}",
        f"mv -T {shlex.quote(B + '.pvegpu-tmp')} {shlex.quote(B)}",
    ]
    if state.get("venv_link") == B:
        # the live build repaired: venv_path reaches the new build through its link from now on
        cmds.append(f"touch {shlex.quote(B + '/' + SELECTED_FILE)}")

    def update(doc):
        vs = doc.setdefault("venvs", {})
        vs[real] = dict(vs.pop(f"{build}.next"), path=f"{V}/{real}")
        if env_text is not None:
            vs[real]["train_env"] = digest(env_text)
        vs[build] = dict(vs[real], link=real, real=real)
        if doc.get("venv_link") == B:
            doc.update(venv_real=f"{V}/{real}")

    return cmds, update


def live_switch(state: dict, torch: TorchSettings, python_env: PythonEnvSettings, now: float):
    """(commands, update of the container document) that point ``venv_path`` at the selected
    build's link by one ``rename()`` of a temp link (the live venv is never missing or
    half-built); ([], None) when it points there already. A hand-made venv directory at
    ``venv_path`` is moved aside (:func:`pvegpu.plan.venvs.aside_path` at ``now``), never deleted.

    >>> from pvegpu.settings import Settings, defaults
    >>> s = Settings.from_data(defaults())
    >>> live_switch({"venv_link": s.build_venv}, s.torch, s.python_env, 0)
    ([], None)
    """
    B = python_env.build_venv(torch.build_name)
    if state.get("venv_link") == B:
        return [], None
    link = python_env.venv_path
    cmds = []
    if state.get("venv_path_is_dir"):
        cmds.append(f"mv -T {shlex.quote(link)} {shlex.quote(aside_path(link, now))}")
    cmds += [
        f"touch {shlex.quote(B + '/' + SELECTED_FILE)}",
        f"ln -sfn {shlex.quote(B)} {shlex.quote(link + '.pvegpu-tmp')}",
        f"mv -T {shlex.quote(link + '.pvegpu-tmp')} {shlex.quote(link)}",
    ]
    real = ((state.get("venvs") or {}).get(torch.build_name) or {}).get("real")
    V = python_env.venvs_dir.rstrip("/")

    def update(doc):
        doc.update(venv_link=B, venv_real=f"{V}/{real}" if real else None, venv_path_is_dir=False)

    return cmds, update


@operation()
def venv_promoted(settings: Settings):
    """Promote a checked new build of the selected torch build (``promotion``, with its
    training settings file); nothing to do when none waits. The live venv (``venv_path``) is
    switched only after verify (``pvegpu.operations.training.live_build_and_unit``). Takes the
    whole ``settings``: the build's settings file follows the torch, container and training
    parts.

    .. code:: python

        python_env.venv_promoted(name="Promote the new torch-2.11.0-cu130 build", settings=s)
    """
    mark_container_only(host)
    cmds, update = promotion(
        container_state(), settings.torch, settings.python_env, render_build_env(settings)
    )
    if not cmds:
        return
    # verify reads the new build next: in the same pct exec, right after the promotion
    yield change_then_read(host, " && ".join(cmds), verification_reads_of(host))
    remember(update)


@operation()
def venvs_pruned(torch: TorchSettings, python_env: PythonEnvSettings):
    """Delete builds in ``python_env.venvs_dir`` beyond ``keep_venvs`` (the selected one,
    ``torch.build_name``, counts; the most recently selected others are kept for instant
    rollback), superseded rebuilds and leftovers of failed builds. Never the live venv, never one
    a running process uses, never anything pvegpu did not make.

    .. code:: python

        python_env.venvs_pruned(name="Keep 2 venv builds", torch=s.torch, python_env=s.python_env)
    """
    mark_container_only(host)
    state = container_state()
    remove, in_use = prune_plan(state, torch.build_name, python_env.keep_venvs)
    for name in in_use:
        pids = ", ".join(str(p) for p in (state["venvs"][name].get("in_use") or []))
        host.log_styled(
            f"keeping {python_env.venvs_dir}/{name}: in use by pid {pids}",
            fg="yellow",
            log_func=logger.warning,
        )
    if not remove:
        return
    V = python_env.venvs_dir.rstrip("/")
    for name in [n for n in remove if delete_refusal(f"{V}/{n}", V)]:
        remove.remove(name)  # not a name pvegpu gives builds: never deleted
        host.log_styled(
            f"keeping {V}/{name}: not a pvegpu build name", fg="yellow", log_func=logger.warning
        )
    if not remove:
        return
    yield StringCommand(delete_command([f"{V}/{name}" for name in remove], venvs_dir=V))
    remember(lambda doc: [doc.get("venvs", {}).pop(name, None) for name in remove])


@operation()
def venv_matches_lock(settings: Settings):
    """Fail, changing nothing, when the live venv's packages differ from its lock (extra,
    missing, wrong version, wrong variant). For verify.py; deploy.py repairs instead. Takes the
    whole ``settings``: which lock applies follows the torch and python env parts.

    .. code:: python

        python_env.venv_matches_lock(name="Check /root/venv has exactly its lock's packages",
                                     settings=s)
    """
    lines = drift_report(container_state(), settings)
    if lines:
        yield from failure(
            *lines,
            "fix: run deploy.py (it rebuilds the venv from its lock beside the "
            "live one and switches to it)",
        )

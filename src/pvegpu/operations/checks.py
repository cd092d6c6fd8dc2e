"""Operations that only observe: they yield nothing when the facts match (no change) and fail
the host with one clear line per problem when they do not."""

from __future__ import annotations

import click
import gevent
from pyinfra import host, logger
from pyinfra.api import operation

from ..facts.torch import TorchRuntime
from ..facts.verification import ContainerVerification
from ..locks import lock_plan, parse_pins
from ..output.report import report_document, table, verdict_line, write_report
from ..plan.unit import start_command, started_record, training_matcher, unit_file
from ..plan.uv_commands import uv_bin
from ..run import node_read
from ..run.ct_reads import container_fact, folded_commands, within_budget
from ..run.run_context import run_context
from ..settings import GpuSettings, Settings, TorchSettings
from ..verification import Verdict, torch_problems, verify
from .preview import show
from .progress import Progress, progress_while
from .util import fail, failure


@operation()
def torch_runtime(python: str, torch: TorchSettings, gpus: GpuSettings):
    """Fail unless torch under ``python`` is the ``torch`` build (version, variant, its CUDA)
    and sees every one of the node's GPUs (``gpus.expected_count``).

    .. code:: python

        checks.torch_runtime(name="Verify torch in the new venv", python="/root/venvs/x/bin/python",
                             torch=s.torch, gpus=s.gpus)
    """
    rt = host.get_fact(TorchRuntime, python=python)
    problems = torch_problems(
        rt, torch.version, torch.variant, torch.spec.cuda, gpus.expected_count
    )
    if problems:
        yield fail(*problems)


def verifying(settings: Settings, mode: str = "deploy") -> Progress:
    """The progress lines of a long verification (torch on every GPU, and with
    ``verify_level=compile`` a torch.compile per GPU).

    >>> from pvegpu.settings import defaults
    >>> verifying(Settings.from_data({**defaults(), "verify_level": "compile"})).what
    'verifying /root/venvs/torch-2.11.0-cu130 (torch on every GPU, a torch.compile on each)'
    """
    args = verification_args(settings, mode)
    check = "torch on every GPU" + (", a torch.compile on each" if args["compile_check"] else "")
    return Progress(f"verifying {args['venv']} ({check})", settings.policy.progress_interval_s)


def verification_args(settings: Settings, mode: str = "deploy") -> dict:
    """The ``ContainerVerification`` fact's arguments for ``settings``: deploy.py verifies the
    selected build (``<venvs_dir>/<build>``) before the live venv switches to it; verify.py
    (``mode="verify"``) verifies the live venv (``venv_path``) and writes nothing at all, not even
    uv's cache (``read_only``).

    >>> from pvegpu.settings import defaults
    >>> s = Settings.from_data(defaults())
    >>> verification_args(s)["venv"], verification_args(s, "verify")["venv"]
    ('/root/venvs/torch-2.11.0-cu130', '/root/venv')
    >>> verification_args(s)["read_only"], verification_args(s, "verify")["read_only"]
    (False, True)
    """
    return dict(
        venv=settings.build_venv if mode == "deploy" else settings.python_env.venv_path,
        uv_bin=uv_bin(settings.python_env),
        compile_check=settings.verification.level == "compile",
        unit_name=unit_file(settings.training),
        started_path=started_record(settings.training),
        build_venv=settings.build_venv,
        read_only=mode != "deploy",
        training_matcher=training_matcher(settings),
        # never, even with restart_training=true: the compile would take GPU memory the running
        # training needs; with consent deploy.py stops the training unit first
        # (training.stopped_for_compile_check) and starts it again after
        compile_beside_training=False,
    )


def node_host_of(h):
    """The node host (group pve_hosts) a ``@pct/<node>/<vmid>`` host runs on, or None."""
    name = h.data.get("pct_node")
    return h.inventory.get_host(name, None) if name else None


def lock_for(
    settings: Settings, ct: dict | None = None
) -> tuple[dict[str, str] | None, str | None]:
    """The pins the venv must equal, and where they come from; (None, None) when there is no
    usable lock (the venv was built from the settings' pins: see
    :func:`pvegpu.verification.package_drift`).

    Verification follows the python env stage's own decision (:func:`pvegpu.locks.lock_plan`: a
    lock applies only when its ``.in`` pins what the settings ask for), for the venv's Python
    (``python_version``, else what the live venv's torch check ran on).
    """
    found = ((ct or {}).get("torch") or {}).get("python_version")
    version = settings.python_env.version or (".".join(found.split(".")[:2]) if found else None)
    if not version:
        return None, None
    plan = lock_plan(settings, version)
    if plan.kind == "lock":
        return parse_pins(plan.text), plan.source
    return None, None


def _record(state, name: str, verdict: Verdict, settings: Settings) -> None:
    """Add one host's verdict to the run's JSON report and (re)write it on the controller."""
    verdicts = run_context(state).verdicts
    verdicts[name] = verdict
    if settings.verification.report:
        wanted = {
            k: settings.value(k)
            for k in (
                "torch_version",
                "torch_variant",
                "expected_gpu_count",
                "target_gpus",
                "drafter_gpus",
                "min_free_gpu_mib",
                "venv_path",
                "verify_level",
            )
        }
        write_report(settings.verification.report, report_document(verdicts, wanted))


def print_verdict(run, verdict: Verdict) -> None:
    """This host's table, warnings and verdict line, once unless the facts changed since."""
    text = [*table(verdict), *(f"    warning: {w}" for w in verdict.warnings)]
    if run.printed.get(host.name) == text:
        return
    run.printed[host.name] = text
    for line in text:
        (logger.warning if line.startswith("    warning: ") else logger.info)(line)
    logger.info(click.style(verdict_line(verdict), fg="green" if verdict.ok else "red", bold=True))


def verify_read(node_host, run) -> dict:
    """verify.py's one read of ``node_host``: the node, and in one ``pct exec`` per training
    container of it the verification read of each (``ct_detail="reads"``, no view), which
    ``container_fact`` then serves (:mod:`pvegpu.run.ct_reads`). Every container host of the
    node asks; the first reads, the others are served from it (pvegpu.run.node_read)."""
    vmids, reads = [], {}
    for ct_host in node_host.inventory.get_group("training_cts", []):
        s = (run.settings or {}).get(ct_host.name)
        if ct_host.data.get("pct_node") != node_host.name or s is None:
            continue
        if s.verification.level == "compile":
            continue
        vmid = str(ct_host.data.get("pct_vmid"))
        args = verification_args(s, run.mode)
        lines = folded_commands(ct_host, [(ContainerVerification, args)])
        if lines:
            vmids.append(int(vmid))
            reads[vmid] = lines
    reads = within_budget(reads)
    vmids = [v for v in vmids if str(v) in reads]
    return node_read.node_state(node_host, vmids, "reads", ct_reads=reads or None)


def verification_reads(settings: Settings, node_host, run) -> tuple[dict, dict]:
    """(the node's document, the container's ``ContainerVerification``) for ``verified``."""
    args = verification_args(settings, run.mode)
    if run.mode == "verify" and node_host is not None and not args["compile_check"]:
        # one remote command: the container's read rides on the node read's exec into it
        node = verify_read(node_host, run)
        return node, container_fact(host, ContainerVerification, **args)
    # the node's read (reused from this run's preflight when nothing changed since) and the
    # container's are independent: read them side by side
    node_read_ = gevent.spawn(node_read.node_state, node_host) if node_host is not None else None
    # served from the preflight's node read when nothing ran since (pvegpu.run.ct_reads)
    ct = container_fact(host, ContainerVerification, **args)
    return (node_read_.get() if node_read_ is not None else {}), ct


def preview_verdict(state, node_host, verdict: Verdict):
    """In deploy.py's preview: a verification that fails now says so, unless the changes the
    preview lists before it (on the container or its node) are what it verifies."""
    hosts = [h for h in (host, node_host) if h is not None]
    if any(state.get_meta_for_host(h).ops_change for h in hosts):
        show("verified after the changes above (the preview cannot verify them yet)")
        return
    yield from failure(*verdict.lines())


@operation()
def verified(settings: Settings):
    """Verify a training container against its settings and its node; print one table and a
    verdict line; fail with one line per problem (expectation, fact, fix). Observes only. Takes
    the whole ``settings``: verification checks the torch, python env, GPU, training and
    verification parts.

    .. code:: python

        checks.verified(name="Verify CT 200: torch 2.11.0+cu130 on 8 GPUs", settings=s)

    deploy.py: the node's :class:`NodeState` (none when the run's preflight read is still
    current) and the container's :class:`ContainerVerification` (one ``pct exec``; none when
    it rode on the preflight's read or a promotion's exec), side by side. verify.py: one node
    command, whose one ``pct exec`` into each training container of the node runs their
    verification reads (``verify_read``; with ``verify_level=compile``, which may take minutes,
    the two side by side as deploy.py's). deploy.py verifies the selected build before the live
    venv switches to it; verify.py the live venv (``verification_args``).

    In deploy.py a leftover training process on a training GPU that the training unit stage will
    clear (see :func:`pvegpu.verification.verify`) is a warning; in verify.py it is a problem.
    """
    state, node_host = host.state, node_host_of(host)
    run = run_context(state)
    with progress_while(host, verifying(settings, run.mode)):
        node, ct = verification_reads(settings, node_host, run)
    vmid = int(host.data.get("pct_vmid") or 0)
    node_name = node_host.name if node_host is not None else str(host.data.get("pct_node"))
    lock, source = lock_for(settings, ct)
    verdict = verify(
        settings,
        node or {},
        ct or {},
        where=f"CT {vmid} on {node_name}",
        vmid=vmid,
        node_name=node_name,
        lock=lock,
        lock_source=source,
        unit=unit_file(settings.training),
        # deploy.py's training unit stage follows: a leftover it clears is a warning there
        deploying=run.mode == "deploy",
        waiting=tuple(w for w in run.waiting.get(node_name, []) if w.startswith(f"CT {vmid}: ")),
    )
    # Print at execution; verify.py also prints in its preview (without -y), so the verdict shows
    # before pyinfra asks to go on.
    if state.is_executing or run.mode == "verify":
        print_verdict(run, verdict)
        _record(state, host.name, verdict, settings)
    if not verdict.ok and not state.is_executing:
        # a preview: a failed check is not a change to make (verify.py printed its verdict)
        if run.mode == "deploy":
            yield from preview_verdict(state, node_host, verdict)
        return
    if not verdict.ok:
        if host.name in run.stopped_for_compile:
            # stopped for the compile check: a failed verification must not leave no training
            # running (the live venv still points at the build the unit ran)
            yield start_command(settings)
        yield fail(*verdict.lines())

"""Checks that run before any change anywhere: settings of every host, then each node's GPUs.

``check_fleet`` is called from the top of deploy.py. It raises one PreflightError listing every
problem (one line each: the fact, the value found, the fix), so a bad run stops before the first
operation executes.
"""

from __future__ import annotations

import gevent
from pyinfra import logger
from pyinfra.api.exceptions import PyinfraError

from ..operations.folded_reads import preflight_reads
from ..output import summary
from ..plan import boot
from ..plan.passthrough import devn_supported
from ..run import node_read
from ..run.run_context import run_context
from ..settings import Settings, SettingsError
from ..verification import Verdict, check_node_driver, check_node_gpus
from . import node_lock
from .adoption_plan import adoption_lines
from .all_settings import load_all
from .container_preflight import container_problems, destroy_problems  # noqa: F401 (re-export)
from .fleet import ungrouped_host_problems
from .site_preflight import (
    data_dir_problems,
    data_dirs_allowed,
    fabric_problems,
    python3_problem,
)
from .training_preflight import node_training_paths, training_path_problems


class PreflightError(PyinfraError):
    """The node cannot run the selected build; nothing was changed."""


def node_problems(
    settings: Settings, state: dict, node: str, vmids=(), ct_settings: dict | None = None
) -> tuple[list[str], list[str]]:
    """(problems, warnings) of one node's facts against the settings.

    Each problem is one line: the fact, the value found, the fix.

    >>> from pvegpu.settings import defaults
    >>> problems, _ = node_problems(Settings.from_data(defaults()),
    ...                             {"driver_version": "570.86.10", "gpus": [{}] * 8}, "n1")
    >>> problems[0].split(";")[:2]
    ['n1: driver for cu130: expected >= 580.65.06 (CUDA 13.0)', ' found 570.86.10 on node n1']
    """
    problems, warnings = node_driver_problems(settings, state, node)
    driver = state.get("driver_version")
    smi = state.get("driver_version_smi")
    if driver and smi and smi != driver:
        problems.append(
            f"{node}: the node's NVIDIA userspace is {smi} but its kernel module is {driver}: "
            f"reboot the node after the driver upgrade (or reinstall the matching driver)"
        )
    if driver and "nvidia-uvm" not in state.get("majors", {}):
        problems.append(
            f"{node}: the nvidia-uvm module is not loaded (no nvidia-uvm in /proc/devices): "
            f"run `modprobe nvidia-uvm` on the node (CUDA cannot start without it)"
        )
    if driver and not (state.get("tools") or {}).get("nvidia-modprobe"):
        problems.append(
            f"{node}: nvidia-modprobe is not installed: install the driver's nvidia-modprobe "
            f"(the .run driver puts it in /usr/bin; Debian: package nvidia-modprobe)"
        )
    if (
        driver
        and not (state.get("tools") or {}).get("nvidia-persistenced")
        and not (state.get("units") or {}).get("nvidia-persistenced.service", {}).get("path")
    ):
        warnings.append(
            f"{node}: nvidia-persistenced is not installed: GPUs re-initialize whenever no process "
            f"holds them (slow CUDA start); install it with the driver"
        )
    left_alone = boot.persistenced_left_alone(state)
    if left_alone:
        warnings.append(f"{node}: {left_alone}")
    fabric, fabric_notes = fabric_problems(state, node)
    problems += fabric
    warnings += fabric_notes
    hosts = [settings] + [(ct_settings or {}).get(f"@pct/{node}/{v}", settings) for v in vmids]
    problems += data_dir_problems(state, node, data_dirs_allowed(hosts))
    devn = devn_problem(settings, state, node)
    if devn:
        problems.append(devn)
    for vmid in vmids:
        own = (ct_settings or {}).get(f"@pct/{node}/{vmid}", settings)  # its fleet entry's
        p, w = container_problems(own, state, node, vmid)
        problems += p
        warnings += w
    return problems, warnings


def devn_problem(settings: Settings, state: dict, node: str) -> str | None:
    """The refusal of a forced ``passthrough_mode=dev`` on a node whose pct has no devN entries.

    >>> from pvegpu.settings import defaults
    >>> s = Settings.from_data(dict(defaults(), passthrough_mode="dev"))
    >>> devn_problem(s, {"pve_version": "8.1.4", "pve_container": "5.0.8"}, "n1") is None
    True
    >>> devn_problem(s, {"pve_version": "8.0.4", "pve_container": "5.0.4"}, "n1")
    ... # doctest: +NORMALIZE_WHITESPACE
    'n1: passthrough_mode=dev needs pve-container >= 5.0.7 (devN entries), the node has
    pve-container 5.0.4: upgrade pve-container or set passthrough_mode=lxc'
    """
    if settings.gpus.passthrough_mode != "dev" or devn_supported(state):
        return None
    found = state.get("pve_container")
    has = (
        f"pve-container {found}"
        if found
        else (f"no known pve-container (pve-manager {state.get('pve_version') or 'unknown'})")
    )
    return (
        f"{node}: passthrough_mode=dev needs pve-container >= 5.0.7 (devN entries), the node "
        f"has {has}: upgrade pve-container or set passthrough_mode=lxc"
    )


def node_driver_problems(settings: Settings, state: dict, node: str) -> tuple[list[str], list[str]]:
    """(problems, warnings) of the node's driver and GPU count: verification's own checks
    (:mod:`pvegpu.verification.node`), each line prefixed with the node's name.

    >>> from pvegpu.settings import defaults
    >>> node_driver_problems(Settings.from_data(defaults()),
    ...                      {"driver_version": "580.95.05", "gpus": [{}] * 9}, "n1")[0]
    ... # doctest: +NORMALIZE_WHITESPACE
    ['n1: node GPU count: expected 8 (expected_gpu_count); found 9 listed by nvidia-smi on n1;
    fix: check the GPUs (nvidia-smi -L on the node) or set expected_gpu_count']
    """
    v = Verdict(node)
    check_node_driver(v, settings, state, node)
    if state.get("driver_version"):  # without a driver, nvidia-smi has nothing to say
        check_node_gpus(v, settings, state, node)
    return [f"{node}: {line}" for line in v.lines()], [f"{node}: {w}" for w in v.warnings]


def check_fleet(state, inventory) -> dict[str, Settings]:
    """Validate settings of every host, take every node's deploy lock, and check the GPUs of
    every node, once per run (kept in the run context, :mod:`pvegpu.run.run_context`).

    pyinfra loads deploy.py for every host side by side (gevent greenlets): the first host runs
    the checks while the others wait on a lock for its result (or its error), so the node's facts
    are read once, not once per host. A bad setting stops the whole run (it is the same input for
    every node); a node that fails its checks or whose lock is held is recorded in
    ``node_failures`` and only its own hosts stop (deploy.py's first operation fails them).
    """
    return once_per_run(state, lambda: _check_fleet(state, inventory))


def validate_fleet(state, inventory) -> dict[str, Settings]:
    """Every host's settings validated once per run, without the node preflight (verify.py: it
    reports the node's facts in each container's table instead)."""
    return once_per_run(state, lambda: load_all(list(inventory)))


def once_per_run(state, check) -> dict[str, Settings]:
    """The run's settings: ``check()``'s on the first call (the others wait for it), its error
    again on every later call when it failed."""
    run = run_context(state)
    with run.preflight_lock:
        if run.preflight_error is not None:
            raise run.preflight_error
        if run.settings is None:
            try:
                run.settings = check()
            except PyinfraError as e:
                run.preflight_error = e
                raise
        return run.settings


def node_read_args(s: Settings) -> dict:
    """The node probe's arguments besides the containers: the same for every read of a run."""
    return {
        "installer_dir": s.gpus.installer_dir,
        "data_dir": s.container.data_dir_node,
        "boot_files": boot.boot_files(),
        "units": [boot.UVM_UNIT, boot.PERSISTENCED_UNIT, boot.FABRICMANAGER_UNIT],
        "unit_name": f"{s.training.unit_name}.service",
        # a container to create: its storages (pvesm status, read only then)
        "storage_contents": ["rootdir", "vztmpl"],
        "recreate": s.policy.rebuild == "container",
        "persistenced_unit": f"{boot.UNIT_DIR}/{boot.PERSISTENCED_UNIT}",
        # a built selected venv needs no room for a build (the disk check)
        "build_dir": s.build_venv,
    }


def node_data_dirs(inventory, settings: dict[str, Settings], node_host) -> list[str]:
    """Every ``data_dir_node`` of ``node_host`` and its training containers (a fleet file's
    container entry may give one of its own)."""
    found = [settings[node_host.name].container.data_dir_node]
    for ct in inventory.get_group("training_cts", []):
        if ct.data.get("pct_node") == node_host.name and ct.name in settings:
            found.append(settings[ct.name].container.data_dir_node)
    return sorted(set(found))


def preflight_read(state, inventory, settings: dict[str, Settings], node_host) -> dict:
    """The run's one read of a node (with its containers' training paths): the node stage and
    verify reuse it until an operation runs a command."""
    vmids = node_host.data.get("pve_ct_ids") or []
    paths = node_training_paths(inventory, settings, node_host.name)
    args = node_read_args(settings[node_host.name])
    args["data_dirs"] = node_data_dirs(inventory, settings, node_host)
    run_context(state).node_args[node_host.name] = args
    # each container's first reads ride on the node read's exec into it (pvegpu.run.ct_reads)
    ct_reads = preflight_reads(inventory, settings, node_host.name, vmids)
    return node_read.node_state(node_host, vmids, "full", args, paths, ct_reads)


def _check_fleet(state, inventory) -> dict[str, Settings]:
    summary.register(state)  # its lines also say when the settings refused the run
    settings = load_all(list(inventory))
    stray = ungrouped_host_problems(list(inventory))
    if stray:
        raise SettingsError(
            "hosts deploy.py cannot deploy, nothing was changed:\n" + "\n".join(stray)
        )
    nodes = list(inventory.get_group("pve_hosts", []))
    run = run_context(state)
    # a preview (without -y) and --dry change nothing: they take no lock and never wait for one;
    # the lock is taken when changes start (pvegpu.startup.changes_start)
    run.lock_deferred = not node_lock.lock_at_start(state)
    run.dry = node_lock.is_dry()
    run.node_failures = preflight_nodes(state, inventory, settings, nodes, not run.lock_deferred)
    return settings


def preflight_nodes(state, inventory, settings, nodes, lock: bool) -> dict[str, list[str]]:
    """{node name: problem lines} of ``nodes`` (empty: go on), each read once (under its deploy
    lock when ``lock``), the problems printed. Every node's lock, then every node's read, side
    by side: a fleet waits for its slowest node, not for the sum of them."""
    failures: dict[str, list[str]] = {}
    held = run_context(state).node_locks
    locking = {
        n.name: gevent.spawn(node_lock.acquire, n, settings[n.name].policy.lock_wait_s)
        for n in nodes
        if lock and n.name not in held
    }
    for name, greenlet in locking.items():
        channel, problem = greenlet.get()
        if problem:
            failures[name] = [problem]
        else:
            held[name] = channel
    reads = {
        n.name: gevent.spawn(preflight_read, state, inventory, settings, n)
        for n in nodes
        if n.name not in failures
    }
    node_kinds: dict[str, dict] = {}  # node name: {path: kind} from its read
    for node_host in nodes:
        if node_host.name in failures:
            continue
        facts = reads[node_host.name].get()
        if facts and facts.get("path_kinds") is not None:
            node_kinds[node_host.name] = facts["path_kinds"]
        found = node_read_problems(state, settings, node_host, facts)
        if found:
            failures[node_host.name] = found
    for line in training_path_problems(inventory, settings, node_kinds):
        node = next((n.name for n in nodes if line.startswith(f"{n.name}: ")), "")
        failures.setdefault(node, []).append(line)
    for node, lines in failures.items():
        say(
            state,
            logger.error,
            f"--> {node or 'fleet'}: preflight failed, nothing will be changed there:",
            *lines,  # pyinfra indents each line
        )
    return failures


def node_read_problems(state, settings, node_host, facts: dict | None) -> list[str]:
    """The problems of one node's preflight read (its adoption plan and warnings printed)."""
    s = settings[node_host.name]
    vmids = node_host.data.get("pve_ct_ids") or []
    if not facts:
        return [f"{node_host.name}: node facts could not be read: check SSH to the node"]
    if facts.get("python3_missing"):
        return [python3_problem(node_host.name)]
    for vmid in vmids:
        own = settings.get(f"@pct/{node_host.name}/{vmid}", s)  # its fleet entry's
        lines = adoption_lines(own, facts, node_host.name, vmid)
        say(state, logger.warning, *(f"--> {x}" for x in lines))
    found, warnings = node_problems(s, facts, node_host.name, vmids, settings)
    say(state, logger.warning, *(f"--> warning: {line}" for line in warnings))
    return found


def say(state, log, *lines: str) -> None:
    """Print ``lines`` unless this run printed them already (a preflight read again when changes
    start, after a preview, says only what is new)."""
    printed = run_context(state).preflight_printed
    for line in lines:
        if line not in printed:
            printed.add(line)
            log(line)

"""The container's preflight: what would stop the container stage half-way (adoption without
consent, a missing template or storage, a lock, disk or memory short, a restart a training
blocks, the NVIDIA installer missing), found before anything changes. Called per container by
:func:`pvegpu.startup.preflight.node_problems`.
"""

from __future__ import annotations

from ..operations.proxmox import memory_below_use
from ..plan.adoption import is_ours, purge_lines, storage_volumes
from ..plan.ct_template import default_template
from ..plan.installer_tools import missing_installer_line, missing_tools_line, plan_tools
from ..plan.passthrough import plan_passthrough, restart_blocker
from ..plan.running_training import match_of, others, running_training
from ..plan.unit import renamed_unit_line, running_other_units, unit_file
from ..settings import Settings
from .site_preflight import disk_problem, lock_problem, storage_problems


def container_problems(
    settings: Settings, state: dict, node: str, vmid
) -> tuple[list[str], list[str]]:
    """What would stop the container stage half-way, found before anything changes:
    (problems, warnings), each line prefixed with the node's name."""
    problems: list[str] = []
    ct = state.get("containers", {}).get(str(vmid), {})
    if ct.get("exists") and not is_ours(ct) and not settings.policy.adopt:
        problems.append(
            f"{node}: CT {vmid} was not created by pvegpu (no 'pvegpu' tag): nothing is changed "
            "in it without consent; read its adoption plan above, then run again with --data "
            "adopt=true to adopt it"
        )
    if not ct.get("exists") or settings.policy.rebuild == "container":  # (re-)created in this run
        p, warnings = new_container_problems(settings, state, ct, node, vmid)
        return problems + p, warnings
    p, warnings = existing_container_problems(settings, state, ct, node, vmid)
    return problems + p + running_problems(settings, state, ct, node, vmid), warnings


def new_container_problems(
    settings: Settings, state: dict, ct: dict, node: str, vmid
) -> tuple[list[str], list[str]]:
    """What stops a container from being created (or re-created by rebuild=container)."""
    problems: list[str] = []
    warnings: list[str] = []
    driver = state.get("driver_version")
    volid = default_template(
        settings.container.template, state.get("pve_version"), state.get("templates", [])
    )
    template = volid.split("/")[-1]
    why = "is re-created (rebuild=container)" if ct.get("exists") else "is missing"
    if ct.get("exists"):
        p, w = destroy_problems(settings, ct, node, vmid)
        problems += p
        warnings += w
    if template not in state.get("templates", []):
        problems.append(
            f"{node}: CT {vmid} {why} and its template {volid} is not on the "
            f"node: download it with `pveam download local {template}` or set ct_template"
        )
    problems += storage_problems(
        state.get("storages"),
        settings.container.rootfs,
        volid,
        node,
        vmid,
        settings.site.min_free_gib,
    )
    if driver and not state.get("installer"):
        problems.append(
            f"{node}: "
            + missing_installer_line(
                vmid, driver, "has none (new container)", settings.gpus.installer_dir
            )
        )
    return problems, warnings


def existing_container_problems(
    settings: Settings, state: dict, ct: dict, node: str, vmid
) -> tuple[list[str], list[str]]:
    """What stops a change to an existing container: its lock, its disk, a memory limit under
    its use; a warning for a privilege setting only a rebuild changes."""
    problems: list[str] = []
    warnings: list[str] = []
    for line in (
        lock_problem(ct, node, vmid),
        disk_problem(ct, node, vmid, settings.site.min_free_gib, settings.policy.rebuild),
    ):
        if line:
            problems.append(line)
    config = ct.get("config", {})
    below = memory_below_use(
        vmid, settings.container.memory_mib, ct.get("memory_current"), ct.get("memory_cgroup")
    )
    if below:
        problems.append(f"{node}: {below}")
    unpriv = config.get("unprivileged", "0") == "1"
    if unpriv != settings.container.unprivileged:
        warnings.append(
            f"{node}: CT {vmid} is {'un' if unpriv else ''}privileged but ct_unprivileged is "
            f"{settings.container.unprivileged}: only rebuild=container changes it"
        )
    return problems, warnings


def running_problems(settings: Settings, state: dict, ct: dict, node: str, vmid) -> list[str]:
    """What stops a change to a running container: a restart a training blocks without consent,
    a renamed unit still running, a userspace reinstall without the node's installer."""
    problems: list[str] = []
    driver = state.get("driver_version")
    plan = plan_passthrough(settings.gpus.passthrough_mode, settings.gpus.extra_devices, state, ct)
    reasons = plan.restart_reasons
    live = ct.get("live")
    unit = unit_file(settings.training)
    trainers = running_training(
        int(vmid), ct, state, unit, match_of(settings.training, settings.python_env)
    )
    blocker = restart_blocker(vmid, unit, live, reasons, trainers) if reasons else None
    # a training pvegpu did not start: the restart waits for it (the operation lists it)
    if blocker and not settings.policy.restart_training and not others(trainers):
        problems.append(f"{node}: {blocker}")
    running_old = running_other_units((live or {}).get("other_units"))
    if running_old and not settings.policy.restart_training:
        problems.append(renamed_unit_line(settings, f"{node}: CT {vmid}", running_old))
    if live and driver:
        libcuda = (live.get("libs") or {}).get("libcuda.so.1")
        target = live.get("driver_version") or driver
        if libcuda != target and not state.get("installer"):
            found = f"has {libcuda or 'none'}"
            problems.append(
                f"{node}: "
                + missing_installer_line(vmid, target, found, settings.gpus.installer_dir)
            )
        action, missing = plan_tools(live.get("missing_tools"))
        if libcuda != target and action == "fail":  # the installer would abort: say so now
            problems.append(f"{node}: {missing_tools_line(vmid, missing)}")
    return problems


def destroy_problems(settings: Settings, ct: dict, node: str, vmid) -> tuple[list[str], list[str]]:
    """(problems, warnings) of rebuild=container on an existing CT: what `pct destroy --purge`
    takes along (one warning each, so the preview shows it), and a refusal while it would
    destroy a storage-backed mount point without ``--data destroy_volumes=true``.

    >>> from pvegpu.settings import defaults
    >>> ct = {"config": {"mp1": "local-lvm:vm-200-disk-1,mp=/scratch"}}
    >>> destroy_problems(Settings.from_data(defaults()), ct, "n1", 200)[0][0][:60]
    'n1: rebuild=container would destroy storage-backed mp1 (loca'
    """
    warnings = [f"{node}: rebuild=container: {line}" for line in purge_lines(ct, vmid)]
    volumes = storage_volumes(ct)
    problems = []
    if volumes and not settings.policy.destroy_volumes:
        problems.append(
            f"{node}: rebuild=container would destroy storage-backed {', '.join(volumes)} of CT "
            f"{vmid} with it (pct destroy deletes every volume of the container): copy its data "
            "away first, or pass --data destroy_volumes=true to destroy it too"
        )
    return problems, warnings

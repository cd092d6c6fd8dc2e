"""The plan of a container pvegpu did not create (no ``pvegpu`` tag), or that runs a training pvegpu
did not start, printed by the preflight so the preview shows it before anything changes: every
`pct set` key old -> new, the passthrough, packages to install, restarts, the trainings to stop,
what would start a training at boot, the venv takeover and the unit; and when each happens (now,
or only with ``--data adopt=true`` / ``--data restart_training=true``).

>>> adoption_lines(None, {}, "pve1", 200)
[]
"""

from __future__ import annotations

from ..operations.proxmox import LOWERABLE, settings_args
from ..plan.adoption import boot_starters, is_ours
from ..plan.passthrough import plan_passthrough
from ..plan.running_training import TRAINING, match_of, others, running_training
from ..plan.toolchain import toolchain_packages
from ..plan.unit import unit_file
from ..settings import Settings

DEFAULTS = {"onboot": "0", "swap": "512", "memory": "512", "cores": "all"}


def adoption_lines(settings: Settings | None, state: dict, node: str, vmid) -> list[str]:
    """The plan's lines for CT ``vmid`` of ``node`` (``state``: the node read); [] when it is
    pvegpu's and no training pvegpu did not start runs there."""
    ct = (state.get("containers") or {}).get(str(vmid)) or {}
    if settings is None or not ct.get("exists"):
        return []
    unit = unit_file(settings.training)
    match = match_of(settings.training, settings.python_env)
    foreign = others(running_training(int(vmid), ct, state, unit, match))
    ours = is_ours(ct)
    if ours and not foreign:
        return []
    consent = settings.policy.restart_training
    adopted = ours or settings.policy.adopt
    wait = "now (restart_training=true)" if consent else "waits for --data restart_training=true"
    if not adopted:
        wait = "with --data adopt=true" + ("" if consent else " and restart_training=true")
    now = "now" if adopted else "with --data adopt=true"
    lines = [_header(node, vmid, ours, foreign)]
    lines += _training_lines(settings, foreign, wait)
    lines += [f"  at boot: {line}: {wait}" for line in boot_starters(ct, match, unit)]
    lines += _config_lines(settings, ct, vmid, now, wait if foreign else now)
    lines += _passthrough_lines(settings, state, ct, vmid, wait if foreign else now)
    lines += _package_lines(state, ct, vmid, now, wait if foreign else now)
    venv = settings.python_env.venv_path
    lines.append(
        f"  {venv} -> {settings.build_venv} (built and verified beside it {now}; a venv made by "
        f"hand at {venv} is moved aside and kept): {wait if foreign else now}"
    )
    lines.append(f"  {unit}: installed {now}; enabled and started: {wait if foreign else now}")
    if not adopted:
        lines.append(f"  CT {vmid} gets the tag 'pvegpu' (pvegpu's from then on): {now}")
    return lines


def _header(node: str, vmid, ours: bool, foreign: list) -> str:
    if foreign:
        first = foreign[0]
        return f"{node}: CT {vmid} already trains ({first.named}: {first.command}); adoption plan:"
    return (
        f"{node}: CT {vmid} was not created by pvegpu (no 'pvegpu' tag: made by hand or by another "
        "tool); adoption plan:"
    )


def _training_lines(settings: Settings, foreign: list, wait: str) -> list[str]:
    lines = []
    for t in foreign:
        if t.kind != TRAINING:
            lines.append(f"  {t.what} ({t.named}): never stopped by pvegpu; {t.fix}")
        elif t.unit:
            lines.append(
                f"  stop {t.unit}: SIGTERM to its workers (launchers held), up to "
                f"{settings.training.stop_timeout_s} s or its own TimeoutStopSec to checkpoint, "
                f"then stopped and disabled by its manager: {wait}"
            )
        elif t.pid is not None:
            lines.append(
                f"  stop the training started {t.how.removeprefix('started ')} ({t.named}): "
                f"SIGCONT, SIGTERM to its workers (launchers held), up to "
                f"{settings.training.stop_timeout_s} s to checkpoint, then SIGKILL: {wait}"
            )
    return lines


def _config_lines(settings: Settings, ct: dict, vmid, now: str, wait: str) -> list[str]:
    config = ct.get("config") or {}
    args = settings_args(config, settings.container)
    lines = []
    for flag, value in zip(args[::2], args[1::2]):
        key = flag[2:]
        old = config.get(key, DEFAULTS.get(key, "none"))
        lines.append(f"  CT {vmid} {key}: {old} -> {value}: {wait if key in LOWERABLE else now}")
    return lines


def _passthrough_lines(settings: Settings, state: dict, ct: dict, vmid, when: str) -> list[str]:
    plan = plan_passthrough(settings.gpus.passthrough_mode, settings.gpus.extra_devices, state, ct)
    if plan.changes_config or plan.restart_reasons:
        change = " ".join(plan.set_args) or "lxc lines rewritten"
        restart = f" (CT {vmid} restarts: {'; '.join(plan.restart_reasons)})"
        return [f"  GPU passthrough: {change}{restart if plan.restart_reasons else ''}: {when}"]
    return ["  GPU passthrough: the container's own lines pass every device: kept"]


def _package_lines(state: dict, ct: dict, vmid, now: str, when: str) -> list[str]:
    live = ct.get("live") or {}
    lines = []
    target = live.get("driver_version") or state.get("driver_version")
    libcuda = (live.get("libs") or {}).get("libcuda.so.1")
    if target and libcuda != target:
        lines.append(
            f"  NVIDIA userspace {libcuda or 'none'} -> {target} (the node's .run, "
            f"--no-kernel-modules): {when}"
        )
    packages = toolchain_packages(live.get("toolchain"))
    if packages:
        lines.append(f"  apt-get install {' '.join(packages)} (torch.compile's compiler): {when}")
    if not live.get("pvegpu_dir"):
        lines.append(f"  uv under /opt/pvegpu (pvegpu's own directory in CT {vmid}): {now}")
    return lines

"""The adoption plan of a container that already runs a training pvegpu did not start, printed
by the preflight (so the preview, without ``-y``, shows it before anything changes): every
change to the existing container's config (old -> new), the passthrough, the venv takeover, the
unit, and which of them wait for consent (``restart_training=true``).

>>> adoption_lines(None, {}, "pve1", 200)
[]
"""

from __future__ import annotations

from ..operations.proxmox import LOWERABLE, settings_args
from ..plan.passthrough import plan_passthrough
from ..plan.running_training import HAND, match_of, other_units, others, running_training
from ..plan.unit import unit_file
from ..settings import Settings

DEFAULTS = {"onboot": "0", "swap": "512", "memory": "512", "cores": "all"}


def adoption_lines(settings: Settings | None, state: dict, node: str, vmid) -> list[str]:
    """The plan's lines for CT ``vmid`` of ``node`` (``state``: the node read); [] when no
    training pvegpu did not start runs there."""
    ct = (state.get("containers") or {}).get(str(vmid)) or {}
    if settings is None or not ct.get("live"):
        return []
    unit = unit_file(settings.training)
    match = match_of(settings.training, settings.python_env)
    foreign = others(running_training(int(vmid), ct, state, unit, match))
    if not foreign:
        return []
    consent = settings.policy.restart_training
    wait = "now (restart_training=true)" if consent else "waits for --data restart_training=true"
    first = foreign[0]
    lines = [f"{node}: CT {vmid} already trains ({first.named}: {first.command}); adoption plan:"]
    for name in other_units(foreign):
        lines.append(f"  stop {name} (its own TimeoutStopSec), then disable it: {wait}")
    for t in foreign:
        if t.started_by == HAND and t.pid is not None:
            lines.append(
                f"  SIGTERM to pid {t.pid}'s process group, up to "
                f"{settings.training.stop_timeout_s} s to checkpoint, then SIGKILL: {wait}"
            )
    config = ct.get("config") or {}
    args = settings_args(config, settings.container)
    for flag, value in zip(args[::2], args[1::2]):
        key = flag[2:]
        old = config.get(key, DEFAULTS.get(key, "none"))
        when = wait if key in LOWERABLE else "now"
        lines.append(f"  CT {vmid} {key}: {old} -> {value}: {when}")
    plan = plan_passthrough(settings.gpus.passthrough_mode, settings.gpus.extra_devices, state, ct)
    if plan.changes_config or plan.restart_reasons:
        change = " ".join(plan.set_args) or "lxc lines rewritten"
        lines.append(f"  GPU passthrough: {change} (CT {vmid} restarts): {wait}")
    else:
        lines.append("  GPU passthrough: the container's own lines pass every device: kept")
    venv = settings.python_env.venv_path
    lines.append(
        f"  {venv} -> {settings.build_venv} (built and verified beside it now; a venv made by "
        f"hand at {venv} is moved aside and kept): {wait}"
    )
    lines.append(f"  {unit}: installed now; enabled and started after the takeover: {wait}")
    return lines

"""Changing a running container's devices: which `pct set` calls hot-plug (pve-container >=
6.0.4 adds a new devN to a running container), and the fallback when a hot-plug fails: a
graceful shutdown (pvegpu's unit stopped under its own TimeoutStopSec first), the entry set, a
start.
"""

from __future__ import annotations

import shlex


def hotplug_additions(config: dict, set_args: list[str]) -> list[str] | None:
    """The paths ``set_args`` only adds as new devN keys (what pve-container >= 6.0.4 hot-plugs
    into a running container), or None when it also edits or deletes an entry (those wait for
    the next start).

    >>> hotplug_additions({"dev0": "/dev/nvidia0"}, ["--dev1", "/dev/nvidia1"])
    ['/dev/nvidia1']
    >>> hotplug_additions({"dev0": "/dev/nvidia0"}, ["--dev0", "/dev/nvidia1"]) is None
    True
    """
    added = []
    it = iter(set_args)
    for flag in it:
        value = next(it, "")
        if flag == "--delete" or flag[2:] in config:
            return None
        added.append(value.split(",")[0])
    return added


def set_calls(set_args: list[str], hotplug: bool) -> list[list[str]]:
    """The `pct set` calls for ``set_args``: one devN per call where the node hot-plugs them
    (``hotplug``), else one call. pve-container >= 6.0.4 writes no config when one hot-plug of
    a call fails, while the devices hot-plugged before it stay in the container: one per call
    keeps config and container in step.

    >>> set_calls(["--dev1", "/dev/nvidia1", "--dev2", "/dev/nvidia2"], True)
    [['--dev1', '/dev/nvidia1'], ['--dev2', '/dev/nvidia2']]
    >>> set_calls(["--dev1", "/dev/nvidia1", "--delete", "dev0"], False)
    [['--dev1', '/dev/nvidia1', '--delete', 'dev0']]
    """
    if not set_args:
        return []
    if not hotplug:
        return [set_args]
    return [set_args[i : i + 2] for i in range(0, len(set_args), 2)]


def graceful_shutdown(vmid: int, unit: str, stop_timeout_s: int) -> str:
    """The shell line that shuts container ``vmid`` down without cutting a checkpoint: pvegpu's
    training ``unit``, if in any running state (``deactivating`` included: a stop in progress is
    joined), stopped first with `systemctl stop` (its own TimeoutStopSec), then `pct shutdown`
    with a timeout longer than that and no ``--forceStop``: a container that does not stop in
    time fails the step (pct: "container did not stop") rather than being killed.

    >>> line = graceful_shutdown(200, "t.service", 900)
    >>> "pct exec 200 -- systemctl stop t.service" in line, line.endswith("--timeout 960")
    (True, True)
    >>> "forceStop" in line or "pct stop" in line
    False
    """
    u = shlex.quote(unit)
    return (
        f"case $(pct exec {vmid} -- systemctl show -p ActiveState --value {u} 2>/dev/null) in "
        f"active|activating|reloading|deactivating) pct exec {vmid} -- systemctl stop {u} "
        f"|| exit 1;; esac; pct shutdown {vmid} --timeout {stop_timeout_s + 60}"
    )


def hotplug_shell(
    vmid: int, args: list[str], blocker: str | None, shutdown: str | None = None
) -> str:
    """One devN hot-plug (`pct set <vmid> --devN <path>`) as a shell line that treats a failed
    hot-plug as "restart needed", never as done: pct then wrote nothing and the device is not in
    the container, so the container is shut down (``shutdown``: :func:`graceful_shutdown`), the
    entry set (a stopped container takes it into its config) and started; where a restart is not
    allowed (``blocker``: the training runs), the host fails with that line instead.

    >>> print(hotplug_shell(200, ["--dev5", "/dev/nvidia5"], None)[:46])
    pct set 200 --dev5 /dev/nvidia5 || { echo 'hot
    >>> "exit 1" in hotplug_shell(200, ["--dev5", "/dev/nvidia5"], "CT 200 must restart ...")
    True
    """
    call = " ".join(["pct", "set", str(vmid), *(shlex.quote(a) for a in args)])
    if blocker is not None:
        return f"{call} || {{ echo {shlex.quote(blocker)} >&2; exit 1; }}"
    said = f"{hotplug_failure(args)}: restarting CT {vmid} to pass it through"
    down = f"{{ {shutdown}; }}" if shutdown else f"pct shutdown {vmid} --timeout 960"
    restart = f"{down} && {call} && pct start {vmid}"
    return f"{call} || {{ echo {shlex.quote(said)} >&2; {restart}; }}"


def hotplug_failure(args: list[str]) -> str:
    """The restart reason a failed hot-plug of ``args`` (`--devN <path>`) gives.

    >>> hotplug_failure(["--dev5", "/dev/nvidia5,mode=0666"])
    'hot-plug of /dev/nvidia5 (dev5) failed'
    """
    return f"hot-plug of {args[1].split(',')[0]} ({args[0][2:]}) failed"

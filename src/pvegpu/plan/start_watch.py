"""The watch after the deploy starts (or restarts) the training unit: ``systemctl start`` of a
``Type=simple`` unit returns at fork, so a trainer that dies at import (a package the build
lacks) would crash-loop until StartLimitBurst while the run says "converged". The watch reads
the unit every second for ``training_start_watch_s``: it must stay ``active`` with no automatic
restart (``NRestarts`` is 0 after the deploy's ``reset-failed`` + ``start``), and, when it is
given GPUs, one of its processes must appear on one of them (a trainer that hangs before its
first CUDA call, or runs on the CPU, is not up); otherwise one line on stderr with its state
and the journal's last lines, exit 1.

A process of the unit is on a GPU when the container's ``nvidia-smi --query-compute-apps=pid``
lists it (drivers from 535.113.01 list the container's own CUDA processes by their pid there;
older ones list none, so the watch then checks the unit's state only) and its
``/proc/<pid>/cgroup`` ends with the unit's name (a torchrun worker is in its unit's cgroup too).

>>> "did not come up" in watch_script("dflash-train.service", 60, 200)
True
>>> "query-compute-apps" in watch_script("dflash-train.service", 60, 200, gpus=False)
False
"""

from __future__ import annotations

import shlex

#: journal lines the failure line quotes
JOURNAL_LINES = 3
#: the first driver whose nvidia-smi lists a container's own processes by their pid there
NS_PIDS_DRIVER = "535.113.01"


def watch_script(unit: str, seconds: int, vmid, gpus: bool = True, proc: str = "/proc") -> str:
    """A sh script for inside CT ``vmid`` (see the module's docstring); ``gpus``: the unit is
    given GPUs, so its processes must appear on them (``proc``: where /proc is, for tests)."""
    u = shlex.quote(unit)
    return (
        (_gpu_setup() if gpus else "g=; seen=; ") + f"i=0; while [ $i -lt {int(seconds)} ]; do "
        f"s=$(systemctl show -p ActiveState --value {u}); "
        f"r=$(systemctl show -p NRestarts --value {u}); "
        'if [ "$s" != active ] || [ "${r:-0}" != 0 ]; then '
        f"sub=$(systemctl show -p SubState --value {u}); "
        + _failing(
            unit, vmid, "%s (%s) after %s s, %s automatic restarts", '"$s" "$sub" "$i" "${r:-0}"'
        )
        + "fi; "
        + (_gpu_look(unit, proc) if gpus else "")
        + "sleep 1; i=$((i + 1)); done; "
        + (_gpu_verdict(unit, vmid, seconds) if gpus else "")
        + "exit 0"
    )


def _journal(unit: str) -> str:
    """sh that sets ``j`` to the unit's last journal lines on one line."""
    return (
        f"j=$(journalctl -u {shlex.quote(unit)} -n {JOURNAL_LINES} -o cat --no-pager 2>/dev/null "
        "| tr '\\n' '|' | sed 's/|$//; s/|/ | /g'); "
    )


def _failing(unit: str, vmid, what: str, values: str, fix: str = "") -> str:
    """sh that prints the watch's one failure line (``what`` a printf format filled by
    ``values``) with the journal's last lines, then exits 1."""
    fix = fix or f"fix what its journal says (journalctl -u {unit}), then deploy again"
    return (
        _journal(unit) + f"printf 'CT %s: %s did not come up: {what}; its journal: %s; %s\\n' "
        f"{shlex.quote(str(vmid))} {shlex.quote(unit)} {values} "
        f'"${{j:-(empty)}}" {shlex.quote(fix)} >&2; exit 1; '
    )


def _gpu_setup() -> str:
    """sh that sets ``g`` (1: check the GPUs) from the driver's version, ``seen`` empty; ``g``
    is ``unread`` when nvidia-smi does not answer (the check cannot pass: fail closed)."""
    return (
        "seen=; d=$(nvidia-smi --query-gpu=driver_version --format=csv,noheader 2>/dev/null "
        "| head -n 1); "
        'if [ -z "$d" ]; then g=unread; '
        f'elif [ "$(printf \'%s\\n\' {NS_PIDS_DRIVER} "$d" | sort -V | head -n 1)" = '
        f"{NS_PIDS_DRIVER} ]; then g=1; else g=; fi; "
    )


def _gpu_look(unit: str, proc: str) -> str:
    """sh that sets ``seen`` once a process of ``unit`` is listed on a GPU."""
    return (
        'if [ "$g" = 1 ] && [ -z "$seen" ]; then '
        "for p in $(nvidia-smi --query-compute-apps=pid --format=csv,noheader 2>/dev/null); do "
        'case "$p" in *[!0-9]*|"") continue;; esac; '
        f'c={shlex.quote(proc)}/$p/cgroup; [ -r "$c" ] || continue; '
        'while read -r l; do case "$l" in */' + shlex.quote(unit) + ") seen=$p;; esac; "
        'done 2>/dev/null < "$c"; [ -n "$seen" ] && break; done; fi; '
    )


def _gpu_verdict(unit: str, vmid, seconds: int) -> str:
    """sh that fails the watch when the unit's processes never appeared on a GPU."""
    fix = (
        f"fix what its journal says (journalctl -u {unit}), then deploy again; a trainer that "
        f"loads for longer than {int(seconds)} s before its first CUDA call needs a larger "
        "training_start_watch_s"
    )
    return (
        'if [ "$g" = unread ]; then '
        + _failing(
            unit,
            vmid,
            "active, but nvidia-smi in the container did not answer",
            "",
            f"check `nvidia-smi` in CT {vmid} (verify.py), then deploy again",
        )
        + 'elif [ "$g" = 1 ] && [ -z "$seen" ]; then '
        + _failing(
            unit,
            vmid,
            "active for %s s, but none of its processes is on a GPU (nvidia-smi lists none)",
            '"$i"',
            fix,
        )
        + "fi; "
    )

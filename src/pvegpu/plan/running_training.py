"""Whether a training runs in a container, and which: the one notion every gate asks.

A training runs in CT N when (any of):

- pvegpu's training unit is in a running state there (active, activating, reloading,
  deactivating), as the container's own view says;
- a process of the container holds a training GPU (the node's ``--query-compute-apps``, mapped to
  the container by its ``/proc/<pid>/cgroup``: PVE's ``/lxc/<vmid>/...``); another container's
  process does not count, nor one that exited between nvidia-smi's list and the read (its
  cgroup reads empty, the node probe leaves it out);
- a process of the container runs the training script (``training_script`` after argv[0]),
  whatever started it: by hand, tmux/screen, cron, another unit.

Each is named by pid, command and what started it: the unit whose cgroup it is in, or
"started by hand" (a login session's scope, a user manager's, the container's init).
Read once per run from the node read (:mod:`pvegpu.probes.node_state`: ``compute_apps`` and each
running container's ``processes``), so it costs no round trip of its own.

>>> ct = {"live": {"unit_active": "inactive"}, "processes": [
...     {"pid": 4242, "argv": ["/root/venv/bin/python", "/data/t.py"],
...      "cgroup": "0::/lxc/200/ns/user.slice/user-0.slice/session-3.scope", "pgid": 4240}]}
>>> [t.named for t in running_training(200, ct, {}, "t.service")]
['pid 4242, started by hand']
"""

from __future__ import annotations

import json
import re
import shlex
from dataclasses import dataclass, field

from .unit import RUNNING

HAND = "started by hand"


@dataclass(frozen=True)
class Trainer:
    """One running training: its node pid (None: our unit runs, no process of it was seen), its
    command, what started it (a unit name or :data:`HAND`), its process group, its GPUs."""

    pid: int | None
    command: str
    started_by: str
    ours: bool = False
    pgid: int | None = None
    gpus: tuple[int, ...] = field(default=())

    @property
    def how(self) -> str:
        """``started by hand`` or ``under train.service``."""
        return HAND if self.started_by == HAND else f"under {self.started_by}"

    @property
    def named(self) -> str:
        """``pid 4242, started by hand`` (the summary line's wording).

        >>> Trainer(None, "t.service", "t.service", ours=True).named
        't.service running'
        """
        if self.pid is None:
            return f"{self.started_by} running"
        return f"pid {self.pid}, {self.how}"


def container_path(cgroup: str, vmid: int) -> str | None:
    """The cgroup path below container ``vmid`` of a process (``/ns/system.slice/x.service``), or
    None when the process is not this container's (another's, the node's, or gone: empty).

    >>> container_path("0::/lxc/200/ns/system.slice/train.service", 200)
    '/ns/system.slice/train.service'
    >>> container_path("0::/lxc/201/ns/init.scope", 200) is None
    True
    >>> container_path("0::/lxc.payload.200/system.slice/x.service", 200)
    '/system.slice/x.service'
    >>> container_path("", 200) is None
    True
    >>> container_path("4:memory:/lxc/200" + chr(10) + "0::/lxc/200/ns/system.slice/t.service", 200)
    '/ns/system.slice/t.service'
    """
    found = []
    for line in (cgroup or "").splitlines():
        path = line.strip().split(":", 2)[-1]
        if "/lxc.monitor" in path:
            continue
        m = re.search(rf"/lxc(?:\.payload)?[./]{vmid}(/.*|$)", path)
        if m:
            found.append(m.group(1))
    # cgroup v1 (hybrid): the container's systemd keeps its units in one hierarchy only
    return max(found, key=len) if found else None


def started_by(path: str) -> str:
    """The unit a process runs under, from its cgroup path in the container, or :data:`HAND`
    (a login session's scope, a user's own manager, tmux/screen, the container's init).

    >>> started_by("/ns/system.slice/train.service"), started_by("/ns/system.slice/cron.service")
    ('train.service', 'cron.service')
    >>> started_by("/ns/user.slice/user-0.slice/session-3.scope")
    'started by hand'
    >>> started_by("/ns/user.slice/user-0.slice/user@0.service/app.slice/tmux-spawn-1.scope")
    'started by hand'
    """
    for part in reversed([p for p in path.split("/") if p]):
        if part.endswith(".service"):
            return HAND if part.startswith("user@") else part
    return HAND


def started_how(path: str) -> str:
    """``started by hand`` or ``under <unit>``, from a cgroup path in the container.

    >>> started_how("/ns/system.slice/train.service"), started_how("/ns/init.scope")
    ('under train.service', 'started by hand')
    """
    by = started_by(path)
    return HAND if by == HAND else f"under {by}"


def _command(argv, fallback: str) -> str:
    return " ".join(argv) if isinstance(argv, list) and argv else fallback


def running_training(
    vmid: int, ct: dict, node: dict, unit: str, training_gpus=None
) -> list[Trainer]:
    """Every training running in container ``vmid``, by pid (our unit's without a process seen
    last). ``ct`` is the node read's entry for it, ``node`` the node read (its ``gpus`` and
    ``compute_apps``), ``unit`` pvegpu's training unit, ``training_gpus`` the node GPU indexes
    that count (None: all).

    >>> node = {"gpus": [{"index": 0, "uuid": "GPU-a"}], "compute_apps": [
    ...     {"pid": 7, "gpu_uuid": "GPU-a", "argv": ["python", "x.py"],
    ...      "cgroup": "0::/lxc/201/ns/init.scope"}]}
    >>> running_training(200, {}, node, "t.service")  # another container's
    []
    """
    index = {g.get("uuid"): g.get("index") for g in node.get("gpus") or []}
    # pvegpu's own units: this one, and one left under an earlier training_unit_name (its
    # marker, the container's view): those follow the renamed-unit rules, not a takeover
    own = {unit, *((ct.get("live") or {}).get("other_units") or {})}
    found: dict[int, Trainer] = {}
    for app in node.get("compute_apps") or []:
        path = container_path(app.get("cgroup") or "", vmid)
        gpu = index.get(app.get("gpu_uuid"))
        if path is None or app.get("pid") is None:
            continue
        if training_gpus is not None and gpu not in training_gpus:
            continue
        pid = int(app["pid"])
        have = found.get(pid)
        gpus = tuple(sorted({*(have.gpus if have else ()), *([gpu] if gpu is not None else [])}))
        by = started_by(path)
        command = _command(app.get("argv"), app.get("cmdline") or app.get("name") or "?")
        found[pid] = Trainer(pid, command, by, by in own, None, gpus)
    for proc in ct.get("processes") or []:
        path = container_path(proc.get("cgroup") or "", vmid)
        if path is None:
            continue
        pid = int(proc["pid"])
        by = started_by(path)
        have = found.get(pid)
        found[pid] = Trainer(
            pid,
            _command(proc.get("argv"), "?"),
            by,
            by in own,
            proc.get("pgid"),
            have.gpus if have else (),
        )
    trainers = [found[p] for p in sorted(found)]
    active = (ct.get("live") or {}).get("unit_active")
    if active in RUNNING and not any(t.ours for t in trainers):
        trainers.append(Trainer(None, unit, unit, ours=True))
    return trainers


def others(trainers: list[Trainer]) -> list[Trainer]:
    """The trainings not run by pvegpu's unit (by hand, the users' own unit, ...).

    >>> others([Trainer(1, "a", "t.service", ours=True), Trainer(2, "b", HAND)])[0].pid
    2
    """
    return [t for t in trainers if not t.ours]


def other_units(trainers: list[Trainer]) -> list[str]:
    """The units (not pvegpu's) that run a training: stopped and disabled at a takeover.

    >>> other_units([Trainer(2, "b", HAND), Trainer(3, "c", "train.service")])
    ['train.service']
    """
    return sorted({t.started_by for t in others(trainers) if t.started_by != HAND})


def summary_line(node: str, waiting: int, trainer: Trainer) -> str:
    """The node's closing line while changes wait for a running training.

    >>> summary_line("pve1", 3, Trainer(4242, "python t.py", HAND))
    ... # doctest: +NORMALIZE_WHITESPACE
    'pvegpu: pve1: converged; 3 changes wait for the running training (pid 4242, started by
    hand): rerun with --data restart_training=true to apply them'
    """
    return (
        f"pvegpu: {node}: converged; {waiting} changes wait for the running training "
        f"({trainer.named}): rerun with --data restart_training=true to apply them"
    )


def waiting_line(vmid: int, change: str, trainer: Trainer) -> str:
    """One change that waits, and for what.

    >>> waiting_line(200, "pct set 200 --swap 0", Trainer(4242, "python t.py", HAND))
    'CT 200: pct set 200 --swap 0 waits for the running training (pid 4242, started by hand)'
    """
    return f"CT {vmid}: {change} waits for the running training ({trainer.named})"


def _log_command(trainer: Trainer, vmid: int, sig: str, log: str) -> str:
    """Append one JSON line for a signal sent, as the leftover clearing logs its own."""
    entry = json.dumps(
        {
            "vmid": vmid,
            "pid": trainer.pid,
            "signal": sig,
            "gpus": list(trainer.gpus),
            "argv": trainer.command.split(),
            "by": "takeover",
        },
        sort_keys=True,
    )
    fmt = '{"time": %s, ' + entry[1:].replace("%", "%%") + "\\n"
    q = shlex.quote(log)
    return (
        f"mkdir -p {shlex.quote(log.rsplit('/', 1)[0])}; "
        f'printf {shlex.quote(fmt)} "$(date +%s.%3N)" >> {q}'
    )


def stop_by_hand_script(
    trainer: Trainer, script: str, timeout_s: int, vmid: int = 0, log: str | None = None
) -> str:
    """The node shell script that ends a training started by hand, as a unit's stop would:
    SIGTERM to its process group (its own: a group led by the trainer; else the trainer alone),
    up to ``timeout_s`` for its checkpoint, then SIGKILL; each signal appended to ``log``. The
    pid is checked to still run ``script`` before each signal (a pid can be reused).

    >>> s = stop_by_hand_script(Trainer(42, "p t.py", HAND, pgid=42), "/data/t.py", 900)
    >>> "kill -TERM -42;" in s and "kill -KILL -42;" in s and "-lt 900" in s
    True
    """
    pid = trainer.pid
    # `kill -TERM -<pgid>`: dash (sh on Debian) takes no `--` before a negative pid
    target = f"-{pid}" if trainer.pgid == pid else str(pid)
    same = f"tr '\\0' '\\n' 2>/dev/null < /proc/{pid}/cmdline | grep -qxF -- {shlex.quote(script)}"
    term = f"{_log_command(trainer, vmid, 'SIGTERM', log)}; " if log else ""
    kill = f"{_log_command(trainer, vmid, 'SIGKILL', log)}; " if log else ""
    return (
        f"if {same}; then {term}kill -TERM {target}; fi; i=0; "
        f"while {same} && [ $i -lt {timeout_s} ]; do sleep 1; i=$((i+1)); done; "
        f"if {same}; then echo 'training pid {pid} did not stop in {timeout_s} s "
        f"(training_stop_timeout_s): SIGKILL' >&2; {kill}kill -KILL {target}; sleep 1; fi; "
        f"! {same}"
    )

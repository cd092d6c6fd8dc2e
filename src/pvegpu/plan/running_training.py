"""Whether a training runs in a container, and which: the one notion every gate asks.

A training is a group of processes, not a command line (:mod:`pvegpu.plan.process_tree`): the
processes of CT N that hold a GPU (the node's ``--query-compute-apps``, mapped to the container
by ``/proc/<pid>/cgroup``: PVE's ``/lxc/<vmid>/...``) or run the training script however it is
named (absolute or relative to their cwd, after a launcher: torchrun, ``-m
torch.distributed.run``, accelerate, deepspeed, ``python -u``, a shell wrapper), with the
launcher or wrapper above them and everything below. Also a training: any unit of the container
that is activating (between restarts included), deactivating or reloading and whose
``ExecStart`` runs the script, a launcher, or a program under the venvs or the training dir; and
pvegpu's own unit in any running state. A group that holds a GPU but runs no training is "a GPU
process" (a Jupyter kernel, an eval server): changes wait for it too, and it is called so.

Fail closed: when the container's view, its processes, its units or the node's GPU processes
cannot be read, the answer is one training of kind "unknown", never none.

Each is named by its root (launcher pid, or the unit), how many processes, what started it (the
unit of its cgroup, or "started by hand": a login session's scope, tmux, cron ...).

>>> ct = {"exists": True, "status": "running", "live": {"unit_active": "inactive", "units": []},
...       "processes": [{"pid": 4242, "ppid": 1, "argv": ["/root/venv/bin/python", "/data/t.py"],
...       "cwd": "/", "cgroup": "0::/lxc/200/ns/user.slice/user-0.slice/session-3.scope"}]}
>>> [t.named for t in running_training(200, ct, {"compute_apps": []}, "t.service",
...                                    {"script": "/data/t.py"})]
['pid 4242, started by hand']
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from .cgroup_origin import HAND, container_path, started_by
from .process_tree import Group, groups
from .starts_training import unit_runs_training
from .unit import RUNNING

TRAINING = "training"
GPU_PROCESS = "gpu process"
UNKNOWN = "unknown"
NEIGHBOUR = "neighbour"  # a GPU process of another container or the node, on a training GPU
BOOT = "boot"  # not running: what would start a training at boot (an enabled unit, a cron line)
#: unit states in which a unit that is not ours counts as a training without a process seen
TRANSITIONAL = ("activating", "deactivating", "reloading")


@dataclass(frozen=True)
class Trainer:
    """One running training (or GPU process, or a state that could not be read): its root's
    node pid (None: a unit with no process now, or unknown), its command, what started it (a
    unit name or :data:`HAND`), whether it is pvegpu's own unit's, its root's process group, its
    GPUs, every member's node pid, its kind, the unit that *is* it (stopped with `systemctl
    stop`; None: a process tree, which a unit at most started), that unit's state, and, for
    :data:`UNKNOWN`, what could not be read and what to check."""

    pid: int | None
    command: str
    started_by: str
    ours: bool = False
    pgid: int | None = None
    gpus: tuple[int, ...] = field(default=())
    members: tuple[int, ...] = field(default=())
    kind: str = TRAINING
    unit: str | None = None
    state: str | None = None
    reason: str = ""

    @property
    def how(self) -> str:
        """``started by hand`` or ``under train.service``."""
        return HAND if self.started_by == HAND else f"under {self.started_by}"

    @property
    def named(self) -> str:
        """``pid 4242, started by hand`` (the summary line's wording).

        >>> Trainer(None, "t.service", "t.service", ours=True).named
        't.service running'
        >>> Trainer(7, "torchrun t.py", HAND, members=(7, 8, 9)).named
        'pid 7, started by hand, 3 processes'
        >>> Trainer(None, "?", "?", kind=UNKNOWN, reason="CT 200's view could not be read").named
        "state unknown: CT 200's view could not be read"
        """
        if self.kind == UNKNOWN:
            return f"state unknown: {self.reason}"
        if self.kind == BOOT:
            return self.started_by
        if self.pid is None:
            return f"{self.started_by} {self.state or 'running'}"
        more = f", {len(self.members)} processes" if len(self.members) > 1 else ""
        return f"pid {self.pid}, {self.how}{more}"

    @property
    def what(self) -> str:
        """What the lines call it: ``the running training``, ``a GPU process``, ...

        >>> Trainer(1, "jupyter", HAND, kind=GPU_PROCESS).what
        'a GPU process'
        """
        return {
            GPU_PROCESS: "a GPU process",
            NEIGHBOUR: "a GPU process outside this container",
            BOOT: "what would start a second trainer at boot",
            UNKNOWN: "a training that may run",
        }.get(self.kind, "the running training")

    @property
    def fix(self) -> str:
        """What makes the changes that wait go ahead.

        >>> Trainer(1, "python t.py", HAND).fix
        'rerun with --data restart_training=true to apply them'
        """
        if self.kind == GPU_PROCESS:
            return (
                "it is not a training, so pvegpu never stops it: end it (or free its GPU) "
                "and run the deploy again"
            )
        if self.kind == UNKNOWN:
            return "check that, then run the deploy again (nothing is changed under it)"
        if self.kind == NEIGHBOUR:
            return (
                "pvegpu never stops what another container or the node runs: free the GPU (or "
                "give this container other training GPUs) and run the deploy again"
            )
        if self.kind == BOOT:
            return "rerun with --data restart_training=true: the takeover disables it"
        return "rerun with --data restart_training=true to apply them"


def match_of(training, python_env) -> dict:
    """What identifies a training beyond the GPUs it holds: the training script, and the paths
    a unit's command under them makes the unit a training (the venvs, the training dir).

    >>> from pvegpu.settings import Settings, defaults
    >>> s = Settings.from_data(defaults())
    >>> match_of(s.training, s.python_env)["paths"]
    ['/root/venv', '/root/venvs', '/data/dflash']
    """
    command = list(training.command)
    module = next((b for a, b in zip(command, command[1:], strict=False) if a == "-m"), None)
    return {
        "script": training.script,
        "module": module,
        "workdir": training.workdir,
        "paths": [python_env.venv_path, python_env.venvs_dir, training.workdir],
    }


def _command(argv, fallback: str) -> str:
    return " ".join(argv) if isinstance(argv, list) and argv else fallback


#: Why a node's GPU processes are unknown (its compute-apps query failed).
NODE_APPS_UNREAD = (
    "the node's GPU processes could not be read (`nvidia-smi --query-compute-apps=pid` on the "
    "node failed)"
)


def unreadable(vmid: int, ct: dict, node: dict) -> list[str]:
    """What of a running container's state could not be read (empty: all of it was).

    >>> unreadable(200, {"status": "running", "live": None}, {"compute_apps": []})[0][:40]
    "CT 200's own view could not be read (pct"
    """
    why = []
    if ct.get("status") not in ("running", "stopped"):
        why.append(f"CT {vmid}'s status could not be read (`pct status {vmid}` on the node)")
        return why
    live = ct.get("live")
    if live is None:
        why.append(
            f"CT {vmid}'s own view could not be read (pct exec {vmid} failed or timed out: "
            f"check that `pct exec {vmid} -- true` answers on the node)"
        )
    elif live.get("units") is None:
        why.append(
            f"CT {vmid}'s units could not be read ({live.get('units_error') or 'systemctl'}: "
            f"check `pct exec {vmid} -- systemctl status`)"
        )
    if ct.get("processes") is None:
        why.append(
            f"CT {vmid}'s processes could not be read on the node "
            f"({ct.get('processes_error') or 'no list'})"
        )
    if node.get("compute_apps") is None:
        why.append(NODE_APPS_UNREAD)
    return why


def held_by_pid(vmid: int, node: dict) -> tuple[dict[int, tuple[int, ...]], list[dict]]:
    """({node pid: GPU indexes} of this container's compute processes, their node rows)."""
    index = {g.get("uuid"): g.get("index") for g in node.get("gpus") or []}
    held: dict[int, set] = {}
    rows = []
    for app in node.get("compute_apps") or []:
        if container_path(app.get("cgroup") or "", vmid) is None or app.get("pid") is None:
            continue
        gpu = index.get(app.get("gpu_uuid"))
        held.setdefault(int(app["pid"]), set()).update([gpu] if gpu is not None else [])
        rows.append(app)
    return {pid: tuple(sorted(g)) for pid, g in held.items()}, rows


def _trainer(group: Group, proc: dict, vmid: int, own: set[str]) -> Trainer:
    path = container_path(proc.get("cgroup") or "", vmid) or ""
    by = started_by(path)
    return Trainer(
        group.root,
        _command(proc.get("argv"), "?"),
        by,
        by in own,
        proc.get("pgid"),
        group.gpus,
        group.members,
        TRAINING if group.training else GPU_PROCESS,
        by if by != HAND and group.top else None,
    )


def running_training(
    vmid: int, ct: dict, node: dict, unit: str, match: dict | None = None
) -> list[Trainer]:
    """Every training (or GPU process) running in container ``vmid``, by root pid; then units
    between runs; then pvegpu's own unit when it runs with no process seen. ``ct`` is the node
    read's entry for it (``ct_detail="full"``), ``node`` the node read (its ``gpus`` and
    ``compute_apps``), ``unit`` pvegpu's training unit, ``match``: :func:`match_of`. A state that
    could not be read is one :data:`UNKNOWN` trainer.

    >>> node = {"gpus": [{"index": 0, "uuid": "GPU-a"}], "compute_apps": [
    ...     {"pid": 7, "gpu_uuid": "GPU-a", "argv": ["python", "x.py"],
    ...      "cgroup": "0::/lxc/201/ns/init.scope"}]}
    >>> running_training(200, {"exists": True, "status": "stopped"}, node, "t.service")
    []
    """
    if not ct or ct.get("exists") is False or ct.get("status") == "stopped":
        return []
    match = match or {}
    why = unreadable(vmid, ct, node)
    if why:
        return [Trainer(None, "?", "?", kind=UNKNOWN, reason="; ".join(why))]
    live = ct.get("live") or {}
    # pvegpu's own units: this one, and one left under an earlier training_unit_name (its
    # marker, the container's view): those follow the renamed-unit rules, not a takeover
    own = {unit, *(live.get("other_units") or {})}
    held, rows = held_by_pid(vmid, node)
    procs = ct.get("processes") or []
    by_pid = {int(p["pid"]): p for p in procs}
    found = [
        _trainer(g, by_pid[g.root], vmid, own) for g in groups(procs, held, match.get("script"))
    ]
    seen = {m for t in found for m in t.members}
    for app in rows:  # a GPU process the scan did not see (it started after it)
        if int(app["pid"]) not in seen:
            group = Group(int(app["pid"]), (int(app["pid"]),), held[int(app["pid"])], False)
            found.append(_trainer(group, app, vmid, own))
            seen.add(int(app["pid"]))
    found.sort(key=lambda t: t.pid or 0)
    units = {t.started_by for t in found}
    for u in live.get("units") or []:
        if u["id"] in own or u["id"] in units or u.get("active") not in TRANSITIONAL:
            continue
        if unit_runs_training(u, match):
            command = " ".join((u.get("exec") or [["?"]])[0])
            state = f"{u['active']} ({u.get('sub')})" if u.get("sub") else u["active"]
            found.append(Trainer(None, command, u["id"], unit=u["id"], state=state))
    active = live.get("unit_active")
    if active in RUNNING and not any(t.ours for t in found):
        found.append(Trainer(None, unit, unit, ours=True, unit=unit))
    return found


def running_in_read(vmid, doc: dict | None, unit: str, match: dict | None) -> list[Trainer]:
    """The trainings running in CT ``vmid`` by the node read ``doc`` (None, a read that failed or
    one without that container: one training of unknown state). The gates ask this on the
    controller (:func:`pvegpu.run.adoption.running_in`) and, for a change made in the same
    command as its read, on the node (:mod:`pvegpu.run.gated`): one function, one answer.

    >>> [t.kind for t in running_in_read(200, None, "t.service", None)]
    ['unknown']
    """
    ct = ((doc or {}).get("containers") or {}).get(str(vmid))
    if not doc or ct is None:
        ct = {"exists": True, "status": None}  # nothing read: fail closed
    return running_training(int(vmid), ct, doc or {}, unit, match)


def neighbours(vmid: int, node: dict, gpus) -> list[Trainer]:
    """GPU processes of another container or of the node on the node GPUs ``gpus`` (the
    container's training GPUs): pvegpu's unit never starts beside one (one trainer per GPU), and
    never stops one (it is not this container's). Each is a :data:`NEIGHBOUR` named by its
    owner; the node's compute-apps unreadable: one :data:`UNKNOWN`.

    >>> node = {"gpus": [{"index": 2, "uuid": "GPU-c"}], "compute_apps": [
    ...     {"pid": 7, "gpu_uuid": "GPU-c", "argv": ["python", "t.py"],
    ...      "cgroup": "0::/lxc/201/ns/system.slice/train.service"}]}
    >>> [t.named for t in neighbours(200, node, [2])]
    ['pid 7, under CT 201 (train.service)']
    """
    if node.get("compute_apps") is None:
        return [Trainer(None, "?", "?", kind=UNKNOWN, reason=NODE_APPS_UNREAD)]
    index = {g.get("uuid"): g.get("index") for g in node.get("gpus") or []}
    found: dict[int, Trainer] = {}
    for app in node.get("compute_apps") or []:
        gpu = index.get(app.get("gpu_uuid"))
        if gpu is None or gpu not in set(gpus):
            continue
        if container_path(app.get("cgroup") or "", vmid) is not None:
            continue
        m = re.search(r"/lxc(?:\.payload)?[./](\d+)(/.*|$)", app.get("cgroup") or "")
        owner = f"CT {m.group(1)} ({started_by(m.group(2))})" if m else "the node"
        pid = int(app["pid"])
        have = found.get(pid)
        gpus_of = tuple(sorted({*(have.gpus if have else ()), int(gpu)}))
        command = _command(app.get("argv"), app.get("name") or "?")
        found[pid] = Trainer(pid, command, owner, gpus=gpus_of, kind=NEIGHBOUR)
    return [found[p] for p in sorted(found)]


def others(trainers: list[Trainer]) -> list[Trainer]:
    """The trainings not run by pvegpu's unit (by hand, the users' own unit, ...).

    >>> others([Trainer(1, "a", "t.service", ours=True), Trainer(2, "b", HAND)])[0].pid
    2
    """
    return [t for t in trainers if not t.ours]


def blocking(trainers: list[Trainer], consent: bool) -> list[Trainer]:
    """The trainings a disruptive change must wait for: every one pvegpu's unit does not run,
    unless ``consent`` (restart_training=true) covers it; consent never covers a state that
    could not be read, nor a GPU process that is not a training (pvegpu never stops those).

    >>> t = [Trainer(1, "python t.py", HAND), Trainer(2, "jupyter", HAND, kind=GPU_PROCESS)]
    >>> [x.pid for x in blocking(t, False)], [x.pid for x in blocking(t, True)]
    ([1, 2], [2])
    """
    return [t for t in others(trainers) if not consent or t.kind != TRAINING]


def other_units(trainers: list[Trainer]) -> list[str]:
    """The units (not pvegpu's) that *are* a training: stopped and disabled at a takeover. A
    unit that only started one (cron, ssh, a login: the training's root is below a starter in
    its cgroup) is not among them.

    >>> other_units([Trainer(2, "b", HAND), Trainer(3, "c", "train.service", unit="train.service"),
    ...              Trainer(4, "python t.py", "cron.service")])
    ['train.service']
    """
    return sorted({t.unit for t in others(trainers) if t.unit and t.kind == TRAINING})


def summary_line(node: str, waiting: int, trainer: Trainer) -> str:
    """The node's closing line while changes wait for a running training.

    >>> summary_line("pve1", 3, Trainer(4242, "python t.py", HAND))
    ... # doctest: +NORMALIZE_WHITESPACE
    'pvegpu: pve1: converged; 3 changes wait for the running training (pid 4242, started by
    hand): rerun with --data restart_training=true to apply them'
    """
    return (
        f"pvegpu: {node}: converged; {waiting} changes wait for {trainer.what} "
        f"({trainer.named}): {trainer.fix}"
    )


def waiting_line(vmid: int, change: str, trainer: Trainer) -> str:
    """One change that waits, and for what.

    >>> waiting_line(200, "pct set 200 --swap 0", Trainer(4242, "python t.py", HAND))
    'CT 200: pct set 200 --swap 0 waits for the running training (pid 4242, started by hand)'
    """
    return f"CT {vmid}: {change} waits for {trainer.what} ({trainer.named})"

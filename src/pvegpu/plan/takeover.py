"""How a recognised training is stopped with consent (``restart_training=true``), gracefully and
whole: pure decisions over the group (:class:`pvegpu.plan.running_training.Trainer`) and the
container's processes as the node read them.

Every member gets a role:

- ``launcher``: a process above the workers that would act on their exit: torchrun and friends
  (they forward a signal and SIGKILL the workers a fixed 30 s later, or restart them), a shell
  loop (``bash run.sh`` starts the trainer again). Held with SIGSTOP first, so it neither forwards,
  kills nor restarts; ended last (SIGTERM, SIGCONT) once its workers are gone.
- ``worker``: the topmost processes that hold a GPU or run the training script (a torchrun
  worker, a plain ``python train.py``): SIGCONT (a trainer paused with ctrl-Z cannot checkpoint
  while stopped), then SIGTERM, then up to ``training_stop_timeout_s`` for their checkpoints.
- ``helper``: everything below a worker (DataLoader workers, compile workers): left to the
  worker, which ends its own; what is left at the end gets SIGKILL with the rest.

>>> procs = [{"pid": 2, "ppid": 1, "argv": ["torchrun", "t.py"], "start": 5},
...          {"pid": 3, "ppid": 2, "argv": ["python", "-u", "t.py"], "start": 6},
...          {"pid": 4, "ppid": 3, "argv": ["python", "-u", "t.py"], "start": 7}]
>>> [(m["pid"], m["role"]) for m in roles((2, 3, 4), procs, {3: (0,)}, "/d/t.py", "/d")]
[(2, 'launcher'), (3, 'worker'), (4, 'helper')]
"""

from __future__ import annotations

import re

from .process_tree import is_launcher, training_like


def _seed(proc: dict, held: dict, script: str | None) -> bool:
    return int(proc["pid"]) in held or training_like(proc, script)


def _launches(m: int, below: set[int], by_pid: dict, seeds: set[int]) -> bool:
    """Whether member ``m``, with the seeds ``below`` it, launched them rather than forked them:
    a known launcher, no seed itself (a wrapper), or a seed below runs another command (a
    ``sh -c 'cd /d && python train.py'`` that cron runs: the shell names the script too, and a
    DataLoader's forked workers have their trainer's very argv)."""
    argv = by_pid[m].get("argv") or []
    if is_launcher(argv) or m not in seeds:
        return True
    return any((by_pid[s].get("argv") or []) != argv for s in below)


def roles(
    members: tuple[int, ...], procs: list[dict], held: dict, script: str | None, cwd=None
) -> list[dict]:
    """[{pid, start, role}] of a group's ``members`` (node pids) that still run (``procs``: the
    container's processes, ``held``: node pid -> GPUs, ``script``: the training script); a
    member the read no longer lists is left out. ``cwd`` is unused (kept for callers)."""
    by_pid = {int(p["pid"]): p for p in procs}
    here = [m for m in members if m in by_pid]
    seeds = {m for m in here if _seed(by_pid[m], held, script)}
    below: dict[int, set[int]] = {m: set() for m in here}  # member -> seeds below it
    for s in seeds:
        parent = by_pid.get(int(by_pid[s].get("ppid") or 0))
        seen = set()
        while parent is not None and int(parent["pid"]) in below and parent["pid"] not in seen:
            seen.add(parent["pid"])
            below[int(parent["pid"])].add(s)
            parent = by_pid.get(int(parent.get("ppid") or 0))
    launchers = {m for m in here if below[m] and _launches(m, below[m], by_pid, seeds)}
    workers = set()
    for s in seeds - launchers:
        parent = by_pid.get(int(by_pid[s].get("ppid") or 0))
        under_worker, seen = False, set()
        # a pid read twice (a parent loop: a reused pid caught mid-read) ends the walk
        while parent is not None and int(parent["pid"]) in below and parent["pid"] not in seen:
            seen.add(parent["pid"])
            if int(parent["pid"]) in seeds - launchers:
                under_worker = True
                break
            parent = by_pid.get(int(parent.get("ppid") or 0))
        if not under_worker:
            workers.add(s)
    if not workers and here:  # nothing runs the script any more: the root is what to end
        workers = {here[0]} - launchers or {here[0]}
        launchers -= workers
    found = []
    for m in here:
        role = "launcher" if m in launchers else "worker" if m in workers else "helper"
        found.append({"pid": m, "start": by_pid[m].get("start"), "role": role})
    return found


def unit_uid(trainer, procs: list[dict]) -> int | None:
    """The uid whose own manager (``user@<uid>.service``) runs ``trainer``'s unit, from its
    members' cgroups; None: the system's manager (or no unit).

    >>> from pvegpu.plan.running_training import Trainer
    >>> t = Trainer(2, "python t.py", "t.service", members=(2,), unit="t.service")
    >>> cg = "0::/lxc/200/ns/user.slice/user-0.slice/user@0.service/app.slice/t.service"
    >>> unit_uid(t, [{"pid": 2, "cgroup": cg}]), unit_uid(t, [{"pid": 2, "cgroup": ""}])
    (0, None)
    """
    if not trainer.unit:
        return None
    cgroups = {int(p["pid"]): p.get("cgroup") or "" for p in procs}
    for member in trainer.members:
        found = re.search(
            rf"/user@(\d+)\.service/(?:.*/)?{re.escape(trainer.unit)}\b",
            cgroups.get(int(member), ""),
        )
        if found:
            return int(found.group(1))
    return None


def stop_groups(trainers: list) -> list[list]:
    """The stops the trainings need: every process tree in one (ranks a script started one by
    one are one training, and a checkpoint that needs collectives cannot finish rank by rank),
    then each unit on its own (its manager stops it).

    >>> from pvegpu.plan.running_training import Trainer, HAND
    >>> a, b = Trainer(2, "python t.py --rank=0", HAND), Trainer(3, "python t.py --rank=1", HAND)
    >>> u = Trainer(4, "python t.py", "t.service", unit="t.service")
    >>> [[t.pid for t in g] for g in stop_groups([a, u, b])]
    [[2, 3], [4]]
    """
    trees = [t for t in trainers if not t.unit]
    return ([trees] if trees else []) + [[t] for t in trainers if t.unit]


def stop_args(
    vmid: int, group, procs: list[dict], held: dict, script: str | None, timeout_s: int, log: str
) -> dict:
    """The arguments of the node's stop probe (probes/training_stop.py) for the trainings of
    ``group`` (a Trainer, or a list of them stopped together: their workers get SIGTERM at
    once): their members with their roles and start times (a reused pid is never signalled),
    the unit that is the first one and the user whose manager runs it (stopped and disabled
    after its workers are done), the time the workers have, and the node's signal log.

    >>> from pvegpu.plan.running_training import Trainer
    >>> t = Trainer(2, "python t.py", "train.service", members=(2,), unit="train.service")
    >>> a = stop_args(200, t, [{"pid": 2, "ppid": 1, "argv": ["python", "t.py"], "start": 9}],
    ...               {}, "/d/t.py", 900, "/var/log/x.log")
    >>> a["unit"], a["members"], a["timeout_s"]
    ('train.service', [{'pid': 2, 'start': 9, 'role': 'worker'}], 900)
    """
    trainers = group if isinstance(group, list) else [group]
    first = trainers[0]
    return {
        "vmid": vmid,
        "members": [m for t in trainers for m in roles(t.members, procs, held, script)],
        "unit": first.unit,
        "unit_uid": unit_uid(first, procs),
        "timeout_s": timeout_s,
        "log": log,
        "gpus": sorted({g for t in trainers for g in t.gpus}),
        "command": "; ".join(t.command for t in trainers),
    }

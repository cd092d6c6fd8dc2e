"""Compute processes on the node's GPUs: whose each is (its cgroup), and whether it may hold a
training GPU. Only the running training unit's own processes may; a leftover training process
is cleared by deploy's training unit stage (a warning while deploying, else a problem) and
anything else is a problem whose fix names it, never stopped by pvegpu.

pvegpu's own torch probes in the container (verify's torch and compile checks) hold CUDA
contexts on every GPU, and the node's compute-apps query, run beside them, may list them. Their
python runs as ``python -c <source> pvegpu-probe ...`` (:data:`PROBE_MARK`): such a process of
THIS container (cgroup) is not counted at all (no problem, no warning, its memory free for the
training). The mark on the node or in another container counts as before (a process there
cannot hide so easily; root in our own container could fake anything anyway).

>>> is_own_process({"cmdline": "python train.py"}, 200, "dflash-train.service")
False
"""

from __future__ import annotations

import os
import re

from ..facts.gpus import normalize_uuid
from ..plan.cgroup_origin import container_path, started_how
from ..plan.process_tree import is_launcher
from .inputs import Inputs
from .verdict import Problem, Verdict

# argv[3] of pvegpu's torch probes (probes/verification.py sets it after `-c <source>`).
PROBE_MARK = "pvegpu-probe"


def is_own_probe(app: dict, vmid: int, unit: str | None) -> bool:
    """A torch probe of pvegpu in this container (outside the unit): ``-c <source>`` then
    :data:`PROBE_MARK` in its argv. Elsewhere the mark means nothing.

    >>> probe = {"argv": ["/root/venv/bin/python", "-c", "import torch", "pvegpu-probe"]}
    >>> is_own_probe({**probe, "cgroup": "0::/lxc/200/ns/init.scope"}, 200, "t.service")
    True
    >>> is_own_probe({**probe, "cgroup": "0::/lxc/201/ns/init.scope"}, 200, "t.service")
    False
    >>> is_own_probe(probe, 200, "t.service")  # on the node
    False
    """
    argv = app.get("argv")
    if not isinstance(argv, list) or len(argv) < 4:
        return False
    marked = argv[1] == "-c" and argv[3] == PROBE_MARK
    return marked and process_owner(app, vmid, unit) == "container"


def process_owner(app: dict, vmid: int, unit: str | None) -> str:
    """Whose a node compute process is, from its cgroup on the node (PVE's LXC layout, e.g.
    ``0::/lxc/200/ns/system.slice/dflash-train.service``; on cgroup v1 any line may say it):
    ``unit`` (this container's training unit), ``container`` (this container, outside the unit),
    ``ct <id>`` (another container) or ``node``.

    >>> process_owner({"cgroup": "0::/lxc/200/ns/system.slice/dflash-train.service"}, 200,
    ...               "dflash-train.service")
    'unit'
    >>> process_owner({"cgroup": "0::/lxc/201/ns/user.slice"}, 200, "dflash-train.service")
    'ct 201'
    >>> process_owner({"cmdline": "python train.py"}, 200, "dflash-train.service")
    'node'

    PVE 8 and 9 both set ``lxc.cgroup.dir.container = lxc/<vmid>`` (+ ``.inner = ns``); plain
    LXC's default payload cgroup ``lxc.payload.<name>`` is read the same way:

    >>> process_owner({"cgroup": "0::/lxc.payload.201/system.slice/x.service"}, 200, None)
    'ct 201'
    """
    owner = "node"
    for line in (app.get("cgroup") or "").splitlines():
        path = line.strip().split(":", 2)[-1]
        m = re.search(r"/lxc(?:\.payload)?[./](\d+)(/|$)", path)
        if not m:
            continue
        if int(m.group(1)) != vmid:
            return f"ct {m.group(1)}"
        if unit and (path.endswith("/" + unit) or f"/{unit}/" in path):
            return "unit"
        owner = "container"
    return owner


def is_own_process(app: dict, vmid: int, unit: str | None) -> bool:
    """A compute process of this container's training unit (see :func:`process_owner`).

    >>> is_own_process({"cmdline": "python train.py"}, 200, "dflash-train.service")
    False
    """
    return process_owner(app, vmid, unit) == "unit"


def app_argv(app: dict) -> list[str]:
    """A node compute process's argv: exact from the node probe, else its space-joined cmdline."""
    argv = app.get("argv")
    return list(argv) if isinstance(argv, list) else (app.get("cmdline") or "").split()


def is_training_command(argv: list[str], matcher: dict) -> bool:
    """argv is the training command (:func:`pvegpu.plan.unit.training_matcher`): argv[1] the
    training script, argv[0] the python of ``venv_path`` or of a build under ``venvs_dir``.

    >>> m = {"script": "/data/t.py", "pythons": ["/root/venv/bin/python"],
    ...      "python_under": ["/root/venvs/"]}
    >>> is_training_command(["/root/venvs/torch-x.b1/bin/python", "/data/t.py", "--resume"], m)
    True
    >>> is_training_command(["/usr/bin/python3", "/data/t.py"], m)
    False
    """
    if len(argv) < 2 or argv[1] != matcher["script"]:
        return False
    python = argv[0]
    return python in matcher["pythons"] or (
        python.endswith("/bin/python")
        and any(python.startswith(p) for p in matcher["python_under"])
    )


def cleared_at_start(app: dict, vmid: int, unit: str | None, matcher: dict) -> bool:
    """Whether the training unit stage's clearing (probes/training_leftovers.py, same rule) ends
    this node compute process before it starts the unit: it is in this container's training
    unit's cgroup. The training command anywhere else is a training pvegpu did not start (it
    waits, or is taken over with consent), never a leftover; ``matcher`` is kept for callers.

    >>> m = {"script": "/data/t.py", "pythons": ["/root/venv/bin/python"], "python_under": []}
    >>> cleared_at_start({"cgroup": "0::/lxc/200/ns/system.slice/t.service"}, 200, "t.service", m)
    True
    >>> cleared_at_start({"argv": ["/root/venv/bin/python", "/data/t.py"]}, 200, "t.service", m)
    False
    """
    return process_owner(app, vmid, unit) == "unit"


def adoptable(app: dict, f: Inputs) -> bool:
    """A training process of this container (:func:`looks_like_training`), outside pvegpu's
    stopped unit, holding a training GPU: the training running here that pvegpu did not start
    (by hand, the users' own unit; see :mod:`pvegpu.plan.running_training`). Deploy waits for it
    (no unit start beside it, nothing cleared) until ``restart_training=true`` takes it over;
    its memory is the training's. A GPU process that is no training (a notebook's kernel, an
    eval server) is none of this: the takeover refuses it."""
    return (
        f.unit_state.running is False
        and process_owner(app, f.vmid, f.unit) == "container"
        and _cuda_index(app, f) in f.role_of
        and looks_like_training(app, f)
    )


def looks_like_training(app: dict, f: Inputs) -> bool:
    """A GPU process that runs the training: the training command, a launcher, or an argument
    named as the training script (a torchrun worker's ``python -u train.py``; the node's list
    has no working directory to resolve it against). Fail closed: a process whose command could
    not be read may be one.

    >>> from pvegpu.settings import Settings, defaults
    >>> f = Inputs(Settings.from_data(defaults()), {}, {}, vmid=200)
    >>> looks_like_training({"argv": ["python", "-u", "train.py"]}, f)
    True
    >>> looks_like_training({"argv": ["python", "-m", "ipykernel_launcher", "-f", "k.json"]}, f)
    False
    """
    argv = app_argv(app)
    script = os.path.basename(f.matcher["script"] or "") or None
    return (
        not argv
        or is_training_command(argv, f.matcher)
        or is_launcher(argv)
        or any(os.path.basename(w) == script for w in argv[1:] if not w.startswith("-"))
    )


def taken_over_first(app: dict, f: Inputs) -> bool:
    """A process of this container, outside pvegpu's unit, holding a training GPU, in a deploy
    with ``restart_training=true``: the takeover stops it (gracefully, whole) once this
    verification passed and before the unit starts, so its memory is the training's."""
    return (
        f.deploying
        and f.settings.policy.restart_training
        and process_owner(app, f.vmid, f.unit) == "container"
        and _cuda_index(app, f) in f.role_of
        and looks_like_training(app, f)
    )


def counts_as_own(app: dict, f: Inputs) -> bool:
    """The process's memory counts as free for the training: the running (or state unknown)
    unit's own, a torch probe of pvegpu here (:func:`is_own_probe`), the training running here
    that deploy takes over with consent (:func:`adoptable`), or a leftover that deploy's
    training unit stage clears before it starts it."""
    if is_own_probe(app, f.vmid, f.unit):
        return True
    if adoptable(app, f) or taken_over_first(app, f):
        return True
    if process_owner(app, f.vmid, f.unit) == "unit" and f.unit_state.running is not False:
        return True
    return f.deploying and f.unit_state.clears and _leftover(app, f)


def own_memory(f: Inputs) -> dict[str | None, int]:
    """MiB per node GPU UUID held by processes that count as the training's own."""
    used: dict[str | None, int] = {}
    for app in f.node.get("compute_apps") or []:
        if counts_as_own(app, f):
            u = normalize_uuid(app.get("gpu_uuid"))
            used[u] = used.get(u, 0) + (app.get("used_mib") or 0)
    return used


def _leftover(app: dict, f: Inputs) -> bool:
    """A training process on a training GPU that the training unit stage would clear."""
    i = _cuda_index(app, f)
    return (
        f.unit_state.running is not None
        and i in f.role_of
        and cleared_at_start(app, f.vmid, f.unit, f.matcher)
    )


def _cuda_index(app: dict, f: Inputs) -> int | None:
    """The container's CUDA index of the GPU the process runs on (None: not visible to torch)."""
    u = normalize_uuid(app.get("gpu_uuid"))
    return {normalize_uuid(d.get("uuid")): d.get("index") for d in f.devices}.get(u)


def check_compute_processes(v: Verdict, f: Inputs) -> None:
    """No process but the training unit's holds a training GPU; others are warnings."""
    for app in f.node.get("compute_apps") or []:
        owner = process_owner(app, f.vmid, f.unit)
        if owner == "unit" and f.unit_state.running is not False:
            continue
        if is_own_probe(app, f.vmid, f.unit):
            continue  # pvegpu's own torch probe, beside this very read
        i = _cuda_index(app, f)
        pid = app.get("pid")
        if adoptable(app, f):
            v.warnings.append(
                f"GPU {i} is held by the running training (pid {pid}, "
                f"{started_how(container_path(app.get('cgroup') or '', f.vmid) or '')}): "
                f"{f.unit} waits for it; deploy.py --data restart_training=true takes it over"
            )
            v.note(i, f"training pid {pid} (waiting)")
            continue
        if taken_over_first(app, f):
            v.warnings.append(
                f"GPU {i} is held by a training pvegpu did not start (pid {pid}, "
                f"{started_how(container_path(app.get('cgroup') or '', f.vmid) or '')}): "
                f"taken over (restart_training=true) before {f.unit} starts"
            )
            v.note(i, f"training pid {pid} (taken over)")
            continue
        if counts_as_own(app, f):
            v.warnings.append(
                f"leftover training process {pid} on GPU {i}: cleared before the unit starts"
            )
            v.note(i, f"leftover pid {pid} (cleared before start)")
            continue
        u = normalize_uuid(app.get("gpu_uuid"))
        node_index = (f.by_uuid.get(u) or {}).get("index")
        what = f"{_describe(app, owner, f)} on node GPU {node_index}"
        if i is not None and i in f.role_of:
            v.problems.append(
                Problem(
                    f"GPU {i} ({f.role_of[i]}) free",
                    "no compute process but the training unit's",
                    what,
                    _process_fix(app, owner, node_index, f),
                    gpu=i,
                )
            )
            v.note(i, f"held by pid {pid}")
        else:
            v.warnings.append(f"{what}, not a training GPU of CT {f.vmid}")
            if node_index is not None:
                v.node_notes.setdefault(node_index, []).append(f"pid {pid}")


def _describe(app: dict, owner: str, f: Inputs) -> str:
    """``pid 4242 in CT 201 (python x.py) holding 1024 MiB``, ``leftover training process ...``."""
    where = {
        "node": "",
        "container": f" in CT {f.vmid} (outside {f.unit})",
        "unit": f" in CT {f.vmid} ({f.unit}, {f.unit_state.active})",
    }.get(owner, f" in CT {owner[3:]}")
    used = app.get("used_mib")
    kind = (
        "leftover training process"
        if _leftover(app, f)
        else "training process pvegpu did not start"
        if owner == "container" and is_training_command(app_argv(app), f.matcher)
        else "pid"
    )
    return (
        f"{kind} {app.get('pid')}{where} "
        f"({app.get('cmdline') or app.get('name') or '?'}) holding "
        f"{used if used is not None else '?'} MiB"
    )


def _process_fix(app: dict, owner: str, node_index: int | None, f: Inputs) -> str:
    """How to free a training GPU of this process: pvegpu never stops another container's work;
    deploy clears a leftover training process only when it starts the unit."""
    pid, unit = app.get("pid"), f.unit
    leftover = _leftover(app, f)
    if owner.startswith("ct "):
        return (
            f"node GPU {node_index} is also in use by CT {owner[3:]}: stop that workload "
            f"or pass CT {f.vmid} other GPUs (pvegpu never stops another container's work)"
        )
    if leftover and not f.unit_state.running:
        return "run deploy.py: it clears leftover training processes before it starts the unit"
    if owner == "container" and f.unit_state.running:
        return (
            f"a second trainer beside the running {unit}: stop it in CT {f.vmid} (kill "
            f"{pid} there), or run deploy.py --data restart_training=true (it takes it over: "
            "a graceful stop, once the new build is verified)"
        )
    if leftover and f.unit_state.pending:
        return (
            f"a second copy of the training beside the running {unit}: stop it on node "
            f"{f.node_name} (kill {pid}), or run deploy.py --data restart_training=true (it "
            "stops the unit, clears leftover training processes, starts it)"
        )
    return (
        f"if it is left from a killed run, stop it on node {f.node_name}: kill {pid} "
        "(then check nvidia-smi)"
    )

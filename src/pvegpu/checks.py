"""Pure comparisons of facts with expectations: each problem is one line (expectation, fact, fix).

``verify()`` compares one training container's facts (:class:`~pvegpu.facts.verification.
ContainerVerification`) and its node's (:class:`~pvegpu.facts.proxmox.NodeState`) with the
settings, and returns a :class:`Verdict`: the per-GPU rows of the table, the problems and the
warnings. Nothing here touches a host; tests/unit/test_verify_checks.py drives every branch.

>>> torch_problems({"present": True, "version": "2.11.0+cu128", "cuda": "12.8", "available": True,
...                 "device_count": 8}, "2.11.0", "cu130", "13.0", 8)[0]
... # doctest: +NORMALIZE_WHITESPACE
'torch is 2.11.0+cu128, expected 2.11.0+cu130: run deploy.py (it rebuilds the venv for
torch_variant=cu130)'
"""

from __future__ import annotations

import re
from dataclasses import asdict, dataclass, field
from typing import Any

from .facts.gpus import normalize_uuid
from .locks import normalize as normalize_name
from .settings import Settings
from .unit import RUNNING, clears_leftovers, training_matcher, unit_plan
from .variants import driver_fit

#: What the race looks like (torch/_dynamo/eval_frame.py raises it when the process-global FX
#: tracing flag is set by another thread while a compiled function is entered).
FX_RACE = "FX to symbolically trace a dynamo-optimized function"
#: Relative difference tolerated between torch's and nvidia-smi's total memory of one GPU
#: (cudaDeviceProp.totalGlobalMem and NVML's memory.total can differ by reserved memory).
MEMORY_TOLERANCE = 0.02
#: Packages a venv may carry without any pin asking for them (only when there is no lock).
SEED_PACKAGES = {"pip", "setuptools", "wheel"}


def torch_problems(
    rt: dict, version: str, variant: str, cuda: str, expected_count: int
) -> list[str]:
    """What is wrong with a torch runtime fact, given the configured build (the python env stage
    checks a new venv with this before switching to it)."""
    want = f"{version}+{variant}"
    if not rt:
        return ["torch runtime could not be read (container not reachable): run deploy.py"]
    if not rt.get("present"):
        return [f"no venv python at {rt.get('python')}: run deploy.py to build the venv"]
    if rt.get("import_error"):
        return [
            f"torch does not import in {rt.get('python')} ({rt['import_error']}): run deploy.py "
            "--data rebuild=venv"
        ]
    problems = []
    if rt.get("version") != want:
        problems.append(
            f"torch is {rt.get('version')}, expected {want}: run deploy.py "
            f"(it rebuilds the venv for torch_variant={variant})"
        )
    if rt.get("cuda") != cuda:
        problems.append(f"torch.version.cuda is {rt.get('cuda')}, expected {cuda} for {variant}")
    if not rt.get("available"):
        problems.append(
            f"CUDA is not available to torch ({rt.get('init_error') or 'no reason given'}): "
            "check the driver parity and the GPU passthrough (run deploy.py)"
        )
    elif rt.get("device_count") != expected_count:
        problems.append(
            f"torch sees {rt.get('device_count')} GPUs, expected {expected_count}: check the "
            "passthrough of every /dev/nvidiaN to the container"
        )
    return problems


# --------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class Problem:
    """One failed expectation: what was expected, what the facts say, and the fix."""

    check: str
    expected: str
    found: str
    fix: str
    gpu: int | None = None  # the container's CUDA index it concerns, if any

    def line(self) -> str:
        return f"{self.check}: expected {self.expected}; found {self.found}; fix: {self.fix}"


@dataclass
class Verdict:
    where: str
    rows: list[dict] = field(default_factory=list)
    problems: list[Problem] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)
    summary: dict[str, Any] = field(default_factory=dict)

    @property
    def ok(self) -> bool:
        return not self.problems

    def lines(self) -> list[str]:
        return [p.line() for p in self.problems]

    def as_dict(self) -> dict:
        return {
            "where": self.where,
            "verdict": "pass" if self.ok else "fail",
            "problems": [{**asdict(p), "line": p.line()} for p in self.problems],
            "warnings": list(self.warnings),
            "gpus": self.rows,
            "summary": self.summary,
        }


# --------------------------------------------------------------------------------------------
def roles(settings: Settings) -> dict[int, str]:
    """CUDA index -> ``target`` / ``drafter`` (as the trainer numbers GPUs inside the container).

    >>> from pvegpu.settings import defaults
    >>> roles(Settings.from_data(defaults()))[5]
    'drafter'
    """
    found = {i: "target" for i in settings.target_gpus}
    found.update({i: "drafter" for i in settings.drafter_gpus})
    return found


def arch_covers(capability: str | None, arch_list: list[str]) -> str | None:
    """How a build's arch list runs a GPU of ``capability`` ("9.0"): ``sm_90`` (exact), ``sm_80``
    (a cubin of the same major and a lower or equal minor runs: CUDA C++ Programming Guide,
    "Binary Compatibility"), ``compute_80`` (PTX of an equal or lower capability, JIT-compiled),
    or None. Arch-specific cubins (``sm_90a``) run only on exactly that capability.

    >>> arch_covers("9.0", ["sm_80", "sm_90"]), arch_covers("8.6", ["sm_80"])
    ('sm_90', 'sm_80')
    >>> arch_covers("12.0", ["sm_90", "sm_100"]) is None
    True
    """
    if not capability or not re.fullmatch(r"\d+\.\d+", capability):
        return None
    major, minor = (int(x) for x in capability.split("."))
    best = None
    for arch in arch_list:
        m = re.fullmatch(r"(sm|compute)_(\d+)(\d)([af]?)", arch)
        if not m:
            continue
        kind, a_major, a_minor, suffix = m.group(1), int(m.group(2)), int(m.group(3)), m.group(4)
        if kind == "sm":
            if (a_major, a_minor) == (major, minor):
                return arch
            if not suffix and a_major == major and a_minor < minor and best is None:
                best = arch
        elif not suffix and (a_major, a_minor) <= (major, minor) and best is None:
            best = arch
    return best


def _requirement(text: str):
    """(name, extras, marker-text) of a Requires-Dist value, or None if unreadable."""
    try:
        from packaging.requirements import InvalidRequirement, Requirement
    except ImportError:  # pragma: no cover (packaging comes with pyinfra)
        m = re.match(r"\s*([A-Za-z0-9][A-Za-z0-9._-]*)", text)
        return (normalize_name(m.group(1)), set(), text.partition(";")[2]) if m else None
    try:
        req = Requirement(text)
    except InvalidRequirement:
        return None
    return normalize_name(req.name), set(req.extras), str(req.marker or "")


def required_closure(installed: dict[str, dict], seeds: dict[str, set[str]]) -> set[str]:
    """Normalized names reachable from ``seeds`` (name -> requested extras) through the installed
    packages' Requires-Dist. Markers other than ``extra == ...`` are treated as possibly true, so
    the closure never calls a legitimately installed dependency extra.

    >>> inst = {"a": {"requires": ["b>=1", "c; extra == 'x'"]}, "b": {"requires": []},
    ...         "c": {"requires": []}, "junk": {"requires": []}}
    >>> sorted(required_closure(inst, {"a": set()}))
    ['a', 'b']
    """
    meta = {normalize_name(k): v for k, v in installed.items()}
    seen: set[str] = set()
    todo = list(seeds.items())
    while todo:
        name, extras = todo.pop()
        name = normalize_name(name)
        if name in seen:
            continue
        seen.add(name)
        for text in (meta.get(name) or {}).get("requires") or []:
            req = _requirement(text)
            if req is None:
                continue
            dep, dep_extras, marker = req
            wanted = re.findall(r"extra\s*==\s*['\"]([^'\"]+)['\"]", marker)
            if wanted and not set(wanted) & extras:
                continue
            todo.append((dep, dep_extras))
    return seen


def pin_seeds(settings: Settings) -> dict[str, tuple[str, set[str]]]:
    """name -> (version, extras) of the pins the venv was asked for (torch + training stack)."""
    seeds = {"torch": (f"{settings.torch_version}+{settings.torch_variant}", set())}
    for pin in settings.training_requirements:
        m = re.fullmatch(r"([A-Za-z0-9][A-Za-z0-9._-]*)(?:\[([^\]]*)\])?==(\S+)", pin)
        if m:
            extras = {e.strip() for e in (m.group(2) or "").split(",") if e.strip()}
            seeds[normalize_name(m.group(1))] = (m.group(3), extras)
    return seeds


def package_drift(installed: dict[str, dict], settings: Settings, lock: dict[str, str] | None):
    """(missing, extra, wrong) of a venv against its lock, or (without one) against the pins and
    their dependency closure. ``wrong`` is a list of (name, expected, found).

    >>> from pvegpu.settings import defaults
    >>> s = Settings.from_data({**defaults(), "training_requirements": []})
    >>> package_drift({"torch": {"version": "2.11.0+cu128", "requires": []},
    ...                "junk": {"version": "1", "requires": []}}, s, None)
    ([], ['junk==1'], [('torch', '2.11.0+cu130', '2.11.0+cu128')])
    """
    have = {normalize_name(k): v for k, v in installed.items()}
    if lock is not None:
        expected = dict(lock)
        allowed = set(expected)
    else:
        seeds = pin_seeds(settings)
        expected = {n: v for n, (v, _) in seeds.items()}
        allowed = required_closure(have, {n: e for n, (_, e) in seeds.items()}) | SEED_PACKAGES
    missing = sorted(f"{n}=={v}" for n, v in expected.items() if n not in have)
    wrong = sorted(
        (n, v, have[n].get("version"))
        for n, v in expected.items()
        if n in have and have[n].get("version") != v
    )
    extra = sorted(f"{n}=={have[n].get('version')}" for n in have if n not in allowed)
    return missing, extra, wrong


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
    """argv is the training command (:func:`pvegpu.unit.training_matcher`): argv[1] the training
    script, argv[0] the python of ``venv_path`` or of a build under ``venvs_dir``.

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
    """Whether the training unit stage's clearing (probes/training_leftovers.py, same rules) ends
    this node compute process before it starts the unit: its cgroup names no other container, and
    it is the training command or in this container's training unit cgroup.

    >>> m = {"script": "/data/t.py", "pythons": ["/root/venv/bin/python"], "python_under": []}
    >>> cleared_at_start({"argv": ["/root/venv/bin/python", "/data/t.py"]}, 200, None, m)
    True
    >>> cleared_at_start({"argv": ["/root/venv/bin/python", "/data/t.py"],
    ...                   "cgroup": "0::/lxc/201/ns/system.slice/x.service"}, 200, None, m)
    False
    """
    cgroup = app.get("cgroup") or ""
    other = re.search(r"/lxc(?:\.payload)?[./](\d+)(?:/|$)", cgroup, re.M)
    if other and other.group(1) != str(vmid):
        return False
    if is_training_command(app_argv(app), matcher):
        return True
    return bool(unit) and any(
        f"/lxc/{vmid}/" in line and line.rstrip().endswith("/" + unit)
        for line in cgroup.splitlines()
    )


def _cuda_fix(error: str, settings: Settings, vmid: int) -> str:
    low = error.lower()
    if "too old" in low:
        return (
            f"upgrade the node's NVIDIA driver to >= {settings.variant.min_driver}, then run "
            "deploy.py (matches the container's userspace), or set torch_variant to a build "
            "the driver supports"
        )
    if "mismatch" in low or "803" in low or "unsupported display driver" in low:
        return "run deploy.py: it installs the node driver's exact userspace into the container"
    if "found no nvidia driver" in low or "no nvidia driver" in low:
        return (
            f"run deploy.py: CT {vmid} needs libcuda.so.1 from the node driver's .run "
            "installer and /dev/nvidiactl passed through"
        )
    if "unknown error" in low or "999" in low:
        return (
            f"pass /dev/nvidia-uvm through to CT {vmid} (on the node: nvidia-modprobe -u -c 0), "
            "then run deploy.py"
        )
    return f"check the driver parity and the GPU passthrough of CT {vmid}: run deploy.py"


def _node_only_row(g: dict, status: str) -> dict:
    """A table row for a node GPU the container's torch does not show."""
    return {
        "gpu": None,
        "node_gpu": g.get("index"),
        "name": g.get("name"),
        "uuid": g.get("uuid"),
        "total_mib": g.get("memory_total_mib"),
        "free_mib": None,
        "capability": None,
        "role": "-",
        "status": status,
    }


# --------------------------------------------------------------------------------------------
def verify(
    settings: Settings,
    node: dict,
    ct: dict,
    *,
    where: str,
    vmid: int,
    node_name: str = "the node",
    lock: dict[str, str] | None = None,
    lock_source: str | None = None,
    unit: str | None = None,
    deploying: bool = False,
) -> Verdict:
    """Compare one container's facts and its node's with the settings.

    ``deploying``: the verify stage of deploy.py, whose training unit stage runs next. A leftover
    training process on a training GPU (:func:`cleared_at_start`) that stage will clear (the unit
    is not running, or a pending restart is asked for) is then a warning, and its memory counts as
    free; verify.py (read-only) reports it as a problem whose fix is to run deploy.py.
    """
    v = Verdict(where)
    P = v.problems.append
    variant = settings.variant
    want = f"{settings.torch_version}+{settings.torch_variant}"
    role_of = roles(settings)
    notes: dict[int, list[str]] = {}  # CUDA index -> short status notes for the table
    node_notes: dict[int, list[str]] = {}

    def note(i, text):
        notes.setdefault(i, []).append(text)

    # ---- node: driver and GPUs ----------------------------------------------------------------
    node_driver = node.get("driver_version")
    node_gpus = node.get("gpus")
    if not node:
        P(
            Problem(
                "node facts",
                f"readable facts of node {node_name}",
                "none (not reachable)",
                f"check SSH to {node_name}",
            )
        )
    elif not node_driver:
        P(
            Problem(
                "node driver",
                f"an NVIDIA driver >= {variant.min_driver} loaded on {node_name}",
                "none (/proc/driver/nvidia/version missing)",
                f"install the NVIDIA driver >= {variant.min_driver} on the node and reboot",
            )
        )
    else:
        fit = driver_fit(variant, node_driver)
        if fit == "too_old":
            P(
                Problem(
                    f"driver for {settings.torch_variant}",
                    f">= {variant.min_driver} (CUDA {variant.cuda})",
                    f"{node_driver} on node {node_name}",
                    f"upgrade the node's NVIDIA driver to >= {variant.min_driver} (then deploy.py "
                    "matches the container), or set torch_variant to a build the driver supports",
                )
            )
        elif fit == "reduced":
            v.warnings.append(
                f"driver {node_driver} runs {settings.torch_variant} only in CUDA minor-version "
                f"compatibility mode (reduced features); >= {variant.min_driver} recommended"
            )
    if node and node_driver and node_gpus is None:
        P(
            Problem(
                "node GPUs",
                f"nvidia-smi on {node_name} lists the GPUs",
                " ".join(node.get("gpu_error") or []) or "nvidia-smi failed",
                "fix the node's driver install (nvidia-smi must work on the node)",
            )
        )
    elif node_gpus is not None and len(node_gpus) != settings.expected_gpu_count:
        P(
            Problem(
                "node GPU count",
                f"{settings.expected_gpu_count} (expected_gpu_count)",
                f"{len(node_gpus)} listed by nvidia-smi on {node_name}",
                "check the GPUs (nvidia-smi -L on the node) or set expected_gpu_count",
            )
        )
    by_uuid = {normalize_uuid(g.get("uuid")): g for g in node_gpus or [] if g.get("uuid")}

    # ---- container: driver userspace parity ---------------------------------------------------
    drv = ct.get("driver") or {}
    if ct and node_driver:
        found = {
            "libcuda": drv.get("libcuda"),
            "libnvidia-ml": drv.get("libnvidia_ml"),
            "nvidia-smi": drv.get("smi"),
        }
        if not found["libcuda"]:
            P(
                Problem(
                    "driver parity",
                    f"libcuda.so.{node_driver} in CT {vmid} (= node)",
                    f"no libcuda.so.1 in CT {vmid}",
                    f"run deploy.py (installs NVIDIA-Linux-x86_64-{node_driver}.run "
                    "--no-kernel-modules in the container)",
                )
            )
        else:
            differ = {k: x for k, x in found.items() if x and x != node_driver}
            if differ:
                P(
                    Problem(
                        "driver parity",
                        f"container userspace {node_driver} (= node's module)",
                        ", ".join(f"{k} {x}" for k, x in differ.items()) + f" in CT {vmid}",
                        "run deploy.py: it installs the node driver's exact userspace",
                    )
                )
    if (
        ct
        and ct.get("gpu_error")
        and "not installed" not in ct["gpu_error"]
        and ("mismatch" in ct["gpu_error"] or not ct.get("gpus"))
    ):
        v.warnings.append(f"nvidia-smi in CT {vmid}: {ct['gpu_error']}")

    # ---- torch --------------------------------------------------------------------------------
    rt = ct.get("torch") if ct else None
    devices: list[dict] = []
    available = False
    if not ct:
        P(
            Problem(
                "container facts",
                f"CT {vmid} answers",
                "no answer",
                f"start CT {vmid} (pct start {vmid}) or run deploy.py",
            )
        )
    elif not ct.get("present"):
        P(
            Problem(
                "venv",
                f"{ct.get('venv')} with torch {want}",
                f"no {ct.get('python')}",
                "run deploy.py (it builds the venv and links it)",
            )
        )
    elif rt.get("import_error"):
        P(
            Problem(
                "torch import",
                f"import torch works in {ct.get('venv')}",
                rt["import_error"],
                "run deploy.py --data rebuild=venv",
            )
        )
    else:
        if rt.get("version") != want:
            P(
                Problem(
                    "torch build",
                    want,
                    f"{rt.get('version')} in {ct.get('venv')}",
                    f"run deploy.py (switches {ct.get('venv')} to {want}; the other build is "
                    "kept for rollback)",
                )
            )
        elif rt.get("cuda") != variant.cuda:
            P(
                Problem(
                    "torch CUDA",
                    f"torch.version.cuda {variant.cuda} ({settings.torch_variant})",
                    str(rt.get("cuda")),
                    "run deploy.py --data rebuild=venv",
                )
            )
        available = bool(rt.get("available"))
        if not available:
            reason = rt.get("init_error") or "is_available() is False, no CUDA device visible"
            P(
                Problem(
                    "CUDA init",
                    "torch.cuda.is_available() is True",
                    f"CUDA error: {reason}",
                    _cuda_fix(reason, settings, vmid),
                )
            )
        else:
            devices = list(rt.get("devices") or [])
            count = rt.get("device_count", len(devices))
            if count != settings.expected_gpu_count:
                seen = {normalize_uuid(d.get("uuid")) for d in devices}
                missing = sorted(g["index"] for u, g in by_uuid.items() if u not in seen)
                detail = (
                    f" (node GPU {', '.join(map(str, missing))} not passed through)"
                    if missing
                    else ""
                )
                P(
                    Problem(
                        "GPU count",
                        f"{settings.expected_gpu_count} GPUs visible to torch (expected_gpu_count)",
                        f"{count}{detail}",
                        f"pass every /dev/nvidiaN through to CT {vmid}: run deploy.py",
                    )
                )
            for i in sorted(role_of):
                if i >= count:
                    P(
                        Problem(
                            f"GPU {i} ({role_of[i]})",
                            f"CUDA device {i} present in CT {vmid}",
                            f"only {count} devices (0..{count - 1})",
                            f"pass the node's GPUs through to CT {vmid}: run deploy.py",
                            gpu=i,
                        )
                    )
    # ---- per device: identity, capability, memory ---------------------------------------------
    arch_list = list((rt or {}).get("arch_list") or [])
    rows = []
    matched_nodes = set()
    for d in devices:
        i = d.get("index")
        g = by_uuid.get(normalize_uuid(d.get("uuid")))
        role = role_of.get(i, "-")
        if d.get("error"):
            P(
                Problem(
                    f"GPU {i}",
                    "its properties readable by torch",
                    d["error"],
                    "check the GPU on the node (nvidia-smi -q) and its passthrough",
                    gpu=i,
                )
            )
            note(i, "unreadable")
        if node_gpus is not None and g is None:
            P(
                Problem(
                    f"GPU {i} identity",
                    "a UUID the node's nvidia-smi lists",
                    f"{d.get('uuid') or 'no UUID'}",
                    "check the passthrough maps the node's GPUs (pct config; run deploy.py)",
                    gpu=i,
                )
            )
            note(i, "unknown to node")
        elif g is not None:
            matched_nodes.add(g.get("index"))
            if g.get("name") and d.get("name") and g["name"] != d["name"]:
                P(
                    Problem(
                        f"GPU {i} model",
                        f"{g['name']} (node GPU {g['index']})",
                        d["name"],
                        "check which GPU is passed through (pct config)",
                        gpu=i,
                    )
                )
                note(i, "model differs")
            tot, node_tot = d.get("total_mib"), g.get("memory_total_mib")
            if tot and node_tot and abs(tot - node_tot) > MEMORY_TOLERANCE * node_tot:
                P(
                    Problem(
                        f"GPU {i} memory",
                        f"{node_tot} MiB total (node GPU {g['index']})",
                        f"{tot} MiB in torch",
                        "check the GPU (MIG mode? nvidia-smi -q on the node)",
                        gpu=i,
                    )
                )
                note(i, "memory differs")
        cap = d.get("capability")
        if cap and arch_list and arch_covers(cap, arch_list) is None:
            P(
                Problem(
                    f"GPU {i} arch",
                    f"sm_{cap.replace('.', '')} in the build's arch list",
                    f"{' '.join(arch_list)} for compute capability {cap}",
                    "choose a torch_variant built for this GPU",
                    gpu=i,
                )
            )
            note(i, f"sm_{cap.replace('.', '')} unsupported")
        rows.append(
            {
                "gpu": i,
                "node_gpu": g.get("index") if g else None,
                "name": d.get("name"),
                "uuid": d.get("uuid"),
                "total_mib": d.get("total_mib"),
                "free_mib": d.get("free_mib"),
                "capability": cap,
                "role": role,
            }
        )

    # ---- compute processes on the node ---------------------------------------------------------
    # The training unit's state (None: unknown, e.g. no container facts): its processes are its own
    # only while it runs; a stopped unit's, or the training command outside a running one, are
    # leftovers, which the training unit stage clears before it starts the unit.
    unit_doc = (ct or {}).get("unit")
    active = unit_doc.get("active") if isinstance(unit_doc, dict) else None
    running: bool | None = None
    pending: list[str] = []
    clears = False
    if active is not None:
        active, pending = unit_plan(
            settings, active, unit_doc.get("started"), unit_doc.get("built")
        )
        running = active in RUNNING
        clears = clears_leftovers(settings, active, pending)
    matcher = training_matcher(settings)
    own_used: dict[str, int] = {}
    cuda_of_uuid = {normalize_uuid(d.get("uuid")): d.get("index") for d in devices}
    for app in node.get("compute_apps") or []:
        u = normalize_uuid(app.get("gpu_uuid"))
        owner = process_owner(app, vmid, unit)
        if owner == "unit" and running is not False:
            own_used[u] = own_used.get(u, 0) + (app.get("used_mib") or 0)
            continue
        i = cuda_of_uuid.get(u)
        node_index = (by_uuid.get(u) or {}).get("index")
        pid = app.get("pid")
        leftover = (
            running is not None and i in role_of and cleared_at_start(app, vmid, unit, matcher)
        )
        if leftover and deploying and clears:
            v.warnings.append(
                f"leftover training process {pid} on GPU {i}: cleared before the unit starts"
            )
            own_used[u] = own_used.get(u, 0) + (app.get("used_mib") or 0)
            note(i, f"leftover pid {pid} (cleared before start)")
            continue
        where_ = {
            "node": "",
            "container": f" in CT {vmid} (outside {unit})",
            "unit": f" in CT {vmid} ({unit}, {active})",
        }.get(owner, f" in CT {owner[3:]}")
        what = (
            f"{'leftover training process' if leftover else 'pid'} {pid}{where_} "
            f"({app.get('cmdline') or app.get('name') or '?'}) holding "
            f"{app.get('used_mib') if app.get('used_mib') is not None else '?'} MiB"
        )
        if i is not None and i in role_of:
            if owner.startswith("ct "):
                fix = (
                    f"node GPU {node_index} is also in use by CT {owner[3:]}: stop that workload "
                    f"or pass CT {vmid} other GPUs (pvegpu never stops another container's work)"
                )
            elif leftover and not running:
                fix = (
                    "run deploy.py: it clears leftover training processes before it starts the unit"
                )
            elif leftover and pending:
                fix = (
                    f"a second copy of the training beside the running {unit}: stop it on node "
                    f"{node_name} (kill {pid}), or run deploy.py --data restart_training=true (it "
                    "stops the unit, clears leftover training processes, starts it)"
                )
            else:
                fix = (
                    f"if it is left from a killed run, stop it on node {node_name}: kill {pid} "
                    "(then check nvidia-smi)"
                )
            P(
                Problem(
                    f"GPU {i} ({role_of[i]}) free",
                    "no compute process but the training unit's",
                    f"{what} on node GPU {node_index}",
                    fix,
                    gpu=i,
                )
            )
            note(i, f"held by pid {pid}")
        else:
            v.warnings.append(f"{what} on node GPU {node_index}, not a training GPU of CT {vmid}")
            if node_index is not None:
                node_notes.setdefault(node_index, []).append(f"pid {pid}")

    # ---- free memory on training GPUs -----------------------------------------------------------
    for row in rows:
        i = row["gpu"]
        if i not in role_of or row["free_mib"] is None:
            continue
        usable = row["free_mib"] + own_used.get(normalize_uuid(row["uuid"]), 0)
        if usable < settings.min_free_gpu_mib:
            P(
                Problem(
                    f"GPU {i} ({role_of[i]}) memory",
                    f">= {settings.min_free_gpu_mib} MiB free (min_free_gpu_mib)",
                    f"{row['free_mib']} MiB free",
                    "free the GPU (see its compute processes: nvidia-smi on the node)",
                    gpu=i,
                )
            )
            note(i, "low free memory")

    # ---- venv vs its lock -----------------------------------------------------------------------
    installed = (ct or {}).get("packages")
    torch_reported = any(p.check == "torch build" for p in v.problems)
    drift = None
    if installed is not None:
        missing, extra, wrong = package_drift(installed, settings, lock)
        basis = lock_source or "its pins and their dependencies (no lock)"
        drift = {"missing": missing, "extra": extra, "wrong": wrong, "basis": basis}
        found = []
        if missing:
            found.append("missing " + ", ".join(missing))
        if torch_reported:  # the torch build line already says it
            wrong = [w for w in wrong if w[0] != "torch"]
        if wrong:
            found.append("wrong " + ", ".join(f"{n} {have} (want {exp})" for n, exp, have in wrong))
        if extra:
            found.append("extra " + ", ".join(extra))
        if found:
            P(
                Problem(
                    "venv packages",
                    f"exactly {basis}",
                    "; ".join(found),
                    "run deploy.py (re-syncs the venv), or deploy.py --data rebuild=venv",
                )
            )
        pip_check = ct.get("pip_check")
        if pip_check and pip_check.get("rc") not in (0, None):
            lines = [
                x
                for x in (pip_check.get("output") or "").splitlines()
                if x.strip() and not x.startswith("Checked ")
            ]
            P(
                Problem(
                    "venv dependencies",
                    "uv pip check clean",
                    "; ".join(lines[:3]) or f"exit {pip_check['rc']}",
                    "run deploy.py --data rebuild=venv",
                )
            )
        elif pip_check is None:
            v.warnings.append("uv pip check not run (uv not installed in the container)")

    # ---- concurrent compile ---------------------------------------------------------------------
    comp = (ct or {}).get("compile")
    if settings.verify_level == "compile":
        if comp is None:
            v.warnings.append("compile check not run: CUDA is not available in the venv")
        else:
            _compile_problems(v, comp, rt or {}, settings)

    # ---- rows for the table ---------------------------------------------------------------------
    problems_by_gpu = {p.gpu for p in v.problems if p.gpu is not None}
    for row in rows:
        row["status"] = "; ".join(notes.get(row["gpu"], [])) or (
            "problem" if row["gpu"] in problems_by_gpu else "ok"
        )
    for i in sorted(role_of):
        if i not in {r["gpu"] for r in rows} and available:
            rows.append(
                {
                    "gpu": i,
                    "node_gpu": None,
                    "name": None,
                    "uuid": None,
                    "total_mib": None,
                    "free_mib": None,
                    "capability": None,
                    "role": role_of[i],
                    "status": "missing",
                }
            )
    for g in node_gpus or []:
        if not available:
            rows.append(_node_only_row(g, "not visible (CUDA unavailable)"))
        elif g.get("index") not in matched_nodes:
            notes_here = node_notes.get(g.get("index"), [])
            rows.append(_node_only_row(g, "; ".join(["not passed through", *notes_here])))
    v.rows = rows
    v.summary = {
        "torch": (rt or {}).get("version"),
        "torch_expected": want,
        "cuda": (rt or {}).get("cuda"),
        "cudnn": (rt or {}).get("cudnn"),
        "nccl": (rt or {}).get("nccl"),
        "arch_list": arch_list,
        "available": available,
        "init_error": (rt or {}).get("init_error"),
        "device_count": (rt or {}).get("device_count"),
        "expected_gpu_count": settings.expected_gpu_count,
        "target_gpus": list(settings.target_gpus),
        "drafter_gpus": list(settings.drafter_gpus),
        "driver_node": node_driver,
        "driver_container": drv,
        "node_gpu_count": len(node_gpus) if node_gpus is not None else None,
        "container_gpus": (ct or {}).get("gpus"),
        "container_gpu_error": (ct or {}).get("gpu_error"),
        "compute_apps": node.get("compute_apps") or [],
        "unit_active": active,
        "restart_pending": pending,
        "venv": (ct or {}).get("venv"),
        "venv_real": (ct or {}).get("venv_real"),
        "packages": drift,
        "compile": comp,
        "verify_level": settings.verify_level,
    }
    return v


def _compile_problems(v: Verdict, comp: dict, rt: dict, settings: Settings) -> None:
    build = rt.get("version") or f"{settings.torch_version}+{settings.torch_variant}"
    threads = comp.get("threads") or []
    n = len(threads)
    failed = [t for t in threads if not t.get("ok")]
    if comp.get("error"):
        v.problems.append(
            Problem(
                "concurrent torch.compile",
                "flex_attention compiles in the venv",
                comp["error"],
                "run deploy.py --data rebuild=venv",
            )
        )
        return
    serial = comp.get("serial") or {}
    serial_text = (
        f"compiling under a lock, one device at a time, worked here in {serial.get('seconds')} s"
        if serial.get("ok")
        else f"compiling under a lock also failed: {serial.get('error')}"
        if serial
        else ""
    )
    if comp.get("race"):
        racing = [t["gpu"] for t in failed if FX_RACE in (t.get("error") or "")]
        v.problems.append(
            Problem(
                "concurrent torch.compile",
                f"flex_attention compiles from {n} threads at once (one per GPU, as the trainer "
                "does)",
                f"FX-tracing race on GPU {', '.join(map(str, racing))} with torch {build}: "
                f"RuntimeError: Detected that you are using {FX_RACE}",
                "torch's FX-tracing flag is process-wide: run one training process per GPU, or "
                "compile under a lock and warm each device in turn before training"
                + (f"; {serial_text}" if serial_text else ""),
            )
        )
    elif failed:
        t = failed[0]
        v.problems.append(
            Problem(
                "concurrent torch.compile",
                f"flex_attention compiles on all {n} GPUs",
                f"GPU {t.get('gpu')}: {t.get('error')}"
                + (f" (+{len(failed) - 1} more)" if len(failed) > 1 else ""),
                "check the GPU and the torch build (run the check again with -v for the facts)"
                + (f"; {serial_text}" if serial_text else ""),
            )
        )
    if comp.get("fallback"):
        v.problems.append(
            Problem(
                "concurrent torch.compile",
                "compiled kernels (no eager fallback)",
                f"fell back: {comp['fallback'][0]}",
                "fix the compile (TORCH_LOGS=graph_breaks,recompiles in the trainer) before a long "
                "run",
            )
        )

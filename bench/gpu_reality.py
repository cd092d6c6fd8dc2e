"""A check of pvegpu's beliefs against a real NVIDIA GPU: one command, no network, a few minutes.

    python3 bench/gpu_reality.py --out DIR [--python PYTHON] [--env KEY=VALUE ...]

Runs on any machine with an NVIDIA GPU and a python3 with torch (no Proxmox, no pyinfra: pvegpu's
fact modules are imported from src/ with a stand-in for the two pyinfra names they use). It runs
pvegpu's own probes as a container runs them (the node probe, the verification probe, the torch
and compile probes, nvidia-smi's queries), then what the torchrun unit's stop relies on
(bench/gpu_reality_torchrun.py: torchrun's options, DataLoader workers and SIGTERM, an NCCL worker
of a held launcher), and writes DIR/report.md, DIR/report.json and the raw captures (DIR/raw/).
Without a GPU it says "not a real GPU", runs the torchrun checks that need none (where the python
has torch) and exits 0; under the simulator's doubles it says so too and checks the bench itself
(tests/sim/test_gpu_reality_bench.py). Every step has a timeout and the whole run a budget
(``--budget``, 280 s). Asserts nothing: the report sets what was found beside what the product
expects.
"""

from __future__ import annotations

import argparse
import datetime
import importlib.util
import json
import os
import shutil
import stat
import subprocess
import sys
import time
import types
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def bench_module(name: str):
    """A module of bench/ loaded by path (bench/ on sys.path would shadow other names)."""
    spec = importlib.util.spec_from_file_location(name, ROOT / "bench" / f"{name}.py")
    module = importlib.util.module_from_spec(spec)  # type: ignore[arg-type]
    spec.loader.exec_module(module)  # type: ignore[union-attr]
    return module


rep = bench_module("gpu_reality_report")
tch = bench_module("gpu_reality_torch")
trn = bench_module("gpu_reality_torchrun")
trc = bench_module("gpu_reality_torchrun_checks")

SMI_USED = ["--query-gpu=uuid,memory.used", "--format=csv,noheader,nounits"]
SMI_APPS = ["--query-compute-apps=pid,used_memory,gpu_uuid", "--format=csv,noheader,nounits"]
VALUES = ["index", "uuid", "fabric.state", "fabric.status", "compute_mode", "persistence_mode"]
PROBES = ("node_state", "verification", "training_held", "training_leftovers", "ct_view")


def pvegpu():
    """pvegpu's fact and probe modules, from src/; where pyinfra is not installed (a bare GPU
    machine), its two names they import (FactBase, FactProcessError) are stood in."""
    sys.path.insert(0, str(ROOT / "src"))
    try:
        import pyinfra.api.exceptions  # noqa: F401
    except ImportError:
        api, exc = types.ModuleType("pyinfra.api"), types.ModuleType("pyinfra.api.exceptions")
        api.FactBase = type("FactBase", (), {})  # type: ignore[attr-defined]
        exc.FactProcessError = type("FactProcessError", (Exception,), {})  # type: ignore[attr-defined]
        api.exceptions = exc  # type: ignore[attr-defined]
        top = types.ModuleType("pyinfra")
        top.api = api  # type: ignore[attr-defined]
        sys.modules.update({"pyinfra": top, "pyinfra.api": api, "pyinfra.api.exceptions": exc})
    from pvegpu.facts import gpus, probe, verification

    return types.SimpleNamespace(gpus=gpus, probe=probe, verification=verification)


# ---- the held-GPU part of the probes' arguments (the one place that knows it) ----------------


def held_args(script: str, python: str) -> dict:
    """The verification probe's arguments that make it see the holder (``python script``) as a
    running training; the probe then decides which GPUs it holds. Today: ``training_matcher``."""
    return {"training_matcher": {"script": script, "pythons": [python], "python_under": []}}


def no_context_env(uuids) -> dict:
    """torch_inner's environment for "make no CUDA context on these GPUs" ("*": all)."""
    return {"PVEGPU_NO_CONTEXT": ",".join(uuids)}


class Run:
    """One bench run: where it writes, the python with torch, the extra environment, the clock."""

    def __init__(self, out: Path, python: str, env: dict, budget: float):
        self.out, self.raw, self.work = out, out / "raw", out / "work"
        for d in (self.raw, self.work):
            d.mkdir(parents=True, exist_ok=True)
        self.python, self.env, self.t0, self.budget = python, env, time.monotonic(), budget

    def left(self) -> float:
        return self.budget - (time.monotonic() - self.t0)

    def sh(self, name, argv, timeout=60.0, env=None, stdin=None) -> dict:
        """``argv`` run (its output saved as raw/<name>.txt): rc, stdout, stderr, seconds."""
        t0 = time.monotonic()
        try:
            p = subprocess.run(
                argv,
                capture_output=True,
                text=True,
                input=stdin,
                timeout=max(1.0, min(timeout, self.left())),
                env={**os.environ, **self.env, **(env or {})},
            )
            r = {"rc": p.returncode, "stdout": p.stdout, "stderr": p.stderr}
        except (OSError, subprocess.TimeoutExpired) as e:
            r = {"rc": 127 if isinstance(e, OSError) else 124, "stdout": "", "stderr": str(e)}
        r["seconds"] = round(time.monotonic() - t0, 2)
        text = f"$ {' '.join(map(str, argv))[:300]}\n# rc {r['rc']}\n{r['stdout']}{r['stderr']}"
        (self.raw / f"{name}.txt").write_text(text)
        return r

    def capture(self, name, path) -> str | None:
        """A file's text (saved as raw/<name>.txt), None when it cannot be read."""
        try:
            text = Path(path).read_text()
        except OSError:
            return None
        (self.raw / f"{name}.txt").write_text(text)
        return text


LIBCUDA = "/usr/lib/x86_64-linux-gnu/libcuda.so.1"


def first_bytes(path: str, n: int) -> bytes:
    try:
        with open(path, "rb") as f:
            return f.read(n)
    except OSError:
        return b""


def detect(r: Run) -> tuple[bool, bool, str]:
    """(a GPU answers, it is the simulator's, the line to print)."""
    listed = r.sh("nvidia-smi-L", ["nvidia-smi", "-L"])
    if listed["rc"] != 0 or "GPU " not in listed["stdout"]:
        why = (listed["stderr"] or listed["stdout"]).strip().splitlines()[:1] or ["no output"]
        return False, False, f"not a real GPU: nvidia-smi -L says {why[0]!r}"
    simulated = Path("/proc/driver/nvidia/sim").is_dir() or first_bytes(LIBCUDA, 9) == b"SIMULATED"
    if simulated:
        return True, True, "not a real GPU: the simulator's doubles answer (this checks the bench)"
    return True, False, "a real NVIDIA GPU answers"


def captures(r: Run) -> dict:
    """What the product reads from the driver: nvidia-smi's own lists and /proc, /dev."""
    out = {}
    for name, args in (
        ("version", ["--version"]),
        ("q", ["-q"]),
        ("help-query-gpu", ["--help-query-gpu"]),
        ("help-query-compute-apps", ["--help-query-compute-apps"]),
    ):
        out[name] = r.sh(f"nvidia-smi-{name}", ["nvidia-smi", *args])
    files = {
        "proc-driver-nvidia-version": "/proc/driver/nvidia/version",
        "proc-devices": "/proc/devices",
    }
    for info in sorted(Path("/proc/driver/nvidia/gpus").glob("*/information")):
        files[f"gpu-{info.parent.name.replace(':', '_')}-information"] = str(info)
    read = {name: r.capture(name, path) for name, path in files.items()}
    nodes = {}
    for dev in sorted(Path("/dev").glob("nvidia*")) + sorted(Path("/dev").glob("nvidia-caps/*")):
        try:
            st = dev.stat()
        except OSError:
            continue
        if stat.S_ISCHR(st.st_mode):
            nodes[str(dev)] = f"{os.major(st.st_rdev)}:{os.minor(st.st_rdev)}"
    out["files"] = {k: v is not None for k, v in read.items()}
    out["dev"] = nodes
    out["proc_devices"] = rep.nvidia_devices(read.get("proc-devices") or "")
    out["nvswitches"] = sorted(
        p.name for p in Path("/proc/driver/nvidia-nvswitch/devices").glob("*")
    )
    return out


def queries(r: Run, pv, cap: dict) -> dict:
    """Every nvidia-smi query in pvegpu's probes, run here: accepted, and parsed by pvegpu."""
    sources = {n: pv.probe.probe_source(n) for n in PROBES}
    asked = rep.product_queries(sources)
    asked += [("gpu", tuple(pv.gpus.GPU_QUERY)), ("compute-apps", tuple(pv.gpus.APP_QUERY))]
    known = {
        "gpu": rep.help_fields(cap["help-query-gpu"]["stdout"]),
        "compute-apps": rep.help_fields(cap["help-query-compute-apps"]["stdout"]),
    }
    out = {"queries": []}
    for i, (kind, fields) in enumerate(sorted(set(asked))):
        argv = ["nvidia-smi", f"--query-{kind}={','.join(fields)}", "--format=csv,noheader,nounits"]
        got = r.sh(f"query-{i}-{kind}", argv)
        out["queries"].append(
            {
                "kind": kind,
                "fields": list(fields),
                "rc": got["rc"],
                "unknown": sorted(set(fields) - known[kind]) if known[kind] else None,
            }
        )
    gpu = r.sh(
        "query-gpu-product",
        [
            "nvidia-smi",
            f"--query-gpu={','.join(pv.gpus.GPU_QUERY)}",
            "--format=csv,noheader,nounits",
        ],
    )
    out["gpu_rows"] = pv.gpus.parse_smi(gpu, "gpus")
    apps = r.sh(
        "query-apps-product",
        [
            "nvidia-smi",
            f"--query-compute-apps={','.join(pv.gpus.APP_QUERY)}",
            "--format=csv,noheader,nounits",
        ],
    )
    out["app_rows"] = pv.gpus.parse_smi(apps, "apps")
    vals = r.sh(
        "query-values", ["nvidia-smi", f"--query-gpu={','.join(VALUES)}", "--format=csv,noheader"]
    )
    rows = rep.csv_rows(vals["stdout"], VALUES) if vals["rc"] == 0 else []
    out["values"] = {f: rep.values(rows, f) for f in VALUES[2:]}
    r.sh(
        "query-values-header",
        ["nvidia-smi", f"--query-gpu={','.join(VALUES)},memory.used", "--format=csv"],
    )
    return out


def node_probe(r: Run, pv) -> dict:
    """pvegpu's node probe, as the node runs it (no Proxmox here: its Proxmox parts are empty)."""
    args = {
        "vmids": [],
        "units": ["nvidia-fabricmanager.service", "nvidia-persistenced.service"],
        "boot_files": [],
        "paths": [],
        "storage_contents": [],
    }
    got = r.sh("node-probe", ["sh", "-c", pv.probe.probe_command("node_state", args)], 120)
    doc = pv.probe.parse_probe_output("node_state", got["stdout"].splitlines())
    keep = (
        "driver_version",
        "driver_version_smi",
        "gpus",
        "gpu_error",
        "compute_apps",
        "devices",
        "majors",
        "fabric",
        "nvswitches",
        "fabricmanager_version",
        "units",
        "tools",
    )
    return {k: doc.get(k) for k in keep}


HOLDER = """import sys, torch
x = torch.empty(64 * 1024 * 1024, device="cuda:0")  # 256 MiB of float32
torch.cuda.synchronize(0)
print("ready", flush=True)
sys.stdin.read()
"""


def holder_check(r: Run, pv) -> dict:
    """A process holding GPU 0's memory (as a training would), and the verification probe's
    held-GPU decision beside it: no CUDA context on the held GPU."""
    venv = r.work / "venv"
    (venv / "bin").mkdir(parents=True, exist_ok=True)
    python = venv / "bin" / "python"
    if not python.exists():
        python.symlink_to(shutil.which(r.python) or r.python)
    script = r.work / "holder.py"
    script.write_text(HOLDER)
    env = {**os.environ, **r.env, **tch.ORDER}
    holder = subprocess.Popen(
        [str(python), str(script)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
    )
    try:
        ready = holder.stdout.readline().strip() if holder.stdout else ""
        if ready != "ready":
            why = holder.stderr.read()[-300:] if holder.stderr else ""
            return {"error": f"the holder did not start: {why}"}
        fact = pv.verification.ContainerVerification()
        cmd = fact.command(
            venv=str(venv), timeout=120, read_only=True, **held_args(str(script), str(python))
        )
        got = r.sh("verification-probe", ["sh", "-c", cmd], 180)
        doc = fact.process(got["stdout"].splitlines())
        apps = r.sh("apps-beside-holder", ["nvidia-smi", *SMI_APPS])
    finally:
        holder.communicate("", timeout=60)
    return {
        "holder_pid": holder.pid,
        "beside_training": doc.get("beside_training"),
        "devices": (doc.get("torch") or {}).get("devices"),
        "apps": apps["stdout"],
        "gpus": doc.get("gpus"),
    }


# these need no GPU (the NCCL check says it is skipped without one: ``pv`` None)
TORCHRUN = (
    ("torchrun_options", lambda r, pv, s: trn.torchrun_options(r)),
    ("dataloader", lambda r, pv, s: trn.loader_signals(r, s["torchrun_options"])),
    ("nccl_held", lambda r, pv, s: trn.held_launcher(r, pv is not None, s["torchrun_options"])),
)
STEPS = (
    ("captures", lambda r, pv, s: captures(r)),
    ("queries", lambda r, pv, s: queries(r, pv, s["captures"])),
    ("node", lambda r, pv, s: node_probe(r, pv)),
    ("torch", lambda r, pv, s: tch.torch_facts(r)),
    ("contexts", lambda r, pv, s: tch.context_runs(r, pv, no_context_env)),
    ("holder", lambda r, pv, s: holder_check(r, pv)),
    *TORCHRUN,
    # last: it takes what is left of the budget
    ("compile", lambda r, pv, s: tch.compile_runs(r, pv)),
)


def run_steps(r: Run, pv, steps_to_run=STEPS) -> dict:
    """Each step in turn (``pv`` None: no GPU, so the torchrun steps alone)."""
    steps: dict = {}
    for name, step in steps_to_run:
        if r.left() < 10:
            steps[name] = {"error": "skipped: the time budget is spent"}
            continue
        t0 = time.monotonic()
        try:
            steps[name] = step(r, pv, steps)
        except Exception as e:  # noqa: BLE001 (one failing step is a finding, not the end)
            steps[name] = {"error": f"{type(e).__name__}: {e}"}
        print(f"gpu_reality: {name} ({time.monotonic() - t0:.1f} s)", flush=True)
    return steps


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", required=True, type=Path, help="the folder for the report")
    ap.add_argument("--python", default="python3", help="a python with torch (default python3)")
    ap.add_argument("--env", action="append", default=[], help="KEY=VALUE for its processes")
    ap.add_argument("--budget", type=float, default=280.0, help="seconds for the whole run")
    a = ap.parse_args(argv)
    r = Run(a.out, a.python, dict(e.split("=", 1) for e in a.env), a.budget)
    found, simulated, line = detect(r)
    print(line, flush=True)
    report: dict = {
        "date": datetime.date.today().isoformat(),
        "verdict": line,
        "real_gpu": found and not simulated,
        "simulated": simulated,
    }
    if found:
        report["steps"] = run_steps(r, pvegpu())
        report["checks"] = rep.checks(report["steps"])
    else:  # torchrun and the DataLoader need no GPU; the NCCL check says it is skipped
        report["steps"] = run_steps(r, None, TORCHRUN)
        report["checks"] = []
    report["environment"] = rep.environment(report["steps"])
    report["checks"] += trc.torchrun_checks(report["steps"])
    report["seconds"] = round(time.monotonic() - r.t0, 1)
    (a.out / "report.json").write_text(json.dumps(report, indent=1, sort_keys=True, default=str))
    (a.out / "report.md").write_text(rep.markdown(report))
    print(f"gpu_reality: {a.out / 'report.md'} ({report['seconds']} s)")
    return 0


if __name__ == "__main__":
    sys.exit(main())

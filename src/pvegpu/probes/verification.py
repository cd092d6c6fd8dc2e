# Probe: everything verification needs from inside a training container, as ONE JSON line (one
# `pct exec` on a real node, where each pays Perl start-up). Runs with the container's system
# python3 (stdlib only). Raw tool output is returned as data and parsed on the controller
# (pvegpu.facts.gpus), so the parsers are unit-tested against real output shapes.
# ARGS is prepended:
# {"venv": "/root/venv", "torch_inner": "<torch_inner.py>", "compile_inner": "<compile_check.py>"
#  or null, "compile_args": {...}, "uv_bin": "/opt/pvegpu/uv-X/bin/uv", "smi_query": "index,...",
#  "timeout": 600, "unit_name": "dflash-train.service", "started_path": "/run/pvegpu-.../started",
#  "build_venv": "/root/venvs/torch-2.11.0-cu130", "read_only": false (true: verify.py),
#  "training_matcher": {...}, "compile_beside_training": false}
# "beside_training": a training runs here, the GPUs it holds (probes/training_held.py): no CUDA
# context there, no compile check.
# "unit" tells the verify stage of deploy.py whether stage 5 will clear leftover training processes
# (the unit is not running, or a pending restart was asked for): ActiveState, the running unit's
# start record, and the selected build's time (the same values the training unit stage compares).
import glob
import json
import os
import shutil
import subprocess
import sysconfig
import tempfile

from pvegpu.probes.prelude import mtime, read, run, start_early  # sent as the prelude

A = json.loads(ARGS)  # noqa: F821 (prepended by pvegpu.facts.probe)
LIBDIR = "/usr/lib/x86_64-linux-gnu"
# argv[3] of every torch probe's python (after `-c <source>`): the node sees it in
# /proc/<pid>/cmdline, and verification does not count this container's marked process, whose
# CUDA contexts the node's compute-apps query may list (pvegpu.verification.processes.PROBE_MARK).
PROBE_MARK = "pvegpu-probe"


def run_doc(argv, timeout=120, env=None):
    """The prelude's run() as a document: {"rc", "stdout", "stderr"}."""
    rc, out, err = run(argv, timeout=timeout, env=env)
    return {"rc": rc, "stdout": out, "stderr": err}


def inner_env(extra_env=None):
    """The environment of a torch probe: every GPU visible, no bytecode written into the venv."""
    env = {k: v for k, v in os.environ.items() if k != "CUDA_VISIBLE_DEVICES"}
    # CUDA numbers GPUs as the training unit does (PCI order, like nvidia-smi's index); its
    # default FASTEST_FIRST leaves the order of equal GPUs unspecified.
    env["CUDA_DEVICE_ORDER"] = "PCI_BUS_ID"
    env["PYTHONDONTWRITEBYTECODE"] = "1"
    env.update(extra_env or {})
    return env


def inner_doc(r):
    """A torch probe's last JSON line from its run_doc ``r``, or an error document."""
    for line in reversed(r["stdout"].splitlines()):
        if line.startswith("{"):
            try:
                return json.loads(line)
            except ValueError:
                break
    tail = (r["stderr"].strip().splitlines() or ["no output"])[-1]
    return {"import_error": f"exit {r['rc']}: {tail}", "error": f"exit {r['rc']}: {tail}"}


def run_inner(python, source, args=None, timeout=600, extra_env=None):
    """Run `source` under the venv's python; its last JSON line, or an error document.
    Observes only: no bytecode written into the venv, every GPU visible."""
    argv = [python, "-c", source, PROBE_MARK] + ([json.dumps(args)] if args is not None else [])
    return inner_doc(run_doc(argv, timeout=timeout, env=inner_env(extra_env)))


def start_torch(python):
    """torch_inner started now, so that its import of torch (seconds on a real node) runs beside
    nvidia-smi; with PVEGPU_CUDA_GATE it makes no CUDA call before finish_torch says go. None
    when it cannot be started (finish_torch then runs it as run_inner does)."""
    try:
        return subprocess.Popen(
            [python, "-c", A["torch_inner"], PROBE_MARK],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env=inner_env({"PVEGPU_CUDA_GATE": "1"}),
        )
    except OSError:
        return None


def finish_torch(proc, timeout, context_ok=()):
    """Let the started torch_inner go on to its CUDA calls, on the GPUs ``context_ok`` (short
    UUIDs) only; its document (as run_inner's)."""
    if proc is None:
        env = {"PVEGPU_CONTEXT_OK": ",".join(context_ok)}
        return run_inner(python, A["torch_inner"], timeout=timeout, extra_env=env)
    try:
        go = json.dumps({"context_ok": list(context_ok)}) + "\n"
        out, err = proc.communicate(go, timeout=timeout)
        r = {"rc": proc.returncode, "stdout": out, "stderr": err}
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.communicate()
        r = {"rc": 124, "stdout": "", "stderr": f"{python}: timed out after {timeout} s"}
    return inner_doc(r)


def packages(venv):
    """name -> {"version", "requires"} of every distribution in the venv, from the headers of its
    .dist-info/METADATA (Requires-Dist lines kept verbatim; markers are judged on the
    controller)."""
    found = {}
    for meta in glob.glob(
        os.path.join(venv, "lib", "python3*", "site-packages", "*.dist-info", "METADATA")
    ):
        name, version, requires = None, None, []
        for line in (read(meta) or "").splitlines():
            if not line.strip():
                break
            key, _, value = line.partition(":")
            if key == "Name":
                name = value.strip()
            elif key == "Version":
                version = value.strip()
            elif key == "Requires-Dist":
                requires.append(value.strip())
        if name:
            found[name] = {"version": version, "requires": requires}
    return found


def toolchain():
    # Triton's C helper (runtime/build.py): $CC, gcc or clang; Python.h (posix_local: posix_prefix)
    cc = os.environ.get("CC") or shutil.which("gcc") or shutil.which("clang")
    v = run_doc([cc, "-dumpfullversion"], timeout=30) if cc else {}
    s = sysconfig.get_default_scheme()
    inc = sysconfig.get_paths(scheme="posix_prefix" if s == "posix_local" else s)["include"]
    version = (v.get("stdout") or "").strip() or None
    has_h = os.path.exists(inc + "/Python.h")
    return {"cc": cc, "cc_version": version, "python_include": inc, "python_h": has_h}


def unit_state():
    unit = A.get("unit_name")
    if not unit:
        return None
    r = run_doc(unit_argv(unit))
    build = A.get("build_venv")
    return {
        "active": (r["stdout"].strip() or None) if r["rc"] != 127 else None,
        "started": read(A["started_path"]) if A.get("started_path") else None,
        "built": mtime(os.path.join(os.path.realpath(build), ".pvegpu-build.json"))
        if build
        else None,
    }


def resolved(path):
    return os.path.basename(os.path.realpath(path)) if os.path.exists(path) else None


def unit_argv(unit):
    return ["systemctl", "is-active", unit]


def pip_check_argv(uv, python):
    return [uv, "pip", "check", "--python", python]


SMI = ["nvidia-smi", "--query-gpu=" + A["smi_query"], "--format=csv,noheader,nounits"]
# memory in use per GPU, before any CUDA call of this probe: which GPUs a training here holds
SMI_USED = ["nvidia-smi", "--query-gpu=uuid,memory.used", "--format=csv,noheader,nounits"]
# this container's own compute processes, by their pid here (NVML from driver 535.113.01)
SMI_OWN_APPS = [
    "nvidia-smi",
    "--query-compute-apps=gpu_uuid,pid",
    "--format=csv,noheader,nounits",
]
UV_ENV = {**os.environ, "UV_NO_PROGRESS": "1", "UV_PYTHON_DOWNLOADS": "never"}
if A.get("read_only"):
    # verify.py changes nothing: uv keeps what it learns of an interpreter in its cache, keyed by
    # the interpreter's path (interpreter-v5/...), so its check uses a temporary cache instead
    # (about 50 ms more here: the interpreter is queried again)
    UV_ENV["UV_NO_CACHE"] = "1"
venv = A["venv"]
python = os.path.join(venv, "bin", "python")
real = os.path.realpath(venv)
uv = A.get("uv_bin")
present = os.path.exists(python)
checks_packages = present and bool(uv) and os.path.exists(uv)
# Started together, each one's start-up beside the others': torch's import first (the longest),
# then nvidia-smi and the unit's state, and `uv pip check` (it only reads the venv). nvidia-smi
# is collected before torch makes a CUDA call: its memory figures must not count the torch
# probe's own contexts.
torch_proc = start_torch(python) if present else None
start_early(
    SMI, SMI_USED, SMI_OWN_APPS, *([unit_argv(A["unit_name"])] if A.get("unit_name") else [])
)
if checks_packages:
    start_early(pip_check_argv(uv, python), env=UV_ENV)
# the venv's files are read while those commands run
listing = packages(real) if present else None
marker = read(os.path.join(real, ".pvegpu-build.json")) if present else None
doc = {
    "venv": venv,
    "venv_real": real if os.path.isdir(real) else None,
    "python": python,
    "present": present,
    "module_text": (read("/proc/driver/nvidia/version") or "").strip().splitlines()[:1],
    "libs": {
        name: resolved(os.path.join(LIBDIR, name))
        for name in ("libcuda.so.1", "libnvidia-ml.so.1", "libcuda.so")  # .so: Triton's -lcuda
    },
    "smi": run_doc(SMI),
    "torch": None,
    "compile": None,
    "toolchain": toolchain(),
    "packages": None,
    "pip_check": None,
    "marker": None,
    "unit": unit_state(),
}


def beside_training():
    """Which GPUs may take a CUDA context (probes/training_held.py), and why the others may
    not; whether a training runs here (the report's)."""
    pids = training_pids(A.get("training_matcher"))  # noqa: F821
    running = training_running((doc["unit"] or {}).get("active"), pids)  # noqa: F821
    rc, out, _ = run(SMI_USED)
    used = used_by_uuid(out) if rc == 0 else None  # noqa: F821
    rc, out, _ = run(SMI_OWN_APPS)
    apps = apps_by_uuid(out, os.getpid()) if rc == 0 else None  # noqa: F821
    ok = context_ok(used, apps)  # noqa: F821
    why = held_why(used, apps)  # noqa: F821
    if used is None or apps is None:
        why["*"] = "nvidia-smi in the container could not be read: no CUDA context anywhere"
    return {
        "running": running,
        "pids": pids,
        "used_mib": used,
        "apps": apps,
        "context_ok": ok,
        "held": sorted(u for u in why if u != "*") if "*" not in why else ["*"],
        "held_why": why,
    }


doc["beside_training"] = beside_training()
held = doc["beside_training"]["held"]
if doc["present"]:
    # nvidia-smi has answered: its figures hold no context of this probe
    doc["torch"] = finish_torch(
        torch_proc, A.get("timeout", 600), doc["beside_training"]["context_ok"]
    )
    doc["packages"] = listing
    try:
        doc["marker"] = json.loads(marker) if marker else None
    except ValueError:
        doc["marker"] = {"unreadable": True}
    if checks_packages:
        r = run_doc(pip_check_argv(uv, python), env=UV_ENV)
        doc["pip_check"] = {"rc": r["rc"], "output": (r["stdout"] + r["stderr"]).strip()}
    refusal = compile_refusal(held, A.get("compile_beside_training"))  # noqa: F821
    if A.get("compile_inner") and doc["torch"].get("available") and refusal:
        doc["compile"] = {"refused": refusal, "held": held}
    elif A.get("compile_inner") and doc["torch"].get("available"):
        # A fresh, private compile cache: the check really compiles (a warm cache would hide the
        # race), never touches the training's per-build cache, and leaves nothing behind.
        scratch = tempfile.mkdtemp(prefix="pvegpu-compile-check-", dir="/tmp")
        try:
            doc["compile"] = run_inner(
                python,
                A["compile_inner"],
                A.get("compile_args") or {},
                timeout=A.get("timeout", 600) + 300,
                extra_env={
                    "TORCHINDUCTOR_CACHE_DIR": os.path.join(scratch, "inductor"),
                    "TRITON_CACHE_DIR": os.path.join(scratch, "triton"),
                },
            )
        finally:
            remove_tree(scratch, ignore_errors=True)  # noqa: F821 (the delete guard, prepended)
print(json.dumps(doc, sort_keys=True))

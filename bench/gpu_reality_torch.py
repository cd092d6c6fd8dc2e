"""bench/gpu_reality.py's torch steps: pvegpu's own torch code (the verification probe's
torch_inner, the compile check) run with the machine's python, and this process checked after it
(its primary contexts, its compute-apps rows). ``r`` is gpu_reality's Run, ``pv`` its pvegpu."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

_spec = importlib.util.spec_from_file_location(
    "gpu_reality_report", Path(__file__).resolve().parent / "gpu_reality_report.py"
)
rep = importlib.util.module_from_spec(_spec)  # type: ignore[arg-type]
_spec.loader.exec_module(rep)  # type: ignore[union-attr]


FACTS = r"""
import json, os
import torch
out = {"torch": torch.__version__, "cuda": torch.version.cuda,
       "available": torch.cuda.is_available(),
       "nvml_first": torch.cuda.device_count(), "cuda_count": torch._C._cuda_getDeviceCount()}
try:
    import triton
    out["triton"] = triton.__version__
    from triton.backends.nvidia import driver
    out["triton_libraries"] = list(getattr(driver, "libraries", []) or [])
except Exception as e:
    out["triton_error"] = f"{type(e).__name__}: {e}"
lib = "/usr/lib/x86_64-linux-gnu"
names = ("libcuda.so", "libcuda.so.1")
out["libcuda_links"] = {n: os.path.exists(os.path.join(lib, n)) for n in names}
print(json.dumps(out))
"""
# torch_inner (the product's source, in a file) run in this process, then this process checked:
# its primary contexts (torch._C._cuda_hasPrimaryContext) and its own compute-apps rows
AROUND = r"""
import contextlib, io, json, os, subprocess, sys
def smi(args):
    p = subprocess.run(["nvidia-smi", *args], capture_output=True, text=True)
    return {"rc": p.returncode, "stdout": p.stdout, "stderr": p.stderr}
used = ["--query-gpu=uuid,memory.used", "--format=csv,noheader,nounits"]
before = smi(used)
buf = io.StringIO()
with contextlib.redirect_stdout(buf):
    exec(compile(open(sys.argv[1]).read(), "torch_inner", "exec"), {"__name__": "__main__"})
inner = json.loads(buf.getvalue().strip().splitlines()[-1])
import torch
n = torch._C._cuda_getDeviceCount() if torch.cuda.is_available() else 0
print(json.dumps({"pid": os.getpid(), "inner": inner, "before": before,
                  "primary": [bool(torch._C._cuda_hasPrimaryContext(i)) for i in range(n)],
                  "apps": smi(["--query-compute-apps=pid,used_memory,gpu_uuid",
                               "--format=csv,noheader,nounits"]), "after": smi(used)}))
"""
ORDER = {"CUDA_DEVICE_ORDER": "PCI_BUS_ID", "PYTHONDONTWRITEBYTECODE": "1"}


def last_json(got: dict) -> dict:
    """A step's last JSON line, or its error."""
    for line in reversed(got["stdout"].splitlines()):
        if line.startswith("{"):
            return json.loads(line)
    tail = (got["stderr"].strip().splitlines() or ["no output"])[-1]
    return {"error": f"exit {got['rc']}: {tail}"}


def torch_facts(r) -> dict:
    return last_json(r.sh("torch-facts", [r.python, "-c", FACTS], 120, ORDER))


def context_runs(r, pv, no_context_env) -> dict:
    """The verification probe's torch code without contexts (every GPU held) and with them."""
    inner = r.work / "torch_inner.py"
    inner.write_text(pv.probe.probe_source("torch_inner"))
    argv = [r.python, "-c", AROUND, str(inner)]
    none = last_json(r.sh("torch-no-context", argv, 120, {**ORDER, **no_context_env(["*"])}))
    made = last_json(r.sh("torch-context", argv, 120, {**ORDER, **no_context_env([])}))
    if "pid" in none:
        none["own_rows"] = rep.rows_of_pid(none["apps"]["stdout"], none["pid"])
    if "pid" in made:
        made["sizes"] = rep.context_sizes(made)
    return {"no_context": none, "context": made}


def compile_runs(r, pv) -> dict:
    """The product's compile check, twice on one fresh cache: cold, then warm."""
    cache = r.work / "compile-cache"
    env = {
        **ORDER,
        "TRITON_CACHE_DIR": str(cache / "triton"),
        "TORCHINDUCTOR_CACHE_DIR": str(cache / "inductor"),
    }
    source = pv.probe.probe_source("compile_check")
    out = {}
    for name in ("cold", "warm"):
        args = json.dumps({"gpus": None, "timeout": max(30, int(r.left()) - 20)})
        got = r.sh(
            f"compile-{name}",
            [r.python, "-c", source, "pvegpu-probe", args],
            max(30.0, r.left() - 10),
            env,
        )
        out[name] = {**last_json(got), "wall_seconds": got["seconds"]}
    return out


# ---- the report -------------------------------------------------------------------------------

# Probe: what torch in a venv really sees, as one JSON line. The outer part runs with the
# container's system python3 and starts the venv's python in a subprocess, so a torch import
# failure or a CUDA init crash becomes data instead of a failed fact.
# ARGS is prepended: {"python": "/root/venv/bin/python"}
import json
import os
import subprocess

A = json.loads(ARGS)  # noqa: F821 (prepended by pvegpu.facts.probe)

INNER = r'''
import json, warnings
doc = {"import_error": None}
try:
    import torch
except Exception as e:
    print(json.dumps({"import_error": f"{type(e).__name__}: {e}"}))
    raise SystemExit(0)
doc["version"] = torch.__version__
doc["cuda"] = torch.version.cuda
with warnings.catch_warnings(record=True) as caught:
    warnings.simplefilter("always")
    available = bool(torch.cuda.is_available())
doc["available"] = available
doc["warnings"] = [str(w.message).splitlines()[0] for w in caught]
doc["init_error"] = None
doc["devices"] = []
doc["device_count"] = 0
if available:
    try:
        torch.cuda.init()
        doc["device_count"] = torch.cuda.device_count()
        for i in range(doc["device_count"]):
            p = torch.cuda.get_device_properties(i)
            free, total = torch.cuda.mem_get_info(i)
            doc["devices"].append({
                "index": i, "name": p.name, "uuid": str(getattr(p, "uuid", "")),
                "total_mib": total // (1024 * 1024), "free_mib": free // (1024 * 1024),
                "capability": f"{p.major}.{p.minor}",
            })
        doc["arch_list"] = torch.cuda.get_arch_list()
    except Exception as e:
        doc["init_error"] = f"{type(e).__name__}: {e}".splitlines()[0]
else:
    doc["init_error"] = doc["warnings"][0] if doc["warnings"] else None
try:
    doc["cudnn"] = torch.backends.cudnn.version()
except Exception:
    doc["cudnn"] = None
try:
    doc["nccl"] = ".".join(str(x) for x in torch.cuda.nccl.version())
except Exception:
    doc["nccl"] = None
print(json.dumps(doc))
'''

python = A["python"]
if not os.path.exists(python):
    print(json.dumps({"present": False, "python": python}))
else:
    env = {k: v for k, v in os.environ.items() if k != "CUDA_VISIBLE_DEVICES"}
    try:
        p = subprocess.run([python, "-c", INNER], capture_output=True, text=True, timeout=600, env=env)
        lines = [l for l in p.stdout.splitlines() if l.startswith("{")]
        doc = json.loads(lines[-1]) if lines else {}
        if not lines:
            tail = (p.stderr.strip().splitlines() or ["no output"])[-1]
            doc["import_error"] = f"exit {p.returncode}: {tail}"
    except subprocess.TimeoutExpired:
        doc = {"import_error": "timed out after 600 s"}
    doc.update({"present": True, "python": python})
    print(json.dumps(doc, sort_keys=True))

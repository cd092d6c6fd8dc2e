# Probe: what torch in a venv really sees, as one JSON line. The outer part runs with the
# container's system python3 and starts the venv's python in a subprocess, so a torch import
# failure or a CUDA init crash becomes data instead of a failed fact.
# ARGS is prepended: {"python": "/root/venv/bin/python", "inner": "<source of torch_inner.py>"}
import json
import os
import subprocess

A = json.loads(ARGS)  # noqa: F821 (prepended by pvegpu.facts.probe)


def run_inner(python, source, args=None, timeout=600):
    """Run `source` under `python`; its last JSON line, or an error document."""
    env = {k: v for k, v in os.environ.items() if k != "CUDA_VISIBLE_DEVICES"}
    # CUDA numbers GPUs as the training unit does (PCI order, like nvidia-smi's index); its
    # default FASTEST_FIRST leaves the order of equal GPUs unspecified.
    env["CUDA_DEVICE_ORDER"] = "PCI_BUS_ID"
    env["PYTHONDONTWRITEBYTECODE"] = "1"  # observe only: nothing written into the venv
    # the build's check needs no free memory: no CUDA context on any GPU (a training may hold
    # them; a context costs device memory, docs/real-tools.md)
    env["PVEGPU_NO_CONTEXT"] = "*"
    argv = [python, "-c", source] + ([json.dumps(args)] if args is not None else [])
    try:
        p = subprocess.run(argv, capture_output=True, text=True, timeout=timeout, env=env)
    except subprocess.TimeoutExpired:
        return {"import_error": f"timed out after {timeout} s"}
    except OSError as e:
        return {"import_error": f"{type(e).__name__}: {e}"}
    for line in reversed(p.stdout.splitlines()):
        if line.startswith("{"):
            try:
                return json.loads(line)
            except ValueError:
                break
    tail = (p.stderr.strip().splitlines() or ["no output"])[-1]
    return {"import_error": f"exit {p.returncode}: {tail}"}


python = A["python"]
if not os.path.exists(python):
    print(json.dumps({"present": False, "python": python}))
else:
    doc = run_inner(python, A["inner"])
    doc.update({"present": True, "python": python})
    print(json.dumps(doc, sort_keys=True))

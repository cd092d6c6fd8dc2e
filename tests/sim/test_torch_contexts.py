"""The torch double's CUDA contexts (torch.json ``register_contexts``): like the real runtime, a
process that used a GPU (mem_get_info) is a compute process there, with its memory, until it
exits; without the option nothing is registered."""

from __future__ import annotations

import json
import os
import subprocess
import sys

from sim.torch_double.fake_tree import make_fake_nvidia_root

CODE = (
    "import json, os, torch\n"
    "free, total = torch.cuda.mem_get_info(1)\n"
    "torch.cuda.mem_get_info(1)\n"  # one context per device, however often it is used
    "table = os.path.join(os.environ['PVE_SIM_ROOT'], 'proc/driver/nvidia/sim/processes.json')\n"
    "print(json.dumps({'pid': os.getpid(), 'procs': json.load(open(table)),\n"
    "                  'used': (total - free) // 2**20}))\n"
)


def run_double(wheel, root) -> dict:
    env = {k: v for k, v in os.environ.items() if not k.startswith("PVE_SIM")}
    env.update(PYTHONPATH=str(wheel), PVE_SIM_ROOT=str(root), PYTHONDONTWRITEBYTECODE="1")
    p = subprocess.run(
        [sys.executable, "-c", CODE],
        capture_output=True,
        text=True,
        env=env,
        timeout=60,
        check=True,
    )
    return json.loads(p.stdout)


def table(root):
    return json.loads((root / "proc/driver/nvidia/sim/processes.json").read_text())


def test_a_context_is_a_compute_process_while_the_process_lives(wheelhouse, tmp_path):
    make_fake_nvidia_root(
        tmp_path, gpus=2, torch_json={"register_contexts": True, "context_mib": 700}
    )
    out = run_double(wheelhouse.torch["cu130"], tmp_path)
    (entry,) = out["procs"]
    assert entry["ns_pid"] == out["pid"] and entry["gpu_index"] == 1
    assert entry["used_mib"] == 700 and out["used"] == 700  # its own context counts as used
    assert entry["pidns"] == os.stat("/proc/self/ns/pid").st_ino
    assert table(tmp_path) == []  # gone with the process
    assert not list((tmp_path / "proc/driver/nvidia/sim").glob("ctx-*"))


def test_no_context_is_registered_by_default(wheelhouse, tmp_path):
    make_fake_nvidia_root(tmp_path, gpus=2)
    out = run_double(wheelhouse.torch["cu130"], tmp_path)
    assert out["procs"] == [] and out["used"] == 0

"""The torch double's CUDA contexts (torch.json ``register_contexts``): like the real runtime, a
process that used a GPU (mem_get_info) is a compute process there, with its memory, until it
exits; without the option nothing is registered."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

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


# ---- which calls make a context, and when the runtime refuses one (docs/real-tools.md)

PROBE = (
    "import json, os, torch\n"
    "out = {'count': torch.cuda.device_count(), 'available': torch.cuda.is_available()}\n"
    "p = torch.cuda.get_device_properties(1)\n"  # cudaGetDeviceProperties: no context
    "out['name'], out['cap'] = torch.cuda.get_device_name(1), torch.cuda.get_device_capability(1)\n"
    "out['total'] = p.total_memory // 2**20\n"
    "out['before'] = open(os.path.join(os.environ['PVE_SIM_ROOT'],\n"
    "    'proc/driver/nvidia/sim/contexts.log')).read() if os.path.exists(os.path.join(\n"
    "    os.environ['PVE_SIM_ROOT'], 'proc/driver/nvidia/sim/contexts.log')) else ''\n"
    "try:\n"
    "    out['free'] = torch.cuda.mem_get_info(1)[0] // 2**20\n"
    "except RuntimeError as e:\n"
    "    out['error'] = str(e).splitlines()[0]\n"
    "print(json.dumps(out))\n"
)


def probe(wheel, root, code=PROBE) -> dict:
    env = {k: v for k, v in os.environ.items() if not k.startswith("PVE_SIM")}
    env.update(PYTHONPATH=str(wheel), PVE_SIM_ROOT=str(root), PYTHONDONTWRITEBYTECODE="1")
    p = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        env=env,
        timeout=60,
        check=True,
    )
    return json.loads(p.stdout)


def contexts(root) -> list[dict]:
    log = root / "proc/driver/nvidia/sim/contexts.log"
    return [json.loads(x) for x in log.read_text().splitlines()] if log.exists() else []


def test_identity_calls_make_no_context_mem_get_info_does(wheelhouse, tmp_path):
    make_fake_nvidia_root(tmp_path, gpus=2)
    out = probe(wheelhouse.torch["cu130"], tmp_path)
    assert out["count"] == 2 and out["available"] is True
    assert out["name"] == "NVIDIA H200" and out["cap"] == [9, 0] and out["total"] == 143771
    assert out["before"] == ""  # device_count, properties, name, capability: no context
    assert [c["gpu_index"] for c in contexts(tmp_path)] == [1]  # mem_get_info made one


def test_a_full_device_refuses_the_context(wheelhouse, tmp_path):
    busy = [{"pid": 1, "gpu_index": 1, "used_mib": 143771 - 200, "name": "python"}]
    make_fake_nvidia_root(tmp_path, gpus=2, processes=busy)
    out = probe(wheelhouse.torch["cu130"], tmp_path)
    assert out["error"] == "CUDA error: out of memory"
    assert contexts(tmp_path) == []


def test_exclusive_process_mode_refuses_a_second_process(wheelhouse, tmp_path):
    other = [{"pid": 1, "gpu_index": 1, "used_mib": 1000, "name": "python"}]
    make_fake_nvidia_root(tmp_path, gpus=2, processes=other, compute_modes={1: "Exclusive_Process"})
    out = probe(wheelhouse.torch["cu130"], tmp_path)
    assert out["error"] == "CUDA error: CUDA-capable device(s) is/are busy or unavailable"
    assert contexts(tmp_path) == []
    # alone on the device, the process gets its context
    make_fake_nvidia_root(tmp_path, gpus=2, compute_modes={1: "Exclusive_Process"})
    assert "error" not in probe(wheelhouse.torch["cu130"], tmp_path)


def test_allocations_and_set_device_make_a_context(wheelhouse, tmp_path):
    make_fake_nvidia_root(tmp_path, gpus=2)
    code = (
        "import torch\ntorch.cuda.set_device(1)\n"
        "torch.randn(2, 2, device=torch.device('cuda', 0))\nprint('{}')\n"
    )
    probe(wheelhouse.torch["cu130"], tmp_path, code)
    assert sorted(c["gpu_index"] for c in contexts(tmp_path)) == [0, 1]


def test_a_registered_context_counts_in_the_next_process_free_memory(wheelhouse, tmp_path):
    held = [
        {
            "pid": None,
            "pidns": 1,
            "ns_pid": 1,
            "gpu_index": 1,
            "used_mib": 1000,
            "name": "python",
            "lock": "gone.lock",
        }
    ]
    make_fake_nvidia_root(tmp_path, gpus=2, processes=held)
    # its lock is not held: the process is gone, its memory free again
    assert probe(wheelhouse.torch["cu130"], tmp_path)["free"] == 143771


# ---- the stand-in trainers hold their GPUs as real ones do (torch._sim.register_own_contexts)


def run_trainer(wheel, root, source, tmp_path, visible) -> tuple[list, list]:
    """Start a stand-in trainer with CUDA_VISIBLE_DEVICES=``visible`` (None: unset), read the
    processes table once it runs, SIGTERM it; (the table then, the table after it exited)."""
    import signal
    import time

    script = tmp_path / "train.py"
    script.write_text(source)
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PVE_SIM", "CUDA_"))}
    env.update(PYTHONPATH=str(wheel), PVE_SIM_ROOT=str(root), PYTHONDONTWRITEBYTECODE="1")
    if visible is not None:
        env["CUDA_VISIBLE_DEVICES"] = visible
    argv = [sys.executable, str(script), "--checkpoint-dir", str(tmp_path / "ckpt")]
    proc = subprocess.Popen(argv, env=env, stdout=subprocess.PIPE, text=True)
    try:
        if "started-" in source:  # sim/trainer.py records its start (after its contexts)
            deadline = time.monotonic() + 60
            while not list((tmp_path / "ckpt").glob("started-*")):
                assert proc.poll() is None and time.monotonic() < deadline
                time.sleep(0.1)
        else:
            assert proc.stdout.readline().startswith("train")
            time.sleep(1)  # its contexts follow its first line
        during = [p for p in table(root) if p.get("ns_pid") == proc.pid]
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.wait(timeout=60)
    return during, table(root)


@pytest.mark.parametrize("which", ["TRAIN_PY", "TRAINER"])
def test_a_stand_in_trainer_given_gpus_holds_a_context_on_each(wheelhouse, tmp_path, which):
    from sim.__main__ import TRAIN_PY
    from sim.trainer import TRAINER

    source = {"TRAIN_PY": TRAIN_PY, "TRAINER": TRAINER}[which]
    make_fake_nvidia_root(tmp_path / "root", gpus=3)  # torch.json: no register_contexts
    during, after = run_trainer(
        wheelhouse.torch["cu130"], tmp_path / "root", source, tmp_path, "0,2"
    )
    assert sorted(p["gpu_index"] for p in during) == [0, 2]
    assert after == []  # released when it exits


def test_a_stand_in_trainer_started_by_hand_registers_nothing_itself(wheelhouse, tmp_path):
    """Without CUDA_VISIBLE_DEVICES (started by hand in a test) its GPUs are the test's to
    register (SimNode.register_gpu_process), as before."""
    from sim.trainer import TRAINER

    make_fake_nvidia_root(tmp_path / "root", gpus=2)
    during, _ = run_trainer(wheelhouse.torch["cu130"], tmp_path / "root", TRAINER, tmp_path, None)
    assert during == []

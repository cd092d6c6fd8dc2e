"""torch.cuda.device_count() asks NVML first (torch/cuda/__init__.py ``_device_count_nvml``), and
NVML counts GPUs CUDA does not enumerate (one in an Xid error state that needs a reset): the torch
double models both counts, and pvegpu's torch probe takes CUDA's (cudaGetDeviceCount, through
``torch._C._cuda_getDeviceCount()``), so it never asks for a device CUDA does not have."""

from __future__ import annotations

import json
import os
import subprocess
import sys

from pvegpu.facts.probe import probe_source
from sim.torch_double.fake_tree import make_fake_nvidia_root

COUNTS = (
    "import json, torch\n"
    "out = {'nvml_first': torch.cuda.device_count(), 'cuda': torch._C._cuda_getDeviceCount()}\n"
    "try:\n"
    "    torch.cuda.get_device_properties(2)\n"
    "except Exception as e:\n"
    "    out['props'] = f'{type(e).__name__}: {e}'\n"
    "out['context_before'] = torch._C._cuda_hasPrimaryContext(0)\n"
    "torch.cuda.mem_get_info(0)\n"
    "out['context_after'] = torch._C._cuda_hasPrimaryContext(0)\n"
    "print(json.dumps(out))\n"
)


def run(wheel, root, code, **env_over) -> dict:
    env = {k: v for k, v in os.environ.items() if not k.startswith("PVE_SIM")}
    env.update(PYTHONPATH=str(wheel), PVE_SIM_ROOT=str(root), PYTHONDONTWRITEBYTECODE="1")
    env.update(env_over)
    p = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=60
    )
    assert p.returncode == 0, p.stderr
    return json.loads(p.stdout.splitlines()[-1])


def test_nvml_counts_a_gpu_cuda_does_not_enumerate(wheelhouse, tmp_path):
    make_fake_nvidia_root(tmp_path, gpus=3, torch_json={"cuda_unusable": [1]})
    out = run(wheelhouse.torch["cu130"], tmp_path, COUNTS)
    assert (out["nvml_first"], out["cuda"]) == (3, 2)
    assert out["props"] == (
        "RuntimeError: device >= 0 && device < num_gpus INTERNAL ASSERT FAILED at "
        '"/pytorch/aten/src/ATen/cuda/CUDAContext.cpp":50, please report a bug to PyTorch. '
        "device=2, num_gpus=2"
    )
    assert (out["context_before"], out["context_after"]) == (False, True)
    # CUDA_VISIBLE_DEVICES trims NVML's count as torch trims it
    assert (
        run(wheelhouse.torch["cu130"], tmp_path, COUNTS, CUDA_VISIBLE_DEVICES="0,1")["nvml_first"]
        == 2
    )


def test_the_torch_probe_counts_and_reads_only_the_devices_cuda_has(wheelhouse, tmp_path):
    make_fake_nvidia_root(tmp_path, gpus=3, torch_json={"cuda_unusable": [1]})
    doc = run(wheelhouse.torch["cu130"], tmp_path, probe_source("torch_inner"))
    assert doc["device_count"] == 2
    assert [d.get("error") for d in doc["devices"]] == [None, None]
    assert [d["uuid"][-1] for d in doc["devices"]] == ["0", "2"]

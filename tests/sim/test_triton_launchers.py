"""Triton compiles a launcher for every new kernel signature while a compiled model runs
(triton-lang/triton third_party/nvidia/backend/driver.py make_launcher, through runtime/build.py):
the C compiler is needed for as long as the training runs, not only at its first compile. The
torch double does so for real (sim/torch_double/torch/_triton.py)."""

from __future__ import annotations

import json
import os
import subprocess
import sys

from sim.torch_double.fake_tree import make_fake_nvidia_root

CODE = r"""
import json, os, torch
from torch.nn.attention.flex_attention import flex_attention

compiled = torch.compile(flex_attention)
out = {}
q = torch.randn(1, 4, 256, 64, device="cuda", dtype=torch.bfloat16)
compiled(q, q, q)
os.environ["PATH"] = "/nonexistent"  # the compiler is gone (removed after the first compile)
compiled(q, q, q)  # the same signature: its launcher is built and loaded
out["same"] = "ok"
longer = torch.randn(1, 4, 512, 64, device="cuda", dtype=torch.bfloat16)
try:
    compiled(longer, longer, longer)  # a new signature: a new launcher, compiled now
    out["new"] = "ok"
except Exception as e:
    out["new"] = f"{type(e).__name__}: {e}"
print(json.dumps(out))
"""


def test_a_new_kernel_signature_compiles_a_launcher_at_run_time(wheelhouse, tmp_path):
    make_fake_nvidia_root(tmp_path / "root")
    env = {k: v for k, v in os.environ.items() if not k.startswith("PVE_SIM") and k != "CC"}
    env.update(
        PYTHONPATH=str(wheelhouse.torch["cu130"]),
        PVE_SIM_ROOT=str(tmp_path / "root"),
        TRITON_CACHE_DIR=str(tmp_path / "triton"),
        TORCHINDUCTOR_CACHE_DIR=str(tmp_path / "inductor"),
        PYTHONDONTWRITEBYTECODE="1",
    )
    p = subprocess.run(
        [sys.executable, "-c", CODE], capture_output=True, text=True, env=env, timeout=120
    )
    assert p.returncode == 0, p.stderr
    out = json.loads(p.stdout.splitlines()[-1])
    assert out["same"] == "ok"
    assert out["new"].startswith("BackendCompilerFailed: backend='inductor' raised:")
    assert "Failed to find C compiler" in out["new"]

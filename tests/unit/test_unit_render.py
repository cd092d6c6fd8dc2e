import shutil
import subprocess

import pytest

from pvegpu.settings import Settings, defaults
from pvegpu.unit import render_unit


def render(**over):
    return render_unit(Settings.from_data({**defaults(), **over}))


def test_cu130_gets_its_smaller_budget_and_own_caches():
    text = render()
    assert "--token-budget 49152" in text and "--max-batch-size 48" in text
    assert "TORCHINDUCTOR_CACHE_DIR=/data/cache/torch-2.11.0-cu130/inductor" in text
    assert "ExecStart=/root/venv/bin/python /data/dflash/train.py" in text


def test_cu128_uses_the_defaults():
    text = render(torch_variant="cu128")
    assert "--token-budget 65536" in text and "--max-batch-size 64" in text
    assert "/data/cache/torch-2.11.0-cu128/" in text


def test_gpu_roles_are_renumbered_inside_cuda_visible_devices():
    text = render(target_gpus=[2, 3], drafter_gpus=[6])
    assert "CUDA_VISIBLE_DEVICES=2,3,6" in text
    assert "--target-gpus 0,1" in text and "--drafter-gpus 2" in text


@pytest.mark.skipif(not shutil.which("systemd-analyze"), reason="systemd-analyze not installed")
@pytest.mark.parametrize("variant", ["cu128", "cu130"])
def test_rendered_unit_passes_systemd_analyze_verify(tmp_path, variant):
    unit = tmp_path / "dflash-train.service"
    unit.write_text(render(torch_variant=variant))
    # verify resolves ExecStart's binary; point it at one that exists on the controller.
    text = unit.read_text().replace("/root/venv/bin/python", "/usr/bin/python3")
    unit.write_text(text)
    p = subprocess.run(["systemd-analyze", "verify", str(unit)], capture_output=True, text=True)
    problems = [l for l in p.stderr.splitlines() if "dflash-train.service" in l]
    assert p.returncode == 0 and not problems, p.stderr

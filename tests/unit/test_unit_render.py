"""The rendered training unit: golden files for both variants, values from settings, and
`systemd-analyze verify` on the controller.

Regenerate the golden files after an intended template change with
PVEGPU_UPDATE_GOLDEN=1 uv run pytest tests/unit/test_unit_render.py (and review the diff)."""

import os
import shutil
import subprocess
from pathlib import Path

import pytest

from pvegpu.settings import Settings, SettingsError, defaults
from pvegpu.unit import (
    desired_start, digest, parse_started_record, pending_reasons, render_unit, training_argv_prefix,
    training_matcher,
)

GOLDEN = Path(__file__).parent / "golden"


def settings(**over):
    return Settings.from_data({**defaults(), **over})


def render(**over):
    return render_unit(settings(**over))


@pytest.mark.parametrize("variant", ["cu128", "cu130"])
def test_rendered_unit_matches_the_golden_file(variant):
    text = render(torch_variant=variant)
    golden = GOLDEN / f"dflash-train.{variant}.service"
    if os.environ.get("PVEGPU_UPDATE_GOLDEN"):
        golden.write_text(text)
    assert text == golden.read_text()


def test_cu130_gets_its_smaller_budget_and_own_caches():
    text = render()
    assert "--token-budget 49152" in text and "--max-batch-size 48" in text
    assert "TORCHINDUCTOR_CACHE_DIR=/data/cache/torch-2.11.0-cu130/inductor" in text
    assert "TRITON_CACHE_DIR=/data/cache/torch-2.11.0-cu130/triton" in text
    assert '"$$(readlink -f /root/venv)/bin/python" /data/dflash/train.py' in text


def test_cu128_uses_the_defaults():
    text = render(torch_variant="cu128")
    assert "--token-budget 65536" in text and "--max-batch-size 64" in text
    assert "/data/cache/torch-2.11.0-cu128/" in text


def test_every_value_comes_from_settings():
    text = render(training_script="/data/x/run.py", training_workdir="/data/x", dataset_dir="/data/ds",
                  checkpoint_dir="/data/ck", resume=False, training_stop_timeout_s=1800,
                  training_restart_delay_s=60, training_restart_burst=3, venv_path="/opt/venv",
                  pytorch_cuda_alloc_conf="max_split_size_mb:512", training_unit_name="drafter",
                  variant_overrides={"cu130": {"token_budget": 1000}})
    for line in ('"$$(readlink -f /opt/venv)/bin/python" /data/x/run.py', "WorkingDirectory=/data/x",
                 "--dataset-dir /data/ds", "--checkpoint-dir /data/ck", "TimeoutStopSec=1800s",
                 "RestartSec=60s", "StartLimitBurst=3", "PYTORCH_CUDA_ALLOC_CONF=max_split_size_mb:512",
                 "SyslogIdentifier=drafter", "RuntimeDirectory=pvegpu-drafter",
                 "--token-budget 1000", "--max-batch-size 64"):
        assert line in text, line
    assert "--resume" not in text


def test_gpu_roles_are_renumbered_inside_cuda_visible_devices():
    text = render(target_gpus=[2, 3], drafter_gpus=[6])
    assert "CUDA_VISIBLE_DEVICES=2,3,6" in text
    assert "--target-gpus 0,1" in text and "--drafter-gpus 2" in text


@pytest.mark.parametrize(
    "over, fragment",
    [
        ({"target_gpus": [0, 1, 8]}, "target_gpus has GPU 8, outside 0..7"),
        ({"drafter_gpus": [4, 5], "target_gpus": [0, 4]}, "target_gpus and drafter_gpus overlap on [4]"),
        ({"max_batch_size": -1}, "max_batch_size=-1 (for cu128) must be a positive integer"),
        ({"variant_overrides": {"cu130": {"token_budget": 0}}}, "token_budget=0 (for cu130) must be a positive"),
        ({"variant_overrides": {"cu130": {"tokens": 5}}}, "variant_overrides['cu130'] has unknown key 'tokens'"),
        ({"training_stop_timeout_s": 0}, "training_stop_timeout_s=0 must be positive"),
    ],
)
def test_bad_training_input_is_one_clear_line(over, fragment):
    with pytest.raises(SettingsError) as e:
        settings(**over)
    assert any(fragment in line for line in str(e.value).splitlines()), str(e.value)


def test_a_restart_is_pending_only_when_what_runs_differs_from_what_a_start_would_run():
    s = settings()
    text = render_unit(s)
    record = (f"unit {digest(text)}  -\nvenv /root/venvs/torch-2.11.0-cu130\nbuilt 1700000000\n")
    started = parse_started_record(record)
    assert pending_reasons(started, desired_start(s, text, 1700000000)) == []
    assert pending_reasons(started, desired_start(s, text, 1700000099)) == [
        "venv /root/venvs/torch-2.11.0-cu130 was rebuilt"]
    assert pending_reasons(started, desired_start(s, text + "#", 1700000000)) == ["unit file changed"]
    s128 = settings(torch_variant="cu128")
    assert pending_reasons(started, desired_start(s128, render_unit(s128), 1)) == [
        "unit file changed", "venv build /root/venvs/torch-2.11.0-cu130 -> /root/venvs/torch-2.11.0-cu128"]
    assert "no start record" in pending_reasons(None, desired_start(s, text, 1))[0]


def test_exec_start_pins_the_build_and_leftovers_are_recognised_by_its_argv():
    s = settings()
    exec_start = next(l for l in render_unit(s).splitlines() if l.startswith("ExecStart="))
    # The trainer runs from the build the link pointed at when it started, not through the link.
    assert exec_start.startswith("ExecStart=/bin/sh -c 'exec \"$$(readlink -f /root/venv)/bin/python\" ")
    m = training_matcher(s)
    assert exec_start.split()[6] == m["script"] == training_argv_prefix(s)[1]
    assert m["pythons"] == [training_argv_prefix(s)[0]] and m["python_under"] == ["/root/venvs/"]


def analyze_verify(tmp_path, text):
    """(exit status, problem lines) of `systemd-analyze verify` on the rendered unit. It reports
    bad values on stderr and still exits 0 ("..., ignoring"), so every line naming the unit counts.
    ExecStart's program is /bin/sh, so the unit is verified exactly as rendered."""
    unit = tmp_path / "dflash-train.service"
    unit.write_text(text)
    p = subprocess.run(["systemd-analyze", "verify", str(unit)], capture_output=True, text=True)
    return p.returncode, [line for line in p.stderr.splitlines() if "dflash-train.service" in line]


needs_systemd_analyze = pytest.mark.skipif(not shutil.which("systemd-analyze"),
                                           reason="systemd-analyze not installed")


@needs_systemd_analyze
@pytest.mark.parametrize("variant", ["cu128", "cu130"])
def test_rendered_unit_passes_systemd_analyze_verify(tmp_path, variant):
    assert analyze_verify(tmp_path, render(torch_variant=variant)) == (0, [])


@needs_systemd_analyze
def test_systemd_analyze_verify_catches_a_broken_unit(tmp_path):
    _, problems = analyze_verify(tmp_path, render().replace("Restart=on-failure", "Restart=sometimes"))
    assert any("Failed to parse service restart specifier" in line for line in problems), problems

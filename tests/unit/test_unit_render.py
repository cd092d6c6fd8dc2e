"""The rendered training unit: golden files for both variants, values from settings, and
`systemd-analyze verify` on the controller.

Regenerate the golden files after an intended template change with
PVEGPU_UPDATE_GOLDEN=1 uv run pytest tests/unit/test_unit_render.py: the golden test then rewrites
them and fails (a run that rewrites never passes), so review the diff and run the tests again."""

import os
import shutil
import subprocess
from pathlib import Path

import pytest

from pvegpu.plan.unit import (
    TEMPLATES,
    desired_start,
    digest,
    parse_started_record,
    pending_reasons,
    render_unit,
    training_argv_prefix,
    training_matcher,
    unit_problems,
)
from pvegpu.settings import Settings, SettingsError, defaults
from pvegpu.startup.all_settings import load_all

GOLDEN = Path(__file__).parent / "golden"


def settings(**over):
    return Settings.from_data({**defaults(), **over})


def render(**over):
    return render_unit(settings(**over))


@pytest.mark.parametrize("variant", ["cu128", "cu130"])
def test_rendered_unit_matches_the_golden_file(variant):
    text = render(torch_variant=variant)
    golden = GOLDEN / f"dflash-train.{variant}.service"
    if os.environ.get("PVEGPU_UPDATE_GOLDEN") and text != golden.read_text():
        golden.write_text(text)
        pytest.fail(f"rewrote {golden.name}: review the diff, then run the tests again without "
                    "PVEGPU_UPDATE_GOLDEN")
    assert text == golden.read_text()


def service_directives(text):
    """{key: [values]} of the [Service] section, continuation lines joined."""
    section, out, lines = None, {}, text.replace("\\\n", " ").splitlines()
    for line in lines:
        if line.startswith("["):
            section = line
        elif section == "[Service]" and "=" in line and not line.startswith("#"):
            key, _, value = line.partition("=")
            out.setdefault(key, []).append(value)
    return out


@pytest.mark.parametrize("variant", ["cu128", "cu130"])
def test_safety_directives_are_exactly_what_protects_the_training(variant):
    d = service_directives(render(torch_variant=variant))
    # The whole cgroup is stopped together (no orphaned dataloader workers holding GPUs), with
    # SIGTERM first and the checkpoint window before SIGKILL; restarts only on failure, backed off.
    assert d["KillMode"] == ["control-group"]
    assert d["KillSignal"] == ["SIGTERM"]
    assert d["TimeoutStopSec"] == ["900s"]
    assert d["Restart"] == ["on-failure"] and d["RestartSec"] == ["30s"]
    assert d["Type"] == ["simple"]
    # The start record may fail without blocking the start: the leading "-".
    assert len(d["ExecStartPre"]) == 1 and d["ExecStartPre"][0].startswith("-/bin/sh -c '")
    assert len(d["ExecStart"]) == 1 and "ExecStop" not in d
    assert d["WorkingDirectory"] == ["/data/dflash"]
    assert "SendSIGKILL" not in d and "KillMode=none" not in render(torch_variant=variant)


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
                 "# Back off: at most 3 starts an hour", "2 automatic restarts right after a",
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


@pytest.mark.parametrize("over, fragment", [
    ({"pytorch_cuda_alloc_conf": "a\nExecStartPre=/bin/touch /tmp/INJECTED"},
     "pytorch_cuda_alloc_conf='a\\nExecStartPre=/bin/touch /tmp/INJECTED' has characters outside"),
    ({"training_script": "/data/dflash/my train.py"}, "training_script='/data/dflash/my train.py' has a"),
    ({"training_script": "/data/dflash/it's.py"}, "training_script=\"/data/dflash/it's.py\" has a"),
    ({"training_script": "/data/dflash/$(id).py"}, "training_script='/data/dflash/$(id).py' has a"),
    ({"training_script": "/data/dflash/%n.py"}, "training_script='/data/dflash/%n.py' has a"),
    ({"checkpoint_dir": "/data/ck\n[Install]"}, "checkpoint_dir='/data/ck\\n[Install]' contains a newline"),
    ({"training_unit_name": "x\nExecStartPre=/bin/true"}, "is not a valid unit name"),
])
def test_no_value_can_rewrite_or_break_the_unit(over, fragment):
    with pytest.raises(SettingsError) as e:
        settings(**over)
    lines = str(e.value).splitlines()
    assert len(lines) == 1 and fragment in lines[0], lines


@pytest.mark.parametrize("key, value", [
    ("pytorch_cuda_alloc_conf", "a\nExecStartPre=/bin/touch /tmp/INJECTED"),
    ("training_script", "/data/it's here.py"),
    ("checkpoint_dir", "/data/$(id)"),
])
def test_the_renderer_refuses_what_settings_would_have_refused(key, value):
    # A second line of defence: even a value that bypassed validation never reaches the unit.
    s = settings().changed(**{key: value})
    with pytest.raises(SettingsError, match="cannot be written into a systemd unit"):
        render_unit(s)
    assert unit_problems(s)[0].startswith(repr(value))


@needs_systemd_analyze
def test_a_unit_systemd_analyze_rejects_fails_the_settings_check(tmp_path):
    broken = tmp_path / "templates"
    shutil.copytree(TEMPLATES, broken)
    unit = broken / "training.service.j2"
    unit.write_text(unit.read_text().replace("--resume{% endif %}'", "--resume{% endif %}"))
    problems = unit_problems(settings(), templates=broken)
    assert problems and all(p.startswith("dflash-train.service as rendered is rejected by "
                                         "systemd-analyze verify: ") for p in problems), problems
    assert unit_problems(settings()) == []


def test_load_all_reports_unit_problems_per_host(monkeypatch):
    import pvegpu.plan.unit

    class Host:
        name, data = "@pct/127.0.0.1/200", defaults()

    monkeypatch.setattr(pvegpu.plan.unit, "unit_problems", lambda s: ["bad unit: fix it"])
    with pytest.raises(SettingsError, match=r"@pct/127.0.0.1/200: bad unit: fix it"):
        load_all([Host()])

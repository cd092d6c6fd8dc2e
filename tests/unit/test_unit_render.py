"""The rendered training unit (one for every variant) and each build's training settings file:
golden files, values from settings, the ExecStart run by a real shell, and `systemd-analyze verify`
on the controller.

Regenerate the golden files after an intended template change with
PVEGPU_UPDATE_GOLDEN=1 uv run pytest tests/unit/test_unit_render.py: the golden test then rewrites
them and fails (a run that rewrites never passes), so review the diff and run the tests again."""

import os
import shlex
import shutil
import subprocess
from pathlib import Path

import pytest

from pvegpu.plan.unit import (
    BUILD_ENV,
    TEMPLATES,
    desired_start,
    digest,
    parse_started_record,
    pending_reasons,
    render_build_env,
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


def matches_golden(text: str, name: str) -> None:
    golden = GOLDEN / name
    if os.environ.get("PVEGPU_UPDATE_GOLDEN") and text != golden.read_text():
        golden.write_text(text)
        pytest.fail(
            f"rewrote {golden.name}: review the diff, then run the tests again without "
            "PVEGPU_UPDATE_GOLDEN"
        )
    assert text == golden.read_text()


@pytest.mark.parametrize("variant", ["cu128", "cu130"])
def test_rendered_unit_matches_the_golden_file(variant):
    matches_golden(render(torch_variant=variant), "dflash-train.service")


@pytest.mark.parametrize("variant", ["cu128", "cu130"])
def test_each_builds_training_settings_match_the_golden_file(variant):
    matches_golden(render_build_env(settings(torch_variant=variant)), f"train.{variant}.env")


def test_the_unit_is_the_same_for_every_variant_so_a_swap_rewrites_nothing():
    assert render(torch_variant="cu128") == render(torch_variant="cu130")
    assert render_build_env(settings(torch_variant="cu128")) != render_build_env(settings())


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
    # SIGTERM to the trainer only (its DataLoader workers die by anyone else's and cost the
    # checkpoint), the checkpoint window before SIGKILL to what is left; restarts only on
    # failure, backed off.
    assert d["KillMode"] == ["mixed"]
    assert d["KillSignal"] == ["SIGTERM"]
    assert d["TimeoutStopSec"] == ["900s"]
    assert d["Restart"] == ["on-failure"] and d["RestartSec"] == ["30s"]
    assert d["Type"] == ["simple"]
    # The start record may fail without blocking the start: the leading "-".
    assert len(d["ExecStartPre"]) == 1 and d["ExecStartPre"][0].startswith("-/bin/sh -c '")
    assert len(d["ExecStart"]) == 1 and "ExecStop" not in d
    assert d["WorkingDirectory"] == ["/data/dflash"]
    assert "SendSIGKILL" not in d and "KillMode=none" not in render(torch_variant=variant)


def env_of(**over):
    return render_build_env(settings(**over))


def test_cu130_gets_its_smaller_budget_and_own_caches():
    text = env_of()
    assert "TOKEN_BUDGET=49152\n" in text and "MAX_BATCH_SIZE=48\n" in text
    assert "export TORCHINDUCTOR_CACHE_DIR=/data/cache/torch-2.11.0-cu130/inductor\n" in text
    assert "export TRITON_CACHE_DIR=/data/cache/torch-2.11.0-cu130/triton\n" in text


def test_cu128_uses_the_defaults():
    text = env_of(torch_variant="cu128")
    assert "TOKEN_BUDGET=65536\n" in text and "MAX_BATCH_SIZE=64\n" in text
    assert "/data/cache/torch-2.11.0-cu128/" in text and "cu130" not in text


def test_every_value_comes_from_settings():
    over = dict(
        training_script="/data/x/run.py",
        training_workdir="/data/x",
        dataset_dir="/data/ds",
        checkpoint_dir="/data/ck",
        resume=False,
        training_stop_timeout_s=1800,
        training_restart_delay_s=60,
        training_restart_burst=3,
        venv_path="/opt/venv",
        pytorch_cuda_alloc_conf="max_split_size_mb:512",
        training_unit_name="drafter",
        variant_overrides={"cu130": {"token_budget": 1000}},
        data_dir_ct="/data2",
    )
    text = render(**over)
    for line in (
        'b="$$(readlink -f /opt/venv)"',
        '. "$$b/.pvegpu-train.env"',
        'exec "$$b/bin/python" "$$@"',
        "WorkingDirectory=/data/x",
        "TimeoutStopSec=1800s",
        "RestartSec=60s",
        "StartLimitBurst=3",
        "PYTORCH_CUDA_ALLOC_CONF=max_split_size_mb:512",
        "SyslogIdentifier=drafter",
        "RuntimeDirectory=pvegpu-drafter",
        "# Back off: at most 3 starts an hour",
        "2 automatic restarts right after a",
        "RequiresMountsFor=/data2",
    ):
        assert line in text, line
    env = env_of(**over)
    assert "--resume" not in env
    for line in (
        "set -- /data/x/run.py ",
        "--dataset-dir /data/ds",
        "--checkpoint-dir /data/ck",
        "TOKEN_BUDGET=1000",
        "MAX_BATCH_SIZE=64",
        "/data2/cache/torch-2.11.0-cu130/inductor",
        "drafter.service reads it",
    ):
        assert line in env, line


def test_exec_start_runs_the_started_build_with_that_builds_settings(tmp_path):
    """ExecStart as systemd hands it to /bin/sh ($$ -> $), run by a real shell: the python and
    the settings both come from the build the link points at when it starts."""
    s = settings(venv_path=str(tmp_path / "venv"), venvs_dir=str(tmp_path / "venvs"))
    real = tmp_path / "venvs" / "torch-2.11.0-cu130.b1"
    (real / "bin").mkdir(parents=True)
    (real / "bin" / "python").write_text(
        '#!/bin/sh\necho "argv0=$0"; echo "args=$*"; echo "inductor=$TORCHINDUCTOR_CACHE_DIR"; '
        'echo "leaked=${TOKEN_BUDGET:-none}"\n'
    )
    (real / "bin" / "python").chmod(0o755)
    (real / BUILD_ENV).write_text(render_build_env(s))
    (tmp_path / "venvs" / "torch-2.11.0-cu130").symlink_to(real.name)
    (tmp_path / "venv").symlink_to(tmp_path / "venvs" / "torch-2.11.0-cu130")
    command = service_directives(render_unit(s))["ExecStart"][0]
    script = command.split("/bin/sh -c '", 1)[1].rsplit("'", 1)[0].replace("$$", "$")
    out = subprocess.run(
        ["/bin/sh", "-c", script], capture_output=True, text=True, check=True
    ).stdout
    assert f"argv0={real}/bin/python" in out
    assert (
        "args=/data/dflash/train.py --target-gpus 0,1,2,3,4 --drafter-gpus 5,6,7 "
        "--token-budget 49152 --max-batch-size 48 " in out
    )
    assert "inductor=/data/cache/torch-2.11.0-cu130/inductor" in out
    assert "leaked=none" in out  # only the cache dirs are exported to the trainer
    (real / BUILD_ENV).unlink()  # a build without its settings does not start
    assert subprocess.run(["/bin/sh", "-c", script], capture_output=True).returncode != 0


def test_gpu_roles_are_renumbered_inside_cuda_visible_devices():
    text = render(target_gpus=[2, 3], drafter_gpus=[6])
    assert "CUDA_VISIBLE_DEVICES=2,3,6" in text
    env = env_of(target_gpus=[2, 3], drafter_gpus=[6])
    assert "--target-gpus 0,1" in env and "--drafter-gpus 2" in env


@pytest.mark.parametrize(
    "over, fragment",
    [
        ({"target_gpus": [0, 1, 8]}, "target_gpus has GPU 8, outside 0..7"),
        (
            {"drafter_gpus": [4, 5], "target_gpus": [0, 4]},
            "target_gpus and drafter_gpus overlap on [4]",
        ),
        ({"max_batch_size": -1}, "max_batch_size=-1 (for cu128) must be a positive integer"),
        (
            {"variant_overrides": {"cu130": {"token_budget": 0}}},
            "token_budget=0 (for cu130) must be a positive",
        ),
        (
            {"variant_overrides": {"cu130": {"tokens": 5}}},
            "variant_overrides['cu130'] has unknown key 'tokens'",
        ),
        ({"training_stop_timeout_s": 0}, "training_stop_timeout_s=0 must be positive"),
    ],
)
def test_bad_training_input_is_one_clear_line(over, fragment):
    with pytest.raises(SettingsError) as e:
        settings(**over)
    assert any(fragment in line for line in str(e.value).splitlines()), str(e.value)


def test_a_restart_is_pending_only_when_what_runs_differs_from_what_a_start_would_run():
    s = settings()
    text, env = render_unit(s), render_build_env(s)
    record = (
        f"unit {digest(text)}  -\nvenv /root/venvs/torch-2.11.0-cu130\nbuilt 1700000000\n"
        f"env {digest(env)}  -\n"
    )
    started = parse_started_record(record)
    assert pending_reasons(started, desired_start(s, text, 1700000000)) == []
    assert pending_reasons(started, desired_start(s, text, 1700000099)) == [
        "venv /root/venvs/torch-2.11.0-cu130 was rebuilt"
    ]
    assert pending_reasons(started, desired_start(s, text + "#", 1700000000)) == [
        "unit file changed"
    ]
    smaller = settings(variant_overrides={"cu130": {"token_budget": 1000}})
    assert pending_reasons(started, desired_start(smaller, render_unit(smaller), 1700000000)) == [
        "training settings of /root/venvs/torch-2.11.0-cu130 changed (training_command, "
        "training_env, token_budget, max_batch_size or compile cache dir)"
    ]
    # a swap: the unit file is the same, the build (with its own settings) is another
    s128 = settings(torch_variant="cu128")
    assert pending_reasons(started, desired_start(s128, render_unit(s128), 1)) == [
        "venv build /root/venvs/torch-2.11.0-cu130 -> /root/venvs/torch-2.11.0-cu128"
    ]
    assert "no start record" in pending_reasons(None, desired_start(s, text, 1))[0]


def test_exec_start_pins_the_build_and_leftovers_are_recognised_by_its_argv():
    s = settings()
    exec_start = service_directives(render_unit(s))["ExecStart"][0]
    # The trainer runs from the build the link pointed at when it started, not through the link.
    assert exec_start.startswith('/bin/sh -c \'b="$$(readlink -f /root/venv)" && ')
    m = training_matcher(s)
    (line,) = [x for x in render_build_env(s).splitlines() if x.startswith("set -- ")]
    argv = shlex.split(line)[2:]
    assert argv[0] == m["script"] == training_argv_prefix(s)[1]
    assert m["pythons"] == [training_argv_prefix(s)[0]] and m["python_under"] == ["/root/venvs/"]


def analyze_verify(tmp_path, text):
    """(exit status, problem lines) of `systemd-analyze verify` on the rendered unit. It reports
    bad values on stderr and still exits 0 ("..., ignoring"), so every line naming the unit counts.
    ExecStart's program is /bin/sh, so the unit is verified exactly as rendered."""
    unit = tmp_path / "dflash-train.service"
    unit.write_text(text)
    p = subprocess.run(["systemd-analyze", "verify", str(unit)], capture_output=True, text=True)
    return p.returncode, [line for line in p.stderr.splitlines() if "dflash-train.service" in line]


needs_systemd_analyze = pytest.mark.skipif(
    not shutil.which("systemd-analyze"), reason="systemd-analyze not installed"
)


@needs_systemd_analyze
@pytest.mark.parametrize("variant", ["cu128", "cu130"])
def test_rendered_unit_passes_systemd_analyze_verify(tmp_path, variant):
    assert analyze_verify(tmp_path, render(torch_variant=variant)) == (0, [])


@needs_systemd_analyze
def test_systemd_analyze_verify_catches_a_broken_unit(tmp_path):
    _, problems = analyze_verify(
        tmp_path, render().replace("Restart=on-failure", "Restart=sometimes")
    )
    assert any("Failed to parse service restart specifier" in line for line in problems), problems


@pytest.mark.parametrize(
    "over, fragment",
    [
        (
            {"pytorch_cuda_alloc_conf": "a\nExecStartPre=/bin/touch /tmp/INJECTED"},
            "pytorch_cuda_alloc_conf='a\\nExecStartPre=/bin/touch /tmp/INJECTED' "
            "has characters outside",
        ),
        (
            {"training_script": "/data/dflash/my train.py"},
            "training_script='/data/dflash/my train.py' has a",
        ),
        (
            {"training_script": "/data/dflash/it's.py"},
            'training_script="/data/dflash/it\'s.py" has a',
        ),
        (
            {"training_script": "/data/dflash/$(id).py"},
            "training_script='/data/dflash/$(id).py' has a",
        ),
        ({"training_script": "/data/dflash/%n.py"}, "training_script='/data/dflash/%n.py' has a"),
        (
            {"checkpoint_dir": "/data/ck\n[Install]"},
            "checkpoint_dir='/data/ck\\n[Install]' contains a newline",
        ),
        ({"training_unit_name": "x\nExecStartPre=/bin/true"}, "is not a valid unit name"),
    ],
)
def test_no_value_can_rewrite_or_break_the_unit(over, fragment):
    with pytest.raises(SettingsError) as e:
        settings(**over)
    lines = str(e.value).splitlines()
    assert len(lines) == 1 and fragment in lines[0], lines


@pytest.mark.parametrize(
    "key, value",
    [
        ("pytorch_cuda_alloc_conf", "a\nExecStartPre=/bin/touch /tmp/INJECTED"),
        ("training_workdir", "/data/it's here"),
        ("data_dir_ct", "/data/$(id)"),
    ],
)
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
    unit.write_text(unit.read_text().replace('exec "$$b/bin/python" "$$@"\'', 'exec "$$b/bin'))
    problems = unit_problems(settings(), templates=broken)
    assert problems and all(
        p.startswith("dflash-train.service as rendered is rejected by systemd-analyze verify: ")
        for p in problems
    ), problems
    assert unit_problems(settings()) == []


def test_load_all_reports_unit_problems_per_host(monkeypatch):
    import pvegpu.plan.unit

    class Node:
        name, data = "127.0.0.1", defaults()

    class Host:
        name, data = "@pct/127.0.0.1/200", {**defaults(), "training_unit_name": "x"}

    def problems(s):
        return ["bad unit: fix it"] if s.training.unit_name == "x" else []

    monkeypatch.setattr(pvegpu.plan.unit, "unit_problems", problems)
    with pytest.raises(SettingsError, match=r"\n@pct/127.0.0.1/200: bad unit: fix it$"):
        load_all([Node(), Host()])
    # a problem every host of the run has is one line, without host names
    monkeypatch.setattr(pvegpu.plan.unit, "unit_problems", lambda s: ["bad unit: fix it"])
    with pytest.raises(SettingsError, match=r"nothing was changed:\nbad unit: fix it$"):
        load_all([Node(), Host()])


def test_the_torchrun_unit_gives_the_launchers_own_wait_the_whole_stop_timeout():
    """From torch 2.12 the launcher waits TORCH_ELASTIC_SHUTDOWN_TIMEOUT (not 30 s) before it
    SIGKILLs workers still checkpointing; the python launcher has no such wait."""
    d = service_directives(render(training_launcher="torchrun", training_stop_timeout_s=1200))
    assert "TORCH_ELASTIC_SHUTDOWN_TIMEOUT=1200" in d["Environment"]
    assert d["TimeoutStopSec"] == ["1200s"] and len(d["ExecStop"]) == 1
    plain = service_directives(render())
    assert not any(e.startswith("TORCH_ELASTIC") for e in plain["Environment"])

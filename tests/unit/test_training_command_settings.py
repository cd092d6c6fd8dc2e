"""training_command, training_launcher and training_env: placeholders checked (an unknown one
refused with a suggestion), GPU roles required only when the command uses them, and every
argument reaching the trainer exactly as written: the build's settings file is sourced by a real
/bin/sh here, as the unit's ExecStart does."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from pvegpu.plan.command import argv_for, launcher_args
from pvegpu.plan.unit import (
    desired_start,
    pending_reasons,
    render_build_env,
    render_unit,
    unit_problems,
)
from pvegpu.settings import Settings, SettingsError, defaults
from tests.own_processes import kill_ours
from tests.unit.test_stop_probe import TRAINER

DDP = ["{script}", "--nproc", "{gpu_count}", "--out", "{checkpoint_dir}", "{resume_flag}"]


def settings(**over) -> Settings:
    return Settings.from_data({**defaults(), **over})


def refusal(**over) -> list[str]:
    with pytest.raises(SettingsError) as e:
        settings(**over)
    return str(e.value).splitlines()


def trainer_argv(s: Settings, tmp_path) -> list[str]:
    """The argv the build's python gets: the settings file sourced by /bin/sh with ``$b`` set,
    as ExecStart does, each argument printed NUL-terminated."""
    env = tmp_path / "train.env"
    env.write_text(render_build_env(s))
    script = f'b=/B; . "{env}"; printf "%s\\0" "$@"'
    out = subprocess.run(["/bin/sh", "-c", script], capture_output=True, check=True).stdout
    return out.decode().split("\0")[:-1]


def test_the_default_is_the_dflash_command_unchanged(tmp_path):
    assert trainer_argv(settings(), tmp_path) == [
        "/data/dflash/train.py",
        *("--target-gpus", "0,1,2,3,4", "--drafter-gpus", "5,6,7"),
        *("--token-budget", "49152", "--max-batch-size", "48"),
        *("--dataset-dir", "/data/datasets", "--checkpoint-dir", "/data/checkpoints", "--resume"),
    ]
    assert trainer_argv(settings(torch_variant="cu128", resume=False), tmp_path)[5:7] == [
        "--token-budget",
        "65536",
    ]
    assert "--resume" not in trainer_argv(settings(resume=False), tmp_path)


@pytest.mark.parametrize(
    "arg",
    [
        "a b",
        "it's",
        'say "hi"',
        "$(touch /tmp/pvegpu-INJECTED)",
        "`id`",
        "x; rm -rf /",
        "%h %n $HOME ${{PATH}}",
        "back\\slash",
        "*",
        "",
        "--opt={{literal}}",
    ],
)
def test_every_argument_reaches_the_trainer_exactly_as_written(tmp_path, arg):
    s = settings(training_command=["{script}", arg, "--tail"])
    expected = arg.replace("{{", "{").replace("}}", "}")
    assert trainer_argv(s, tmp_path) == ["/data/dflash/train.py", expected, "--tail"]
    assert unit_problems(s) == []  # the unit never holds the arguments: nothing to escape there


def test_placeholders_are_filled_inside_an_argument_and_python_is_the_started_build(tmp_path):
    s = settings(
        training_command=["-m", "pkg.train", "--py={python}", "--tb={token_budget}", "{gpus}"]
    )
    assert trainer_argv(s, tmp_path) == [
        "-m",
        "pkg.train",
        "--py=/B/bin/python",
        "--tb=49152",
        "0,1,2,3,4,5,6,7",
    ]


@pytest.mark.parametrize(
    "arg, fragment",
    [
        ("{scrpt}", "has unknown placeholder {scrpt}: did you mean {script}?"),
        (
            "--tb={token_budgt}",
            "has unknown placeholder {token_budgt}: did you mean {token_budget}?",
        ),
        ("{nope}", "has unknown placeholder {nope}: (placeholders: {checkpoint_dir},"),
        ("{gpus!r}", "placeholder {gpus} takes no format or conversion: write it as {gpus}"),
        ("{gpu_count:>3}", "placeholder {gpu_count} takes no format or conversion"),
        ("{script", "has a lone brace: write a literal brace as {{ or }}"),
        ("a\nb", "holds a newline or NUL: remove it"),
    ],
)
def test_a_bad_argument_is_one_line_naming_it_and_the_fix(arg, fragment):
    lines = refusal(training_command=["{script}", arg])
    assert len(lines) == 1 and fragment in lines[0], lines
    assert lines[0].startswith(f"training_command argument {arg!r}"), lines


def test_an_empty_command_and_an_unknown_launcher_are_refused():
    assert refusal(training_command=[]) == [
        "training_command is empty: give the script and its arguments"
    ]
    assert refusal(training_launcher="mpirun") == [
        "training_launcher='mpirun' is unknown: use python or torchrun"
    ]


def test_a_gpu_role_is_required_only_when_the_command_uses_it():
    # the DFlash command uses both roles
    assert refusal(drafter_gpus=[]) == [
        "drafter_gpus is empty, but training_command uses {drafter_gpus}: list its GPU indices, "
        "e.g. --data drafter_gpus=[0,1], or take {drafter_gpus} out of training_command"
    ]
    # a DDP script names no role: every GPU a target, no drafter
    s = settings(training_command=DDP, target_gpus=list(range(8)), drafter_gpus=[])
    assert s.gpus.drafters == () and unit_problems(s) == []
    # a one-GPU node
    one = settings(
        training_command=["{script}", "--out", "{checkpoint_dir}"],
        expected_gpu_count=1,
        target_gpus=[0],
        drafter_gpus=[],
    )
    assert "CUDA_VISIBLE_DEVICES=0\n" in render_unit(one)
    # but some GPU the training must have
    assert refusal(training_command=DDP, target_gpus=[], drafter_gpus=[]) == [
        "target_gpus and drafter_gpus are both empty: list the GPUs the training uses, "
        "e.g. --data target_gpus=[0]"
    ]


def test_torchrun_runs_one_local_worker_per_training_gpu(tmp_path):
    s = settings(training_launcher="torchrun", training_command=DDP, drafter_gpus=[])
    assert trainer_argv(s, tmp_path)[:5] == [
        "-m",
        "torch.distributed.run",
        "--standalone",
        "--nnodes=1",
        "--nproc-per-node=5",
    ]
    assert argv_for(s)[5:8] == ["/data/dflash/train.py", "--nproc", "5"]
    assert launcher_args("python", 5) == []


@pytest.mark.parametrize("version, held", [("2.11.0", True), ("2.12.0", False), ("3.0.1", False)])
def test_only_a_torchrun_unit_before_torch_2_12_holds_its_launcher(version, held):
    """Before torch 2.12 the launcher SIGKILLs its workers 30 s after it forwards a signal: the
    stop holds it; from 2.12 that wait is TORCH_ELASTIC_SHUTDOWN_TIMEOUT and it runs on."""
    torchrun = render_unit(settings(training_launcher="torchrun", torch_version=version))
    stop = [line for line in torchrun.splitlines() if line.startswith("ExecStop=")]
    assert len(stop) == 1 and ('kill -STOP "$$m"' in stop[0]) == held
    assert "kill -STOP" not in torchrun.replace(stop[0], "")
    # the wait ends 5 s before TimeoutStopSec (900 s), which applies to ExecStop too
    assert "kill -TERM $$w" in torchrun and "-lt 895 ]" in torchrun
    assert "Environment=TORCH_ELASTIC_SHUTDOWN_TIMEOUT=900\n" in torchrun
    python = render_unit(settings(torch_version=version))
    assert "ExecStop=" not in python  # python: systemd's SIGTERM to the trainer


# A worker that says it is ready, then waits; on SIGTERM it writes its checkpoint and exits.
WORKER = TRAINER  # the stop probe tests' own


def exec_stop_script(unit_text: str, cgroup_fs: Path) -> str:
    """The ExecStop's script as systemd hands it to /bin/sh (continuations joined, $$ -> $,
    %% -> %), the cgroup filesystem moved to ``cgroup_fs``: a test process has no unit's cgroup
    of its own, so its cgroup.procs is written by the test."""
    text = unit_text.replace("\\\n", " ")
    stop = next(line for line in text.splitlines() if line.startswith("ExecStop="))
    script = stop.split("/bin/sh -c '", 1)[1].rsplit("'", 1)[0]
    return script.replace("$$", "$").replace("%%", "%").replace("/sys/fs/cgroup", str(cgroup_fs))


# torchrun's place: it starts the worker as its child, says which pid it got, then waits.
LAUNCHER = textwrap.dedent(
    """
    import subprocess, sys, time
    worker = subprocess.Popen([sys.executable, "-c", sys.argv[1], sys.argv[2]])
    open(sys.argv[2] + ".pid", "w").write(str(worker.pid))
    while True:
        time.sleep(1)
    """
)


def proc_state(pid: int) -> str | None:
    """The state letter of /proc/<pid>/stat (Z: exited, not reaped), None when gone."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return None


def test_the_torchrun_stop_waits_for_the_workers_checkpoint_and_never_signals_itself(tmp_path):
    """The ExecStop run by a real shell against real processes: the launcher held, its worker
    checkpoints on SIGTERM, and the stop (itself a process of the unit's cgroup) ends normally
    once the worker is gone, leaving the launcher to systemd's own SIGTERM."""
    lines = Path("/proc/self/cgroup").read_text().splitlines()
    cgroup = next((line[3:] for line in lines if line.startswith("0::")), None)
    if cgroup is None or not cgroup.startswith("/"):
        pytest.skip("no cgroup v2 path in /proc/self/cgroup")
    procs = tmp_path / "cg" / cgroup.lstrip("/") / "cgroup.procs"
    procs.parent.mkdir(parents=True, exist_ok=True)
    out = tmp_path / "worker"
    launcher = subprocess.Popen([sys.executable, "-c", LAUNCHER, WORKER, str(out)])
    worker = None
    try:
        while not (out.with_name("worker.ready").exists() and out.with_name("worker.pid").exists()):
            assert launcher.poll() is None, "the launcher exited before its worker was ready"
            subprocess.run(["sleep", "0.02"], check=True)
        worker = int(out.with_name("worker.pid").read_text())
        procs.write_text(f"{launcher.pid}\n{worker}\n")
        script = exec_stop_script(
            render_unit(settings(training_launcher="torchrun", training_command=DDP)),
            tmp_path / "cg",
        )
        # the stop's own shell is in the unit's cgroup too, as systemd runs ExecStop there
        wrapper = 'echo "$$" >> "$1" && exec /bin/sh -c "$2"'
        done = subprocess.run(
            ["/bin/sh", "-c", wrapper, "sh", str(procs), script],
            env=dict(os.environ, MAINPID=str(launcher.pid)),
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert done.returncode == 0, (done.returncode, done.stderr)
        assert out.with_name("worker.checkpoint").read_text() == "done"
        assert proc_state(worker) in ("Z", None)  # exited: a zombie of the held launcher
        assert proc_state(launcher.pid) == "T"  # systemd's SIGTERM and SIGCONT end it next
    finally:
        launcher.kill()
        launcher.wait()
        kill_ours(str(tmp_path))  # the worker if left; never its recorded pid (reused maybe)


@pytest.mark.skipif(not shutil.which("systemd-analyze"), reason="systemd-analyze not installed")
@pytest.mark.parametrize("version", ["2.11.0", "2.12.0"])  # the launcher held, and not
def test_a_torchrun_unit_passes_systemd_analyze_verify(version):
    s = settings(training_launcher="torchrun", training_command=DDP, torch_version=version)
    assert unit_problems(s) == []


def test_training_env_is_exported_quoted_and_may_not_change_what_pvegpu_sets(tmp_path):
    s = settings(training_env={"NCCL_DEBUG": "WARN", "MY_FLAGS": "a b $x"})
    env = tmp_path / "e"
    env.write_text(render_build_env(s))
    out = subprocess.run(
        ["/bin/sh", "-c", f'b=/B; . "{env}"; env'], capture_output=True, text=True, check=True
    ).stdout.splitlines()
    assert "NCCL_DEBUG=WARN" in out and "MY_FLAGS=a b $x" in out
    lines = refusal(training_env={"CUDA_VISIBLE_DEVICES": "0", "1BAD": "x"})
    assert lines == [
        "training_env sets CUDA_VISIBLE_DEVICES, which pvegpu sets: set target_gpus and "
        "drafter_gpus",
        "training_env name '1BAD' is not a variable name: use letters, digits and _ (not a digit "
        "first)",
    ]


@pytest.mark.parametrize(
    "value, words",
    [
        ("a\tb", "tab"),
        ("a\rb", "CR"),
        ("a\nb", "newline"),
        ("a\0b", "NUL"),
        ("a\x1bb", "0x1b"),
        ("a\t\tb\r", "tab, CR"),
    ],
)
def test_a_control_character_in_training_env_is_refused_at_preflight(value, words):
    assert refusal(training_env={"MY_FLAGS": value}) == [
        f"training_env['MY_FLAGS'] holds a control character ({words}): remove it"
    ]


def test_a_changed_command_is_a_pending_restart_like_any_change_of_what_a_start_runs():
    s = settings()
    unit, env = render_unit(s), render_build_env(s)
    from pvegpu.digests import text_digest

    started = {
        "unit": text_digest(unit),
        "venv": s.build_venv,
        "built": "1",
        "env": text_digest(env),
    }
    assert pending_reasons(started, desired_start(s, unit, 1)) == []
    other = settings(training_command=DDP)
    assert render_unit(other) != unit  # its comment names the command
    assert pending_reasons(started, desired_start(other, render_unit(other), 1)) == [
        "unit file changed",
        f"training settings of {s.build_venv} changed (training_command, training_env, "
        "token_budget, max_batch_size or compile cache dir)",
    ]

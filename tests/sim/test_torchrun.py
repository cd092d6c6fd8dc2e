"""The torch double's launcher (``python -m torch.distributed.run``, the ``torchrun`` script), run
on the host as torch's own does it (docs/real-tools.md, "PyTorch: torchrun"): each worker is
``python -u <script> <args>`` in its own session with the rank variables; a death signal is
forwarded to every worker's process group and what still runs 30 s later (from torch 2.12:
``--shutdown-timeout``, else ``TORCH_ELASTIC_SHUTDOWN_TIMEOUT``) is SIGKILLed; a failed worker
group is started again while ``--max-restarts`` allow."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from uv import find_uv_bin

from sim.wheels import build_torch_wheels
from tests.own_processes import kill_ours

WORKER = r"""
import json, os, signal, sys, time
out = sys.argv[sys.argv.index("--out") + 1]
rank, restart = os.environ["LOCAL_RANK"], os.environ["TORCHELASTIC_RESTART_COUNT"]
modes = json.load(open(os.path.join(out, "modes.json")))
mode = modes.get(f"{rank}/{restart}", modes.get(rank, "run"))
keys = ("RANK", "LOCAL_RANK", "WORLD_SIZE", "LOCAL_WORLD_SIZE", "GROUP_RANK", "ROLE_NAME",
        "MASTER_ADDR", "MASTER_PORT", "TORCHELASTIC_RUN_ID", "TORCHELASTIC_RESTART_COUNT",
        "TORCHELASTIC_MAX_RESTARTS", "TORCHELASTIC_USE_AGENT_STORE", "OMP_NUM_THREADS",
        "CUDA_VISIBLE_DEVICES")
doc = {"argv": open("/proc/self/cmdline", "rb").read().decode().split("\0")[:-1],
       "env": {k: os.environ.get(k) for k in keys}, "pid": os.getpid(),
       "sid": os.getsid(0), "pgid": os.getpgid(0)}
if mode == "exit3":
    sys.exit(3)
if mode == "ignore":
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
else:
    def term(signum, frame):
        open(os.path.join(out, f"term-{rank}"), "w").close()
        sys.exit(0)
    signal.signal(signal.SIGTERM, term)
# written whole, then renamed: the test reads start files while workers still write theirs
name = os.path.join(out, f"start-{rank}-{restart}.json")
with open(name + ".tmp", "w") as f:
    json.dump(doc, f)
os.replace(name + ".tmp", name)
if mode == "exit0":
    sys.exit(0)
while True:
    time.sleep(0.2)
"""


@pytest.fixture(scope="module")
def torch_2_12(tmp_path_factory) -> Path:
    """The torch double's 2.12.0+cu130 wheel (the default wheelhouse's is 2.11.0)."""
    out = tmp_path_factory.mktemp("torch-2.12")
    return build_torch_wheels(out, version="2.12.0", variants=("cu130",))["cu130"]


@pytest.fixture
def job(tmp_path, wheelhouse):
    """(start(modes, *launcher_args) -> Popen, out dir): the launcher from the cu130 wheel."""
    yield from launcher_job(tmp_path, wheelhouse.torch["cu130"])


@pytest.fixture
def job_2_12(tmp_path, torch_2_12):
    """``job`` with torch 2.12's launcher."""
    yield from launcher_job(tmp_path, torch_2_12)


def launcher_job(tmp_path, wheel: Path):
    out = tmp_path / "out"
    out.mkdir()
    script = tmp_path / "worker.py"
    script.write_text(WORKER)
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PVE_SIM", "PET_", "OMP_"))}
    env.pop("TORCH_ELASTIC_SHUTDOWN_TIMEOUT", None)
    env.update(PYTHONPATH=str(wheel), PYTHONDONTWRITEBYTECODE="1")
    procs = []

    def start(modes, *launcher, argv=None):
        (out / "modes.json").write_text(json.dumps(modes))
        cmd = argv or [sys.executable, "-m", "torch.distributed.run"]
        p = subprocess.Popen(
            [*cmd, *launcher, str(script), "--out", str(out), "--a b", "$HOME;x"],
            env=env,
            stderr=subprocess.PIPE,
            text=True,
        )
        procs.append(p)
        return p

    yield start, out
    for p in procs:  # a failed test leaves no launcher (its workers go with their groups below)
        if p.poll() is None:
            p.kill()
            p.wait()
    # its workers' groups end with them; never os.killpg of a recorded pgid, whose worker may
    # be long gone and its pid another test's (tests/own_processes.py)
    kill_ours(str(tmp_path))


def wait_for(what, fetch, timeout=60):
    """A bound on waiting, never an assertion on time."""
    deadline = time.monotonic() + timeout
    while not (value := fetch()):
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.05)
    return value


def starts(out, restart=0):
    return {
        json.loads(f.read_text())["env"]["LOCAL_RANK"]: json.loads(f.read_text())
        for f in out.glob(f"start-*-{restart}.json")
    }


def test_standalone_workers_get_their_ranks_own_sessions_and_python_u(job):
    start, out = job
    p = start({"0": "exit0", "1": "exit0", "2": "exit0"}, "--standalone", "--nproc-per-node", "3")
    assert p.wait(timeout=60) == 0, p.stderr.read()
    docs = starts(out)
    assert sorted(docs) == ["0", "1", "2"]
    run_ids = {d["env"]["TORCHELASTIC_RUN_ID"] for d in docs.values()}
    assert len(run_ids) == 1 and len(run_ids.pop()) == 36  # --standalone: a fresh uuid4
    for rank, d in docs.items():
        assert d["argv"][:2] == [sys.executable, "-u"]
        assert d["argv"][3:] == ["--out", str(out), "--a b", "$HOME;x"]  # verbatim
        assert d["sid"] == d["pid"] == d["pgid"]  # start_new_session=True
        env = d["env"]
        assert (env["RANK"], env["WORLD_SIZE"], env["LOCAL_WORLD_SIZE"]) == (rank, "3", "3")
        assert (env["GROUP_RANK"], env["ROLE_NAME"], env["OMP_NUM_THREADS"]) == (
            "0",
            "default",
            "1",
        )
        assert env["TORCHELASTIC_RESTART_COUNT"] == "0" and env["TORCHELASTIC_MAX_RESTARTS"] == "0"
        assert int(env["MASTER_PORT"]) > 0 and env["TORCHELASTIC_USE_AGENT_STORE"] == "True"


def test_a_failed_worker_group_restarts_while_max_restarts_allow(job):
    start, out = job
    p = start(
        {"1/0": "exit3", "0": "exit0", "1": "exit0"},
        "--nproc_per_node=2",
        "--max-restarts=1",
        "--standalone",
    )
    assert p.wait(timeout=60) == 0, p.stderr.read()
    assert sorted(starts(out, 1)) == ["0", "1"]
    assert starts(out, 1)["0"]["env"]["TORCHELASTIC_RESTART_COUNT"] == "1"

    p = start(
        {"0": "exit3", "1": "exit3"}, "--nproc_per_node=2", "--max_restarts", "1", "--standalone"
    )
    err = p.stderr.read()
    assert p.wait(timeout=60) == 1
    assert "ChildFailedError" in err and "worker.py FAILED" in err and "exitcode  : 3" in err


def test_sigterm_is_forwarded_then_what_still_runs_is_killed(job):
    """torchrun's close(SIGTERM, timeout=30): rank 0 checkpoints and exits 0 at once, rank 1
    ignores SIGTERM and is SIGKILLed when the 30 s are over; the launcher ends with status 1."""
    start, out = job
    p = start({"0": "run", "1": "ignore"}, "--standalone", "--nproc-per-node", "2")
    docs = wait_for("both workers", lambda: len(starts(out)) == 2 and starts(out))
    p.send_signal(signal.SIGTERM)
    wait_for("rank 0's SIGTERM", lambda: (out / "term-0").exists())
    assert os.path.exists(f"/proc/{docs['1']['pid']}")  # still running, still ignoring
    err = p.stderr.read()
    assert p.wait(timeout=120) == 1
    # %s of a Signals: "15" from Python 3.11 on ("Signals.SIGTERM" before), as torch logs it
    assert f"Received {signal.SIGTERM} death signal, shutting down workers" in err
    assert f"Sending process {docs['1']['pid']} closing signal SIGTERM" in err
    assert f"Unable to shutdown process {docs['1']['pid']} via {signal.SIGTERM}" in err
    assert not os.path.exists(f"/proc/{docs['1']['pid']}")


def test_the_console_script_is_torchrun(job, wheelhouse, tmp_path):
    """The wheel's entry point installs bin/torchrun (torch.distributed.run:main)."""
    start, out = job
    uv = find_uv_bin()
    venv = tmp_path / "venv"
    env = {k: v for k, v in os.environ.items() if not k.startswith(("UV_", "VIRTUAL_ENV"))}
    env.update(UV_CACHE_DIR=str(tmp_path / "uv-cache"), UV_PYTHON_DOWNLOADS="never")
    for cmd in (
        [uv, "venv", "--python", sys.executable, str(venv)],
        [
            uv,
            "pip",
            "install",
            "--offline",
            "--no-deps",
            "--python",
            str(venv / "bin/python"),
            str(wheelhouse.torch["cu130"]),
        ],
    ):
        subprocess.run(cmd, env=env, check=True, capture_output=True, timeout=300)
    assert (venv / "bin/torchrun").read_text().startswith(f"#!{venv}/bin/python")
    p = start({"0": "exit0"}, argv=[str(venv / "bin/torchrun")])
    assert p.wait(timeout=60) == 0, p.stderr.read()
    (doc,) = starts(out).values()
    assert doc["argv"][:2] == [str(venv / "bin/python"), "-u"]  # sys.executable of the venv
    assert doc["env"]["OMP_NUM_THREADS"] is None  # one worker: left unset

    missing = subprocess.run([str(venv / "bin/torchrun")], capture_output=True, text=True)
    assert missing.returncode == 2
    assert "the following arguments are required: training_script" in missing.stderr


SHUTDOWN_TIMEOUT = """
import sys
from torch.distributed.run import config_from_args, get_args_parser
args = get_args_parser().parse_args([*sys.argv[1:], "train.py"])
print(config_from_args(args)[0].shutdown_timeout)
"""


@pytest.mark.parametrize(
    "version, args, env, timeout",
    [
        ("2.11.0", [], {"TORCH_ELASTIC_SHUTDOWN_TIMEOUT": "600"}, "30"),  # ignored before 2.12
        ("2.12.0", [], {}, "30"),
        ("2.12.0", [], {"TORCH_ELASTIC_SHUTDOWN_TIMEOUT": "600"}, "600"),
        ("2.12.0", ["--shutdown-timeout=120"], {"TORCH_ELASTIC_SHUTDOWN_TIMEOUT": "600"}, "120"),
        ("2.12.0", ["--shutdown_timeout", "7"], {}, "7"),
    ],
)
def test_from_torch_2_12_the_wait_before_sigkill_is_the_shutdown_timeout(
    wheelhouse, torch_2_12, version, args, env, timeout
):
    """torch's own tests (test_launch_config_*_shutdown_timeout): the option, else the
    variable, else 30; torch 2.11 has neither (its --help names no --shutdown-timeout)."""
    wheel = torch_2_12 if version == "2.12.0" else wheelhouse.torch["cu130"]
    base = {k: v for k, v in os.environ.items() if not k.startswith(("PET_", "TORCH_ELASTIC"))}
    base.update(env, PYTHONPATH=str(wheel), PYTHONDONTWRITEBYTECODE="1")
    run = [sys.executable, "-c", SHUTDOWN_TIMEOUT, *args]
    if version == "2.11.0":
        helps = subprocess.run(
            [sys.executable, "-m", "torch.distributed.run", "--help"],
            env=base,
            capture_output=True,
            text=True,
        ).stdout
        assert "--signals-to-handle" in helps and "--shutdown-timeout" not in helps
    done = subprocess.run(run, env=base, capture_output=True, text=True, timeout=60)
    assert (done.returncode, done.stdout.strip()) == (0, timeout), done.stderr


def test_workers_signalled_alone_exit_0_and_the_running_launcher_then_exits_0(job_2_12):
    """What the torch 2.12 unit's stop relies on: a SIGTERM to the workers (not the launcher),
    each exiting 0, is a worker group that SUCCEEDED: the launcher, never signalled, closes
    nobody and exits 0 (SubprocessContext._poll: the others are closed only when one FAILED or
    all finished)."""
    start, out = job_2_12
    p = start({"0": "run", "1": "run"}, "--standalone", "--nproc-per-node", "2")
    docs = wait_for("both workers", lambda: len(starts(out)) == 2 and starts(out))
    for d in docs.values():
        os.kill(d["pid"], signal.SIGTERM)
    err = p.stderr.read()
    assert p.wait(timeout=60) == 0, err
    assert (out / "term-0").exists() and (out / "term-1").exists()
    assert "closing signal" not in err and "death signal" not in err


def test_a_worker_that_fails_makes_the_running_launcher_close_the_others(job_2_12):
    """One worker ends otherwise than by exit 0 (here SIGKILL): the group FAILED and the
    launcher sends SIGTERM to the others' process groups (their DataLoader workers included)."""
    start, out = job_2_12
    p = start({"0": "run", "1": "run"}, "--standalone", "--nproc-per-node", "2")
    docs = wait_for("both workers", lambda: len(starts(out)) == 2 and starts(out))
    os.kill(docs["0"]["pid"], signal.SIGKILL)
    err = p.stderr.read()
    assert p.wait(timeout=60) == 1
    assert f"Sending process {docs['1']['pid']} closing signal SIGTERM" in err
    assert (out / "term-1").exists() and "exitcode  : -9" in err

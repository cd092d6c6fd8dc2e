"""The stand-in trainer (sim/trainer.py): SIGTERM -> at the step boundary a checkpoint that takes
checkpoint_s, its helpers ended by itself, exit 0; a helper signalled by anyone else costs the
checkpoint, as torch's DataLoader workers do."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from sim.torch_double.fake_tree import make_fake_nvidia_root
from sim.trainer import TRAINER
from tests.own_processes import kill_ours


def wait_for(path, timeout=60):
    """A bound on waiting, never an assertion on time."""
    deadline = time.monotonic() + timeout
    while not path.exists():
        assert time.monotonic() < deadline, f"timed out waiting for {path}"
        time.sleep(0.05)


def test_sigterm_marks_stopping_then_writes_the_checkpoint_and_exits_0(tmp_path):
    script = tmp_path / "train.py"
    script.write_text(TRAINER)
    ckpt = tmp_path / "ckpt"
    ckpt.mkdir()
    (ckpt / "checkpoint_s").write_text("1")
    p = subprocess.Popen([sys.executable, str(script), "--checkpoint-dir", str(ckpt)])
    try:
        wait_for(ckpt / f"started-{p.pid}")
        assert not (ckpt / f"checkpoint-{p.pid}").exists()
        p.send_signal(signal.SIGTERM)
        wait_for(ckpt / f"stopping-{p.pid}")
        assert p.wait(timeout=60) == 0
        assert (ckpt / f"checkpoint-{p.pid}").read_text() == "saved on SIGTERM\n"
    finally:
        if p.poll() is None:
            p.kill()
            p.wait()


def start(tmp_path, checkpoint_s="1"):
    script = tmp_path / "train.py"
    script.write_text(TRAINER)
    ckpt = tmp_path / "ckpt"
    ckpt.mkdir()
    (ckpt / "checkpoint_s").write_text(checkpoint_s)
    p = subprocess.Popen(
        [sys.executable, str(script), "--checkpoint-dir", str(ckpt)],
        stderr=subprocess.PIPE,
        text=True,
    )
    wait_for(ckpt / f"started-{p.pid}")
    helpers = [int(x) for x in (ckpt / f"helpers-{p.pid}").read_text().split()]
    return p, ckpt, helpers


def gone(pid):
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(") ", 1)[1][0] in "ZX"
    except OSError:
        return True


def test_its_helpers_are_forked_with_its_argv_and_ended_by_it_after_the_checkpoint(tmp_path):
    p, ckpt, helpers = start(tmp_path)
    try:
        assert len(helpers) == 2
        argv = Path(f"/proc/{p.pid}/cmdline").read_bytes()
        assert all(Path(f"/proc/{h}/cmdline").read_bytes() == argv for h in helpers)
        p.send_signal(signal.SIGTERM)
        assert p.wait(timeout=60) == 0, p.stderr.read()
        assert (ckpt / f"checkpoint-{p.pid}").exists()
        assert all(gone(h) for h in helpers)
    finally:
        if p.poll() is None:
            p.kill()
            p.wait()


def test_a_helper_signalled_by_anyone_but_its_trainer_costs_the_checkpoint(tmp_path):
    """What KillMode=control-group does: SIGTERM to every process of the unit at once."""
    p, ckpt, helpers = start(tmp_path, checkpoint_s="5")
    try:
        for pid in (p.pid, *helpers):
            os.kill(pid, signal.SIGTERM)
        assert p.wait(timeout=60) == 1
        assert "DataLoader worker (pid(s) " in p.stderr.read()
        assert not (ckpt / f"checkpoint-{p.pid}").exists()
    finally:
        if p.poll() is None:
            p.kill()
            p.wait()


def test_helpers_end_when_their_trainer_is_killed(tmp_path):
    p, _ckpt, helpers = start(tmp_path)
    p.kill()
    p.wait()
    deadline = time.monotonic() + 30
    while not all(gone(h) for h in helpers):  # the watchdog polls each second
        assert time.monotonic() < deadline, "a helper outlived its trainer"
        time.sleep(0.1)


@pytest.mark.parametrize("helpers", [0, 2])
def test_under_torchrun_each_worker_takes_its_own_gpu(tmp_path, wheelhouse, helpers):
    """LOCAL_RANK set (torchrun): set_device(local_rank) and a tensor there, before the start is
    recorded: one CUDA context per worker, on its own GPU (the double's contexts.log). torchrun
    forwards SIGTERM to each worker's process group (os.killpg), its DataLoader helpers
    included: a worker without helpers checkpoints, one with them raises and loses it."""
    make_fake_nvidia_root(tmp_path / "root", gpus=2)
    script = tmp_path / "train.py"
    script.write_text(TRAINER)
    ckpt = tmp_path / "ckpt"
    ckpt.mkdir()
    (ckpt / "helpers").write_text(str(helpers))
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PVE_SIM", "OMP_"))}
    env.update(
        PYTHONPATH=str(wheelhouse.torch["cu130"]),
        PVE_SIM_ROOT=str(tmp_path / "root"),
        PYTHONDONTWRITEBYTECODE="1",
    )
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node=2"]
    p = subprocess.Popen([*cmd, str(script), "--checkpoint-dir", str(ckpt)], env=env)
    try:
        for _ in range(1200):
            started = sorted(ckpt.glob("started-*")) if ckpt.exists() else []
            if len(started) == 2 and all(f.read_text().count("\n") == 2 for f in started):
                break
            time.sleep(0.05)
        docs = {}
        for f in started:
            doc = json.loads(f.read_text().splitlines()[1])
            docs[int(f.name.split("-")[1])] = doc
        assert sorted(d["LOCAL_RANK"] for d in docs.values()) == ["0", "1"]
        assert all(d["argv"] == ["--checkpoint-dir", str(ckpt)] for d in docs.values())
        log = tmp_path / "root/proc/driver/nvidia/sim/contexts.log"
        contexts = [json.loads(line) for line in log.read_text().splitlines()]
        assert {c["ns_pid"]: c["gpu_index"] for c in contexts} == {
            pid: int(d["LOCAL_RANK"]) for pid, d in docs.items()
        }
        p.send_signal(signal.SIGTERM)
        assert p.wait(timeout=120) == 1  # torchrun ends with the signal's exception
        saved = [f"checkpoint-{pid}" for pid in sorted(docs)] if not helpers else []
        assert sorted(f.name for f in ckpt.glob("checkpoint-*")) == saved
    finally:
        if p.poll() is None:
            p.kill()
            p.wait()
        # its workers have their own sessions (and helpers): ended by their argv, never by a
        # recorded pid, which may be another test's by now (tests/own_processes.py)
        kill_ours(str(tmp_path))

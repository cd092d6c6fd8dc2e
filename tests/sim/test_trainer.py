"""The stand-in trainer (sim/trainer.py): SIGTERM -> a checkpoint that takes checkpoint_s,
exit 0."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time

from sim.torch_double.fake_tree import make_fake_nvidia_root
from sim.trainer import TRAINER


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


def test_under_torchrun_each_worker_takes_its_own_gpu(tmp_path, wheelhouse):
    """LOCAL_RANK set (torchrun): set_device(local_rank) and a tensor there, before the start is
    recorded: one CUDA context per worker, on its own GPU (the double's contexts.log)."""
    make_fake_nvidia_root(tmp_path / "root", gpus=2)
    script = tmp_path / "train.py"
    script.write_text(TRAINER)
    ckpt = tmp_path / "ckpt"
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
        assert sorted(f.name for f in ckpt.glob("checkpoint-*")) == [
            f"checkpoint-{pid}" for pid in sorted(docs)
        ]
    finally:
        if p.poll() is None:
            p.kill()
            p.wait()
        for f in ckpt.glob("started-*"):  # its workers have their own sessions
            try:
                os.killpg(int(f.name.split("-")[1]), signal.SIGKILL)
            except ProcessLookupError:
                pass

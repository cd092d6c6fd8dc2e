"""The stand-in trainer (sim/trainer.py): SIGTERM -> a checkpoint that takes checkpoint_s,
exit 0."""

from __future__ import annotations

import signal
import subprocess
import sys
import time

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

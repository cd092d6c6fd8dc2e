"""`python -m sim up` keeps its contract in both container modes: `export K=V` lines and the
deploy command, then it waits; SIGTERM tears everything down (with real-systemd containers, the
node's cgroup directories too)."""

import glob
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from sim.fixtures import skip_without_real_systemd

ROOT = Path(__file__).resolve().parents[2]
KEYS = ["PVE_HOST", "PVE_SSH_PORT", "PVE_SSH_USER", "PVE_SSH_KEY", "PVE_SSH_KNOWN_HOSTS", "CT_ID"]


@pytest.mark.parametrize("ct_init", ["exec", "systemd"])
def test_up_prints_the_environment_waits_and_tears_down_on_sigterm(ct_init):
    if ct_init == "systemd":
        skip_without_real_systemd()
    p = subprocess.Popen(
        [sys.executable, "-m", "sim", "up", "--ct-init", ct_init],
        cwd=ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        stdin=subprocess.DEVNULL,
    )
    try:
        lines = []
        for line in p.stdout:
            lines.append(line.rstrip("\n"))
            if line.startswith("# Ctrl-C"):
                break
        exports = [
            line.split(" ", 1)[1].split("=", 1)[0] for line in lines if line.startswith("export ")
        ]
        assert exports == KEYS, lines
        assert any(
            line.startswith("uv run pyinfra inventory.py deploy.py --data ") for line in lines
        ), lines
        key = next(
            line.split("=", 1)[1] for line in lines if line.startswith("export PVE_SSH_KEY=")
        )
        state = Path(key).parents[1]
        assert p.poll() is None  # it waits
        cgroups = glob.glob(f"/sys/fs/cgroup/*/pve-sim-{p.pid}-*") + glob.glob(
            f"/sys/fs/cgroup/pve-sim-{p.pid}-*"
        )
        assert bool(cgroups) == (ct_init == "systemd"), cgroups
        p.send_signal(signal.SIGTERM)
        assert p.wait(timeout=60) == 0
        assert not state.exists()
        assert not any(os.path.exists(d) for d in cgroups), cgroups
    finally:
        if p.poll() is None:
            p.kill()
            p.wait()

"""How a run ends, run for real: the start watch's script against a unit that restarts (a
real sh with stand-ins for systemctl and journalctl), and a deploy process cut short by SIGINT
or SIGTERM (pvegpu.startup.interrupt's handler in a real process). No booted node."""

from __future__ import annotations

import subprocess
import sys
import textwrap

import pytest

from pvegpu.plan.start_watch import watch_script

# systemctl show -p <P> --value: the unit's state from files beside it; journalctl: two lines
SYSTEMCTL = """#!/bin/sh
for a in "$@"; do case "$a" in ActiveState|NRestarts|SubState) p=$a;; esac; done
cat "$(dirname "$0")/$p"
"""
JOURNALCTL = """#!/bin/sh
printf 'Traceback (most recent call last):\\nModuleNotFoundError: No module named wandb\\n'
"""


def watch(tmp_path, active: str, restarts: str, seconds: int = 2):
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    for name, text in (("systemctl", SYSTEMCTL), ("journalctl", JOURNALCTL)):
        (bin_dir / name).write_text(text)
        (bin_dir / name).chmod(0o755)
    for name, value in (("ActiveState", active), ("NRestarts", restarts), ("SubState", "x")):
        (bin_dir / name).write_text(value + "\n")
    env = {"PATH": f"{bin_dir}:/usr/bin:/bin"}
    script = watch_script("train.service", seconds, 200)
    return subprocess.run(["sh", "-c", script], capture_output=True, text=True, env=env)


def test_the_watch_passes_a_unit_that_stays_active_without_restarts(tmp_path):
    done = watch(tmp_path, "active", "0")
    assert (done.returncode, done.stderr) == (0, "")


def test_the_watch_fails_a_unit_that_restarted_even_when_it_reads_active(tmp_path):
    """A trainer that dies at import and is restarted by Restart=on-failure may read active
    again at the moment the watch looks: its restart count says it did not come up."""
    done = watch(tmp_path, "active", "1")
    assert done.returncode == 1
    assert "CT 200: train.service did not come up: active (x) after 0 s, 1 automatic" in (
        done.stderr
    )
    assert "No module named wandb" in done.stderr


def test_the_watch_fails_a_unit_that_is_no_longer_active(tmp_path):
    done = watch(tmp_path, "failed", "0")
    assert done.returncode == 1 and "did not come up: failed (x)" in done.stderr


CUT_SHORT = textwrap.dedent(
    """
    import os, signal, sys, time
    from types import SimpleNamespace as NS
    from pvegpu.startup import interrupt

    class State:  # pyinfra's State: the run's context keys on it
        inventory = NS(get_group=lambda name, default: [NS(name="127.0.0.1")])

    state = State()
    interrupt.install(state)
    os.kill(os.getpid(), getattr(signal, sys.argv[1]))
    time.sleep(30)
    print("not interrupted")
    """
)


@pytest.mark.parametrize("sig,status", [("SIGINT", 130), ("SIGTERM", 143)])
def test_a_run_cut_short_exits_with_the_signals_status_and_its_line(sig, status):
    done = subprocess.run(
        [sys.executable, "-c", CUT_SHORT, sig], capture_output=True, text=True, timeout=60
    )
    assert done.returncode == status, done.stderr
    assert done.stdout.startswith(f"pvegpu: 127.0.0.1: INTERRUPTED ({sig}), not converged")

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


# nvidia-smi: the driver's version, and the compute processes listed in the file "apps"
NVIDIA_SMI = """#!/bin/sh
d=$(dirname "$0")
[ -f "$d/driver" ] || exit 9
case "$*" in
  *driver_version*) cat "$d/driver";;
  *query-compute-apps*) cat "$d/apps";;
esac
"""


def watch(tmp_path, active: str, restarts: str, seconds: int = 2, **gpu):
    """Run the watch in a real sh against stand-ins: systemctl, journalctl, nvidia-smi (``gpu``:
    ``driver``, a version or None for an nvidia-smi that fails; ``apps``, the pids it lists;
    ``cgroups``, {pid: its /proc/<pid>/cgroup text} in a stand-in /proc)."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir(parents=True)
    for name, text in (
        ("systemctl", SYSTEMCTL),
        ("journalctl", JOURNALCTL),
        ("nvidia-smi", NVIDIA_SMI),
    ):
        (bin_dir / name).write_text(text)
        (bin_dir / name).chmod(0o755)
    for name, value in (("ActiveState", active), ("NRestarts", restarts), ("SubState", "x")):
        (bin_dir / name).write_text(value + "\n")
    if gpu.get("driver", "580.95.05"):
        (bin_dir / "driver").write_text(gpu.get("driver", "580.95.05") + "\n")
    (bin_dir / "apps").write_text("".join(f"{p}\n" for p in gpu.get("apps", [4242])))
    proc = tmp_path / "proc"
    cgroups = gpu.get("cgroups", {4242: "0::/system.slice/train.service"})
    for pid, text in cgroups.items():
        (proc / str(pid)).mkdir(parents=True)
        (proc / str(pid) / "cgroup").write_text(text + "\n")
    env = {"PATH": f"{bin_dir}:/usr/bin:/bin"}
    script = watch_script("train.service", seconds, 200, gpus=gpu.get("gpus", True), proc=str(proc))
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


@pytest.mark.parametrize(
    "apps,cgroups",
    [
        ([], {}),  # no compute process at all: it hangs before its first CUDA call
        (
            [31, 4242],
            {31: "0::/system.slice/jupyter.service", 4242: "0::/system.slice/xtrain.service"},
        ),
        (["[N/A]"], {}),
    ],
    ids=["none", "others-only", "not-a-pid"],
)
def test_the_watch_fails_an_active_unit_none_of_whose_processes_is_on_a_gpu(
    tmp_path, apps, cgroups
):
    done = watch(tmp_path, "active", "0", apps=apps, cgroups=cgroups)
    assert done.returncode == 1, done.stderr
    assert (
        "CT 200: train.service did not come up: active for 2 s, but none of its processes is on "
        "a GPU (nvidia-smi lists none); its journal: " in done.stderr
    )
    assert "needs a larger training_start_watch_s" in done.stderr


def test_a_torchrun_worker_in_the_units_cgroup_counts(tmp_path):
    """The launcher makes no CUDA context; its worker, in the same cgroup, does."""
    cgroups = {77: "0::/system.slice/other.service", 4243: "0::/system.slice/train.service"}
    done = watch(tmp_path, "active", "0", apps=[77, 4243], cgroups=cgroups)
    assert (done.returncode, done.stderr) == (0, "")


def test_a_unit_with_no_gpus_or_a_driver_that_lists_no_container_pids_is_watched_by_state(tmp_path):
    """Drivers before 535.113.01 list no process in a container: the state is all it can see."""
    old = watch(tmp_path / "old", "active", "0", driver="530.30.02", apps=[], cgroups={})
    assert (old.returncode, old.stderr) == (0, "")
    cpu = watch(tmp_path / "cpu", "active", "0", gpus=False, driver=None, apps=[], cgroups={})
    assert (cpu.returncode, cpu.stderr) == (0, "")


def test_the_watch_fails_closed_when_nvidia_smi_does_not_answer(tmp_path):
    done = watch(tmp_path, "active", "0", driver=None)
    assert done.returncode == 1
    assert "did not come up: active, but nvidia-smi in the container did not answer" in done.stderr


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

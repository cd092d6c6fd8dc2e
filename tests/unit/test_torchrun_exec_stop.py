"""The torchrun unit's ExecStop, run for real by sh against a real process tree: the launcher
held (SIGSTOP), SIGTERM to its own children only (the workers), never to their DataLoader helpers
(which die by anyone's SIGTERM but their parent's and cost the checkpoint) nor to a process of
the unit that torchrun did not start, and the wait over once the workers are gone.

The unit's processes come from its cgroup v2 directory; the test gives the script one in a
private mount namespace (a tmpfs at /sys/fs/cgroup whose cgroup.procs lists the tree), so it runs
alike on a cgroup v1, hybrid or v2 machine and nothing outside the namespace sees it.

From torch 2.12 (its launcher waits TORCH_ELASTIC_SHUTDOWN_TIMEOUT, not 30 s, before it SIGKILLs
its workers) the launcher is not held: it reaps its workers as they exit and exits 0 itself."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from pvegpu.plan.unit import render_unit
from pvegpu.settings import Settings, defaults
from tests.own_processes import kill_ours

WORKER = """
import os, signal, sys, time
d = sys.argv[1]
parent = os.getpid()
helper = os.fork()
if helper == 0:  # a DataLoader worker: any SIGTERM is recorded (none may come)
    signal.signal(signal.SIGTERM, lambda *a: (open(f"{d}/helper-{os.getpid()}", "w").close(),
                                               os._exit(1)))
    while os.getppid() == parent:
        time.sleep(0.1)
    os._exit(0)
def stop(*a):  # its helper sees it gone and exits
    open(f"{d}/worker-{os.getpid()}", "w").close()
    os._exit(0)
signal.signal(signal.SIGTERM, stop)
open(f"{d}/.ready-{os.getpid()}", "w").write(f"{helper}\\n")  # whole, then renamed
os.rename(f"{d}/.ready-{os.getpid()}", f"{d}/ready-{os.getpid()}")
while True:
    time.sleep(0.1)
"""
LAUNCHER = """
import subprocess, sys, time
procs = [subprocess.Popen([sys.executable, "-c", sys.argv[2], sys.argv[1]]) for _ in range(2)]
time.sleep(600)
"""


# torch 2.12's launcher, as far as the stop sees it: it reaps each worker as it exits and exits 0
# when all did (its group SUCCEEDED); every signal it gets, SIGCONT included (so a launcher held
# and continued says so), is recorded as a file.
REAPING_LAUNCHER = """
import signal, subprocess, sys
d = sys.argv[1]
def note(sig, frame):
    open(f"{d}/launcher-{signal.Signals(sig).name}", "w").close()
for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP, signal.SIGQUIT, signal.SIGCONT):
    signal.signal(sig, note)
procs = [subprocess.Popen([sys.executable, "-c", sys.argv[2], d]) for _ in range(2)]
sys.exit(0 if [p.wait() for p in procs] == [0, 0] else 1)
"""


def exec_stop(stop_timeout_s: int, torch_version: str = "2.11.0") -> str:
    """The rendered unit's ExecStop as sh runs it (systemd's $$ and %% unescaped)."""
    data = {**defaults(), "training_launcher": "torchrun", "torch_version": torch_version}
    data["training_stop_timeout_s"] = stop_timeout_s
    text = render_unit(Settings.from_data(data)).replace("\\\n", "")
    (line,) = [x for x in text.splitlines() if x.startswith("ExecStop=")]
    script = line.removeprefix("ExecStop=/bin/sh -c '").removesuffix("'")
    return script.replace("$$", "$").replace("%%", "%")


def state(pid: int) -> str:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(") ", 1)[1][0]
    except OSError:
        return "gone"


def wait_for(done, what, timeout=30):
    deadline = time.monotonic() + timeout
    while not done():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.05)


@pytest.mark.skipif(
    os.geteuid() != 0 or not shutil.which("unshare"), reason="needs root and unshare (mounts)"
)
def test_the_stop_signals_the_launchers_children_only_and_ends_when_they_are_gone(tmp_path):
    launcher = subprocess.Popen([sys.executable, "-c", LAUNCHER, str(tmp_path), WORKER])
    stranger = subprocess.Popen(["sleep", "600"])  # in the unit, not torchrun's
    try:
        wait_for(lambda: len(list(tmp_path.glob("ready-*"))) == 2, "the workers")
        workers = sorted(int(f.name.split("-")[1]) for f in tmp_path.glob("ready-*"))
        helpers = [int(f.read_text()) for f in tmp_path.glob("ready-*")]
        procs = [launcher.pid, *workers, *helpers, stranger.pid]
        listing = "".join(f"{p}\n" for p in procs)
        mount = (
            'mount -t tmpfs none /sys/fs/cgroup && printf %s "$PROCS" > '
            '/sys/fs/cgroup/cgroup.procs && exec sh -c "$STOP"'
        )
        env = {**os.environ, "MAINPID": str(launcher.pid), "PROCS": listing}
        env["STOP"] = exec_stop(stop_timeout_s=30)
        done = subprocess.run(
            ["unshare", "--mount", "--propagation", "private", "sh", "-c", mount],
            env=env,
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert done.returncode == 0, done.stderr
        assert sorted(int(f.name.split("-")[1]) for f in tmp_path.glob("worker-*")) == workers
        assert list(tmp_path.glob("helper-*")) == []  # spared: their workers end them
        assert state(launcher.pid) == "T"  # held until systemd's SIGTERM and SIGCONT
        assert state(stranger.pid) in "SR"  # untouched (running or asleep)
        assert all(state(w) in "Zgone" for w in workers)  # zombies of the held launcher
    finally:
        for p in (launcher, stranger):
            p.send_signal(signal.SIGKILL)
            p.wait()
        kill_ours(str(tmp_path))  # workers and helpers left; never a recorded, reused pid


def test_from_torch_2_12_the_stop_never_holds_nor_signals_the_launcher(tmp_path):
    """The stop of a torch 2.12 unit, run by a real sh: SIGTERM to the workers only, never to
    their helpers, the launcher never stopped nor signalled (it reaps its workers and exits 0 on
    its own, which a held launcher cannot), and the stop over once the workers are gone. The
    cgroup filesystem is a directory of the test's (no mount: no root needed)."""
    lines = Path("/proc/self/cgroup").read_text().splitlines()
    cgroup = next((line[3:] for line in lines if line.startswith("0::")), None)
    if cgroup is None or not cgroup.startswith("/"):
        pytest.skip("no cgroup v2 path in /proc/self/cgroup")
    procs_file = tmp_path / "cg" / cgroup.lstrip("/") / "cgroup.procs"
    procs_file.parent.mkdir(parents=True)
    launcher = subprocess.Popen([sys.executable, "-c", REAPING_LAUNCHER, str(tmp_path), WORKER])
    stranger = subprocess.Popen(["sleep", "600"])
    states: list[str] = []
    done_event = threading.Event()

    def sample() -> None:  # the launcher's state while the stop runs
        while not done_event.is_set():
            states.append(state(launcher.pid))
            time.sleep(0.01)

    try:
        wait_for(lambda: len(list(tmp_path.glob("ready-*"))) == 2, "the workers")
        workers = sorted(int(f.name.split("-")[1]) for f in tmp_path.glob("ready-*"))
        helpers = [int(f.read_text()) for f in tmp_path.glob("ready-*")]
        listing = [launcher.pid, *workers, *helpers, stranger.pid]
        procs_file.write_text("".join(f"{p}\n" for p in listing))
        script = exec_stop(stop_timeout_s=30, torch_version="2.12.0")
        assert "kill -STOP" not in script
        script = script.replace("/sys/fs/cgroup", str(tmp_path / "cg"))
        sampler = threading.Thread(target=sample)
        sampler.start()
        try:
            done = subprocess.run(
                ["sh", "-c", script],
                env={**os.environ, "MAINPID": str(launcher.pid)},
                capture_output=True,
                text=True,
                timeout=60,
            )
        finally:
            done_event.set()
            sampler.join()
        assert done.returncode == 0, done.stderr
        assert sorted(int(f.name.split("-")[1]) for f in tmp_path.glob("worker-*")) == workers
        assert list(tmp_path.glob("helper-*")) == []  # spared: their workers end them
        assert all(state(w) == "gone" for w in workers)  # reaped by the running launcher
        assert launcher.wait(timeout=30) == 0  # all its workers exited 0: so does it
        assert list(tmp_path.glob("launcher-*")) == []  # no signal, no SIGCONT after a hold
        assert states and "T" not in states, states
        assert state(stranger.pid) in "SR"  # untouched
    finally:
        for p in (launcher, stranger):
            if p.poll() is None:
                p.send_signal(signal.SIGKILL)
                p.wait()
        kill_ours(str(tmp_path))  # workers and helpers left; never a recorded, reused pid

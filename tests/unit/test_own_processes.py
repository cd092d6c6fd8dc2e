"""A teardown ends only its own processes (tests/own_processes.py): the cause found for the
test_adopt flake (issue 41). Teardowns of tests/sim and tests/unit SIGKILLed pids and process
groups they had recorded (a torchrun worker's, a helper's) after those processes had exited.
CI runs every file side by side on one machine, as root, with pid_max 32768, so such a pid
may by then belong to a neighbour: here, in a private pid namespace where the reuse is made
certain (ns_last_pid), a takeover's stop run as an ssh session's command (its own session, as
sshd starts it) gets the exited worker's pid and is SIGKILLed by the old teardown while its
trainer checkpoints; kill_ours spares it."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.own_processes import kill_ours, ours

ROOT = Path(__file__).resolve().parents[2]

# Runs as PID 1 of a fresh pid namespace (argv[1]: the test's tmp path); prints one JSON line.
INNER = r"""
import json, os, signal, subprocess, sys, time
from pvegpu.facts.probe import probe_command
from tests.own_processes import kill_ours

tmp = sys.argv[1]
neighbour, node = tmp + "/neighbour", tmp + "/node"  # a tests/sim test's files, the e2e node's
os.makedirs(neighbour)
os.makedirs(node)
TRAINER = '''
import os, signal, sys, time
d = sys.argv[1]
def stop(*_):  # a checkpoint that lasts until the test opens the gate
    open(d + "/stopping", "w").close()
    while not os.path.exists(d + "/gate"):
        time.sleep(0.02)
    open(d + "/checkpoint", "w").close()
    sys.exit(0)
signal.signal(signal.SIGTERM, stop)
open(d + "/ready", "w").close()
while True:
    time.sleep(0.05)
'''

def wait_for(path):
    while not os.path.exists(path):
        time.sleep(0.02)

def start_time(pid):
    return int(open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()[19])

# the neighbour's torchrun worker: started in its own session, exited and reaped long before
# its test's teardown, which still has its pid (the worker's start file)
worker = subprocess.Popen([sys.executable, "-c", "pass", neighbour + "/worker.py"],
                          start_new_session=True)
worker.wait()
trainer = subprocess.Popen([sys.executable, "-c", TRAINER, node])
wait_for(node + "/ready")
args = {"vmid": 200, "members": [{"pid": trainer.pid, "start": start_time(trainer.pid),
        "role": "worker"}], "unit": None, "unit_uid": None, "timeout_s": 600,
        "stop_lock": node + "/stop.lock", "log": node + "/signals.jsonl", "gpus": [0],
        "command": "python train.py"}
with open("/proc/sys/kernel/ns_last_pid", "w") as f:  # the counter wrapped: the next pid is
    f.write(str(worker.pid - 1))                      # the worker's again
stop = subprocess.Popen(["sh", "-c", probe_command("training_stop", args, python=sys.executable)],
                        start_new_session=True, stdout=subprocess.DEVNULL)
wait_for(node + "/stopping")  # the stop asked the trainer; its checkpoint is under way
spared = kill_ours(neighbour) == [] and stop.poll() is None  # the new teardown
try:
    os.killpg(worker.pid, signal.SIGKILL)  # the old teardown
except ProcessLookupError:
    pass
stop_status = stop.wait()
checkpoint_then = os.path.exists(node + "/checkpoint")
open(node + "/gate", "w").close()
print(json.dumps({"reused": stop.pid == worker.pid, "spared": spared,
                  "stop_status": stop_status, "checkpoint_when_the_stop_died": checkpoint_then,
                  "trainer_status": trainer.wait()}))
"""


def test_an_argv_is_ours_only_when_it_names_the_tmp_path_or_a_path_under_it():
    assert ours(["python3", "/tmp/t0/worker.py", "--out", "/tmp/t0/out"], "/tmp/t0")
    assert ours(["python3", "-c", "pass", "/tmp/t0"], "/tmp/t0/")
    assert not ours(["sleep", "/tmp/t01/x"], "/tmp/t0")  # a later test's tmp path
    assert not ours(["sh", "-c", "cat /tmp/t0/x"], "/tmp/t0")  # a mention is not a path
    assert not ours([], "/tmp/t0")
    for broad in ("/", "/tmp", "tmp/t0", ""):  # would match (nearly) every process
        with pytest.raises(ValueError):
            kill_ours(broad)


def test_kill_ours_ends_the_tests_own_processes_and_spares_a_stranger(tmp_path):
    mine = subprocess.Popen(
        [sys.executable, "-c", "import time; time.sleep(600)", str(tmp_path / "x")],
        start_new_session=True,
    )
    stranger = subprocess.Popen(["sleep", "600"], start_new_session=True)
    try:
        assert kill_ours(str(tmp_path)) == [mine.pid]
        assert mine.wait(timeout=30) == -signal.SIGKILL
        assert stranger.poll() is None
    finally:
        for p in (mine, stranger):
            p.kill()
            p.wait()


@pytest.mark.skipif(
    os.geteuid() != 0
    or not shutil.which("unshare")
    or not Path("/proc/sys/kernel/ns_last_pid").exists(),
    reason="needs root, unshare and ns_last_pid (a private pid namespace)",
)
def test_a_pid_reused_by_a_takeovers_stop_is_killed_by_a_stale_killpg_never_by_kill_ours(
    tmp_path,
):
    script = tmp_path / "inner.py"
    script.write_text(INNER)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), str(ROOT / "src")])}
    started = time.monotonic()
    done = subprocess.run(
        ["unshare", "--pid", "--fork", "--mount-proc", sys.executable, str(script), str(tmp_path)],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, (done.stdout, done.stderr, time.monotonic() - started)
    doc = json.loads(done.stdout.strip().splitlines()[-1])
    assert doc == {
        "reused": True,  # the stop's session got the exited worker's pid
        "spared": True,  # kill_ours: not the teardown's own, never signalled
        "stop_status": -signal.SIGKILL,  # killpg of the recorded pid: the stop is killed
        "checkpoint_when_the_stop_died": False,  # mid-checkpoint, as the flake was cut
        "trainer_status": 0,  # the trainer itself finishes later, unseen by the deploy
    }, done.stderr

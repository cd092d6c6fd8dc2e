"""The takeover's stop probe (probes/training_stop.py) run for real, as the node runs it, on real
processes of this machine: a worker that checkpoints on SIGTERM, a launcher above it. What each
got, and in which order, is read from the probe's own signal log and the processes' files; no
booted node (issue 35)."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from pvegpu.facts.probe import probe_command

# A process that says it is ready, then waits; on SIGTERM it writes its checkpoint and exits.
TRAINER = textwrap.dedent(
    """
    import signal, sys, time
    out = sys.argv[1]
    def stop(*_):
        open(out + ".checkpoint", "w").write("done")
        sys.exit(0)
    signal.signal(signal.SIGTERM, stop)
    open(out + ".ready", "w").write("ready")
    while True:
        time.sleep(0.05)
    """
)


def start_time(pid: int) -> int:
    """Field 22 of /proc/<pid>/stat (proc(5): starttime), counted after the command's ")"."""
    stat = Path(f"/proc/{pid}/stat").read_text()
    return int(stat.rsplit(")", 1)[1].split()[19])


@pytest.fixture
def spawn(tmp_path):
    """Start trainer processes; every one still there is killed and reaped at the end."""
    started: list[subprocess.Popen] = []

    def start(name: str) -> tuple[subprocess.Popen, Path]:
        out = tmp_path / name
        p = subprocess.Popen([sys.executable, "-c", TRAINER, str(out)])
        started.append(p)
        ready = out.with_name(name + ".ready")
        while not ready.exists():  # the handler is installed once it says so
            assert p.poll() is None, f"{name} exited before it was ready"
            subprocess.run(["sleep", "0.02"], check=True)
        return p, out

    yield start
    for p in started:
        if p.poll() is None:
            p.kill()
        p.wait()


def run_stop(tmp_path, members, timeout_s=30, unit=None):
    """Run the stop probe; (exit status, its JSON line, the signal log as (pid, signal))."""
    log = tmp_path / "log" / "signals.jsonl"
    args = {
        "vmid": 200,
        "members": members,
        "unit": unit,
        "timeout_s": timeout_s,
        "log": str(log),
        "gpus": [0],
        "command": "python train.py",
    }
    cmd = probe_command("training_stop", args, python=sys.executable)
    done = subprocess.run(["sh", "-c", cmd], capture_output=True, text=True)
    doc = json.loads(done.stdout.strip().splitlines()[-1])
    sent = [json.loads(line) for line in log.read_text().splitlines()] if log.exists() else []
    return done.returncode, doc, [(e["pid"], e["signal"]) for e in sent]


def test_a_training_started_by_hand_is_continued_then_asked_to_stop_and_checkpoints(
    tmp_path, spawn
):
    worker, out = spawn("worker")
    members = [{"pid": worker.pid, "start": start_time(worker.pid), "role": "worker"}]
    rc, doc, sent = run_stop(tmp_path, members)
    assert worker.poll() is not None  # gone when the probe returns (never waited on forever)
    assert out.with_name("worker.checkpoint").read_text() == "done"  # SIGTERM, not SIGKILL
    assert sent == [(worker.pid, "SIGCONT"), (worker.pid, "SIGTERM")]
    assert (rc, doc["stopped"], doc["killed"], doc["remaining"]) == (0, [worker.pid], [], [])


def test_the_launcher_is_held_while_its_worker_checkpoints_and_ended_after_it(tmp_path, spawn):
    launcher, lout = spawn("launcher")
    worker, wout = spawn("worker")
    members = [
        {"pid": launcher.pid, "start": start_time(launcher.pid), "role": "launcher"},
        {"pid": worker.pid, "start": start_time(worker.pid), "role": "worker"},
    ]
    rc, doc, sent = run_stop(tmp_path, members)
    assert launcher.poll() is not None and worker.poll() is not None
    assert sent[:3] == [
        (launcher.pid, "SIGSTOP"),  # held first: it would SIGKILL or restart its workers
        (worker.pid, "SIGCONT"),
        (worker.pid, "SIGTERM"),
    ]
    assert sent[3:] == [(launcher.pid, "SIGTERM"), (launcher.pid, "SIGCONT")]
    assert wout.with_name("worker.checkpoint").exists()
    assert lout.with_name("launcher.checkpoint").exists()  # continued after its SIGTERM
    assert (rc, doc["stopped"], doc["remaining"]) == (0, [worker.pid], [])


def test_a_reused_pid_is_never_signalled(tmp_path, spawn):
    other, out = spawn("other")
    # the member as the read saw it: same pid, another start time (the pid was reused since)
    members = [{"pid": other.pid, "start": start_time(other.pid) - 1, "role": "worker"}]
    rc, doc, sent = run_stop(tmp_path, members)
    assert other.poll() is None and not out.with_name("other.checkpoint").exists()
    assert sent == [] and (rc, doc["stopped"], doc["killed"]) == (0, [], [])

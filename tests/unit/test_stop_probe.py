"""The takeover's stop probe (probes/training_stop.py) run for real, as the node runs it, on real
processes of this machine: a worker that checkpoints on SIGTERM, a launcher above it. What each
got, and in which order, is read from the probe's own signal log and the processes' files; no
booted node (issue 35)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from pvegpu.facts.probe import probe_command

# A process that says it is ready, then waits; on SIGTERM it writes its checkpoint (taking
# argv[2] seconds, default none) and exits.
TRAINER = textwrap.dedent(
    """
    import signal, sys, time
    out = sys.argv[1]
    def stop(*_):
        time.sleep(float(sys.argv[2]) if len(sys.argv) > 2 else 0)
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

    def start(name: str, checkpoint_s: float = 0) -> tuple[subprocess.Popen, Path]:
        out = tmp_path / name
        p = subprocess.Popen([sys.executable, "-c", TRAINER, str(out), str(checkpoint_s)])
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


def run_stop(tmp_path, members, timeout_s=30, unit=None, unit_uid=None, stderr=None, env=None):
    """Run the stop probe; (exit status, its JSON line, the signal log as (pid, signal))."""
    log = tmp_path / "log" / "signals.jsonl"
    args = {
        "vmid": 200,
        "members": members,
        "unit": unit,
        "unit_uid": unit_uid,
        "stop_lock": str(tmp_path / "lock" / "pvegpu-stop.lock"),
        "timeout_s": timeout_s,
        "log": str(log),
        "gpus": [0],
        "command": "python train.py",
    }
    cmd = probe_command("training_stop", args, python=sys.executable)
    done = subprocess.run(["sh", "-c", cmd], capture_output=True, text=True, env=env)
    if stderr is not None:
        stderr.append(done.stderr)
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


@pytest.fixture
def fake_pct(tmp_path, monkeypatch):
    """`pct` on PATH: logs each call's argv (and whether the worker's checkpoint was written by
    then); `systemctl show` answers from ``show`` (Transient, TimeoutStopUSec)."""
    bindir = tmp_path / "bin"
    bindir.mkdir()
    calls = tmp_path / "pct-calls.jsonl"
    (tmp_path / "show").write_text("Transient=no\nTimeoutStopUSec=1min 30s\n")
    (bindir / "pct").write_text(
        f"#!{sys.executable}\n"
        "import json, os, sys\n"
        f"d = {str(tmp_path)!r}\n"
        "done = os.path.exists(os.path.join(d, 'worker.checkpoint'))\n"
        f"open({str(calls)!r}, 'a').write(json.dumps({{'argv': sys.argv[1:], 'ckpt': done}})"
        " + '\\n')\n"
        "if 'show' in sys.argv:\n"
        "    sys.stdout.write(open(os.path.join(d, 'show')).read())\n"
        "if 'stop' in sys.argv and os.path.exists(os.path.join(d, 'stop_rc')):\n"
        "    sys.stderr.write('Failed to stop train.service: Unit train.service not loaded.\\n')\n"
        "    sys.exit(int(open(os.path.join(d, 'stop_rc')).read()))\n"
    )
    (bindir / "pct").chmod(0o755)
    monkeypatch.setenv("PATH", f"{bindir}:{os.environ['PATH']}")

    def read():
        return [json.loads(line) for line in calls.read_text().splitlines()]

    return read


def test_a_units_trainer_gets_sigterm_first_and_its_unit_is_disabled_after_the_checkpoint(
    tmp_path, spawn, fake_pct
):
    """A users' unit (KillMode=control-group, the default) would SIGTERM the trainer's
    DataLoader workers with it: the trainer alone gets SIGTERM, the unit is stopped after."""
    worker, out = spawn("worker")
    members = [{"pid": worker.pid, "start": start_time(worker.pid), "role": "worker"}]
    rc, doc, sent = run_stop(tmp_path, members, unit="train.service")
    assert sent == [(worker.pid, "SIGCONT"), (worker.pid, "SIGTERM")]
    assert out.with_name("worker.checkpoint").read_text() == "done"
    calls = fake_pct()
    assert [c["argv"][3:] for c in calls] == [
        ["systemctl", "show", "-p", "Transient", "-p", "TimeoutStopUSec", "train.service"],
        ["systemctl", "disable", "--now", "train.service"],
    ]
    assert calls[-1]["ckpt"] and (rc, doc["unit_rc"]) == (0, 0)


def test_a_transient_unit_is_stopped_and_a_user_units_manager_is_the_users(
    tmp_path, spawn, fake_pct
):
    """`systemd-run --unit=train` has no unit file to disable; `systemctl --user` units live in
    their user's manager (user@<uid>.service)."""
    (tmp_path / "show").write_text("Transient=yes\nTimeoutStopUSec=1min 30s\n")
    worker, out = spawn("worker")
    members = [{"pid": worker.pid, "start": start_time(worker.pid), "role": "worker"}]
    rc, _doc, _sent = run_stop(tmp_path, members, unit="train.service", unit_uid=1000)
    calls = [c["argv"] for c in fake_pct()]
    assert rc == 0 and out.with_name("worker.checkpoint").exists()
    assert calls[-1][:3] == ["exec", "200", "--"] and calls[-1][-2:] == ["stop", "train.service"]
    script = calls[-1][5]
    assert "getent passwd 1000" in script and "XDG_RUNTIME_DIR=/run/user/1000" in script
    assert "systemctl --user" in script and calls[0][-6] == "show"


def test_a_transient_unit_gone_with_its_trainer_is_stopped(tmp_path, spawn, fake_pct):
    """A transient unit is unloaded once its main process exits: `systemctl stop` then answers
    "Unit ... not loaded." (exit 5), which is what was wanted."""
    (tmp_path / "show").write_text("Transient=yes\nTimeoutStopUSec=1min 30s\n")
    (tmp_path / "stop_rc").write_text("5")
    worker, out = spawn("worker")
    members = [{"pid": worker.pid, "start": start_time(worker.pid), "role": "worker"}]
    rc, doc, _sent = run_stop(tmp_path, members, unit="train.service")
    assert (rc, doc["unit_rc"]) == (0, 0) and out.with_name("worker.checkpoint").exists()
    (tmp_path / "stop_rc").write_text("1")  # another failure of the stop still counts
    worker, out = spawn("worker2")
    members = [{"pid": worker.pid, "start": start_time(worker.pid), "role": "worker"}]
    err: list[str] = []
    assert run_stop(tmp_path, members, unit="train.service", stderr=err)[0] == 1
    # its processes are gone: the line says what is true, never "did not stop"
    assert "did not stop" not in err[0] and "stopped, but its unit train.service" in err[0]


def test_a_unit_whose_own_stop_timeout_is_longer_gives_the_trainer_that_long(
    tmp_path, spawn, fake_pct
):
    (tmp_path / "show").write_text("Transient=no\nTimeoutStopUSec=20s\n")
    worker, out = spawn("worker", checkpoint_s=3)
    members = [{"pid": worker.pid, "start": start_time(worker.pid), "role": "worker"}]
    rc, doc, _sent = run_stop(tmp_path, members, timeout_s=1, unit="train.service")
    # training_stop_timeout_s (1 s) alone would have cut the 3 s checkpoint short
    assert out.with_name("worker.checkpoint").read_text() == "done"
    assert (rc, doc["killed"]) == (0, [])


def proc_state(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(") ", 1)[1][0]
    except OSError:
        return "gone"


def test_a_launcher_held_by_a_stop_process_that_is_killed_is_continued(tmp_path, spawn):
    """An admin or the OOM killer ends the stop process while the workers checkpoint: its
    watchdog (its own session) continues the launcher it held, so nothing stays stopped."""
    launcher, _lout = spawn("launcher")
    worker = subprocess.Popen(
        [
            sys.executable,
            "-c",
            "import signal, time\nsignal.signal(signal.SIGTERM, lambda *a: None)"
            "\nopen(__import__('sys').argv[1], 'w')\nwhile True: time.sleep(0.05)",
            str(tmp_path / "worker.ready"),
        ]
    )
    try:
        while not (tmp_path / "worker.ready").exists():
            subprocess.run(["sleep", "0.02"], check=True)
        members = [
            {"pid": launcher.pid, "start": start_time(launcher.pid), "role": "launcher"},
            {"pid": worker.pid, "start": start_time(worker.pid), "role": "worker"},
        ]
        args = {
            "vmid": 200,
            "members": members,
            "unit": None,
            "unit_uid": None,
            "timeout_s": 600,
            "stop_lock": str(tmp_path / "pvegpu-stop.lock"),
            "log": str(tmp_path / "log.jsonl"),
            "gpus": [0],
            "command": "torchrun t.py",
        }
        cmd = probe_command("training_stop", args, python=sys.executable)
        probe = subprocess.Popen(["sh", "-c", cmd], start_new_session=True)
        for _ in range(500):  # held, and the worker asked to stop (it never does here)
            if proc_state(launcher.pid) == "T" and (tmp_path / "log.jsonl").exists():
                break
            subprocess.run(["sleep", "0.02"], check=True)
        assert proc_state(launcher.pid) == "T"
        os.killpg(probe.pid, 9)
        probe.wait()
        for _ in range(500):
            if proc_state(launcher.pid) != "T":
                break
            subprocess.run(["sleep", "0.02"], check=True)
        assert proc_state(launcher.pid) in "SR", proc_state(launcher.pid)
    finally:
        worker.kill()
        worker.wait()

"""The stop probe (probes/training_stop.py) against what it meets on a node, run for real: a
training paused with ctrl-Z whose helpers are stopped too, and a unit stopped and disabled
through a `pct` that parses its options as pct does (issue 41). No booted node."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap

from pvegpu.facts.probe import probe_command
from tests.own_processes import kill_ours
from tests.unit.test_stop_probe import run_stop, spawn, start_time

__all__ = ["spawn"]  # the fixture, used by name


# A worker with a helper of its own (a DataLoader worker): on SIGTERM the worker asks its helper
# to finish and waits for it, as torch's DataLoader does when it shuts down, then checkpoints.
WITH_HELPER = textwrap.dedent(
    """
    import os, signal, subprocess, sys, time
    out, role = sys.argv[1], sys.argv[2]
    if role == "helper":
        def done(*_):
            open(out + ".helper-done", "w").write("done")
            sys.exit(0)
        signal.signal(signal.SIGTERM, done)
        open(out + ".helper-ready", "w").write("ready")
        while True:
            time.sleep(0.05)
    helper = subprocess.Popen([sys.executable, sys.argv[0], out, "helper"])
    while not os.path.exists(out + ".helper-ready"):
        time.sleep(0.02)
    def stop(*_):
        helper.terminate()
        helper.wait()
        open(out + ".checkpoint", "w").write("done")
        sys.exit(0)
    signal.signal(signal.SIGTERM, stop)
    open(out + ".ready", "w").write(str(helper.pid))
    while True:
        time.sleep(0.05)
    """
)


def test_a_training_paused_with_ctrl_z_gets_its_helpers_continued_too(tmp_path):
    """ctrl-Z stops the whole job, helpers included: a helper left stopped never finishes, the
    worker waits on it past the timeout and is SIGKILLed without its checkpoint."""
    script, out = tmp_path / "trainer.py", tmp_path / "worker"
    script.write_text(WITH_HELPER)
    worker = subprocess.Popen([sys.executable, str(script), str(out), "worker"])
    helper = None
    try:
        ready = out.with_name("worker.ready")
        while not ready.exists() or not ready.read_text():
            assert worker.poll() is None, "the worker exited before it was ready"
            subprocess.run(["sleep", "0.02"], check=True)
        helper = int(ready.read_text())
        for pid in (worker.pid, helper):  # the terminal's SIGTSTP reaches the whole job
            os.kill(pid, signal.SIGSTOP)
        members = [
            {"pid": worker.pid, "start": start_time(worker.pid), "role": "worker"},
            {"pid": helper, "start": start_time(helper), "role": "helper"},
        ]
        rc, doc, sent = run_stop(tmp_path, members, timeout_s=10)
        assert out.with_name("worker.helper-done").read_text() == "done"
        assert out.with_name("worker.checkpoint").read_text() == "done"  # not SIGKILLed
        assert (helper, "SIGCONT") in sent and (helper, "SIGTERM") not in sent  # its parent's
        assert (rc, doc["stopped"], doc["killed"], doc["remaining"]) == (0, [worker.pid], [], [])
    finally:
        kill_ours(str(tmp_path))  # the helper too; never its recorded pid, reused by now maybe
        worker.wait()


# pct as pve-common parses its arguments (PVE::JSONSchema::get_options, Getopt::Long): before
# `--` every -x/--x is one of pct's own options, so `systemctl disable --now` needs the `--`.
FAKE_PCT = """#!{python}
import os, sys
args = sys.argv[1:]
assert args[:1] == ["exec"], args
rest = args[2:]
cut = rest.index("--") if "--" in rest else len(rest)
for a in rest[:cut]:
    if a.startswith("-"):
        sys.exit("Unknown option: " + a.lstrip("-") + "\\n400 unable to parse option")
os.execvp(rest[cut + 1], rest[cut + 1:])
"""
# systemd inside the container: `show` answers for a plain unit; `disable [--now] <unit>`
# disables it; `--now` or `stop` sends SIGTERM to what is left of the unit (its pids listed in
# <unit>.pids beside this file) and returns once they are gone, as systemctl waits for its job.
FAKE_SYSTEMCTL = """#!{python}
import os, signal, sys, time
here = os.path.dirname(os.path.abspath(__file__))
verb, *rest = sys.argv[1:]
unit = rest[-1]
if verb == "show":
    sys.exit(print("Transient=no\\nTimeoutStopUSec=1min 30s"))
if verb == "disable":
    open(os.path.join(here, unit + ".disabled"), "w").close()
if verb != "stop" and "--now" not in rest:
    sys.exit(0)
open(os.path.join(here, unit + ".stopped"), "w").close()
def running(p):
    try:
        return open(f"/proc/{{p}}/stat").read().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False
pids = [int(p) for p in open(os.path.join(here, unit + ".pids")).read().split()]
for p in pids:
    if running(p):
        os.kill(p, signal.SIGTERM)
while any(running(p) for p in pids):
    time.sleep(0.05)
"""


def test_a_unit_that_is_the_training_is_stopped_and_disabled_by_its_systemd_in_the_container(
    tmp_path, spawn
):
    """The unit's own stop (`pct exec <vmid> -- systemctl disable --now <unit>`) through a pct
    that parses its options as pct does: once the trainer checkpointed, the unit is stopped and
    disabled (no second trainer at the next boot), nothing is SIGKILLed, the stop succeeds."""
    worker, out = spawn("worker")
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    for name, text in (("pct", FAKE_PCT), ("systemctl", FAKE_SYSTEMCTL)):
        (bin_dir / name).write_text(text.format(python=sys.executable))
        (bin_dir / name).chmod(0o755)
    (bin_dir / "train.service.pids").write_text(str(worker.pid))
    env = dict(os.environ, PATH=f"{bin_dir}:{os.environ['PATH']}")
    members = [{"pid": worker.pid, "start": start_time(worker.pid), "role": "worker"}]
    rc, doc, _ = run_stop(tmp_path, members, unit="train.service", env=env)
    assert out.with_name("worker.checkpoint").read_text() == "done"  # SIGTERM, not SIGKILL
    assert (bin_dir / "train.service.stopped").exists()
    assert (bin_dir / "train.service.disabled").exists()
    assert (rc, doc["unit_rc"], doc["killed"], doc["remaining"]) == (0, 0, [], [])


def test_the_stop_goes_on_when_the_deploys_connection_hangs_up(tmp_path, spawn):
    """The deploy's SSH session ends (Ctrl-C, a lost connection) while a worker checkpoints: its
    SIGHUP reaches the stop's whole process group, and the stop still ends its work and says
    so (a stop that died with it would leave the unit running and launchers held)."""
    worker, out = spawn("worker", checkpoint_s=2)
    log = tmp_path / "log" / "signals.jsonl"
    args = {
        "vmid": 200,
        "members": [{"pid": worker.pid, "start": start_time(worker.pid), "role": "worker"}],
        "unit": None,
        "unit_uid": None,
        "stop_lock": str(tmp_path / "lock" / "pvegpu-stop.lock"),
        "timeout_s": 30,
        "log": str(log),
        "gpus": [0],
        "command": "python train.py",
    }
    cmd = probe_command("training_stop", args, python=sys.executable)
    stop = subprocess.Popen(
        ["sh", "-c", cmd], stdout=subprocess.PIPE, text=True, start_new_session=True
    )
    try:
        while not (log.exists() and "SIGTERM" in log.read_text()):
            assert stop.poll() is None, "the stop ended before it signalled the worker"
            subprocess.run(["sleep", "0.05"], check=True)
        os.killpg(stop.pid, signal.SIGHUP)  # what the end of the ssh session sends
        printed, _ = stop.communicate(timeout=60)
    finally:
        if stop.poll() is None:
            os.killpg(stop.pid, signal.SIGKILL)
            stop.wait()
    assert out.with_name("worker.checkpoint").read_text() == "done"
    doc = json.loads(printed.strip().splitlines()[-1])  # the stop's own last line
    assert (doc["stopped"], doc["killed"], doc["remaining"]) == ([worker.pid], [], [])


def test_a_unit_file_that_systemctl_says_is_not_loaded_fails_the_stop(tmp_path, spawn):
    """`systemctl disable --now` exiting 5 (not loaded) is "stopped" only for a transient unit,
    which goes when its trainer exits; a unit with a file that cannot be reached is never taken
    as stopped and disabled (it would start a second trainer at the next boot)."""
    worker, _ = spawn("worker")
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    not_loaded = (
        f"#!{sys.executable}\nimport sys\n"
        "if sys.argv[1] == 'show':\n    sys.exit(print('Transient=no\\nTimeoutStopUSec=1s'))\n"
        "print('Unit train.service not loaded.', file=sys.stderr)\nsys.exit(5)\n"
    )
    (bin_dir / "pct").write_text(FAKE_PCT.format(python=sys.executable))
    (bin_dir / "systemctl").write_text(not_loaded)
    for tool in ("pct", "systemctl"):
        (bin_dir / tool).chmod(0o755)
    env = dict(os.environ, PATH=f"{bin_dir}:{os.environ['PATH']}")
    members = [{"pid": worker.pid, "start": start_time(worker.pid), "role": "worker"}]
    rc, doc, _ = run_stop(tmp_path, members, unit="train.service", env=env)
    assert doc["unit_rc"] == 5 and doc["unit_error"] == ["Unit train.service not loaded."]
    assert rc != 0

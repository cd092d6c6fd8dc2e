"""The takeover (operations/takeover.py, plan/takeover.py) without a booted node: the operation's
body with the container's read, the trainings and the verdict given, and the roles and stop
arguments from a process list (issue 35)."""

from __future__ import annotations

import os
import subprocess
from types import SimpleNamespace

import pytest

from pvegpu.operations import takeover
from pvegpu.plan.running_training import GPU_PROCESS, HAND, Trainer
from pvegpu.plan.takeover import roles, stop_args
from tests.unit.test_running_training import UNIT, settings_with

OURS = Trainer(None, UNIT, UNIT, ours=True, unit=UNIT)
HAND_RUN = Trainer(4242, "python /data/dflash/train.py", HAND, pgid=4242, members=(4242,))
CRON = {"file": "/var/spool/cron/crontabs/root", "line": "@reboot cd /data/dflash && torchrun t.py"}
USERS_UNIT = {
    "id": "users-train.service",
    "file_state": "enabled",
    "active": "inactive",
    "exec": [["/root/venv/bin/python", "/data/dflash/train.py"]],
    "wd": None,
}


@pytest.fixture
def run(monkeypatch):
    """Run the operation's body for CT 200 with ``trainers`` running, the container's ``live``
    view and the build's verdict; (the commands as text, the lines it printed)."""
    printed: list[str] = []

    def body(trainers, live=None, verified=True, restart=True):
        host = SimpleNamespace(
            name="pve1",
            state=SimpleNamespace(is_executing=True),
            log_styled=lambda line, **k: printed.append(line),
        )
        ct = {"exists": True, "status": "running", "processes": [], "live": live or {}}
        monkeypatch.setattr(takeover, "host", host)
        monkeypatch.setattr(takeover, "running_here", lambda h, vmid, unit, fresh=False: trainers)
        monkeypatch.setattr(takeover, "current_read", lambda *a, **k: {"containers": {"200": ct}})
        monkeypatch.setattr(takeover, "verified_here", lambda state, node, vmid: verified)
        context = SimpleNamespace(taken_over={}, takeover_ran=set())
        monkeypatch.setattr(takeover, "run_context", lambda state: context)
        monkeypatch.setattr(takeover, "failure", lambda *lines: iter(["fail: " + " ".join(lines)]))
        s = settings_with(restart_training=restart)
        commands = [str(c) for c in takeover.training_taken_over._inner(vmid=200, settings=s)]
        return commands, printed

    return body


def test_pvegpus_own_unit_is_never_taken_over(run):
    commands, _ = run([OURS])
    assert commands == []


def test_a_training_is_stopped_only_once_the_new_build_is_verified(run):
    commands, printed = run([HAND_RUN], verified=False)
    assert commands == []
    assert "no takeover: its new build was not verified" in printed[0]
    commands, _ = run([HAND_RUN], verified=True)
    assert any("training_stop" in c or "python3 -c" in c for c in commands), commands


def test_without_consent_nothing_is_taken_over(run):
    assert run([HAND_RUN], restart=False)[0] == []


def test_a_gpu_process_that_is_no_training_is_refused_not_stopped(run):
    jupyter = Trainer(7, "jupyter", HAND, kind=GPU_PROCESS)
    commands, _ = run([jupyter])
    assert len(commands) == 1 and commands[0].startswith("fail: CT 200: no takeover: a GPU")


def test_what_would_start_a_second_trainer_at_boot_is_disabled(run):
    live = {"units": [USERS_UNIT], "crons": [CRON]}
    commands, _ = run([], live=live)
    script = next(c for c in commands if c.startswith("pct exec 200 -- sh -c"))
    assert "systemctl disable --now users-train.service" in script
    assert "/var/spool/cron/crontabs/root" in script


def test_a_unit_that_is_the_training_is_disabled_with_its_stop_not_twice(run):
    mine = Trainer(None, "python train.py", USERS_UNIT["id"], unit=USERS_UNIT["id"])
    commands, _ = run([mine], live={"units": [USERS_UNIT], "crons": []})
    assert not any(c.startswith("pct exec 200 -- sh -c") for c in commands), commands


def test_the_reboot_line_is_commented_out_by_a_real_shell_and_the_rest_of_the_file_kept(
    run, tmp_path
):
    """The command as the takeover yields it, run by sh with a pct that runs what follows `--`
    here: the line (shell words, quotes and all) reaches the edit whole, never the shell."""
    tab = tmp_path / "root"
    line = "@reboot cd /data/dflash && torchrun t.py --tag 'a b' >> \"$HOME/t.log\" 2>&1"
    rest = ["# m h dom mon dow command", "  @reboot /usr/local/bin/backup.sh", "0 3 * * * true"]
    tab.write_text("\n".join([rest[0], line, *rest[1:]]) + "\n")
    commands, _ = run([], live={"units": [], "crons": [{"file": str(tab), "line": line}]})
    command = next(c for c in commands if c.startswith("pct exec 200 -- sh -c"))
    pct = tmp_path / "bin" / "pct"
    pct.parent.mkdir()
    pct.write_text('#!/bin/sh\n[ "$1 $2 $3" = "exec 200 --" ] || exit 2\nshift 3\nexec "$@"\n')
    pct.chmod(0o755)
    env = dict(os.environ, PATH=f"{pct.parent}:{os.environ['PATH']}", HOME=str(tmp_path))
    done = subprocess.run(["sh", "-c", command], env=env, capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    disabled = f"# disabled by pvegpu (it would start a second trainer at boot): {line}"
    assert tab.read_text() == "\n".join([rest[0], disabled, *rest[1:]]) + "\n"
    assert not (tmp_path / "t.log").exists()  # nothing of the line ran


# --- the plan: roles and the stop probe's arguments ---------------------------------------------

TORCHRUN = ["/root/venv/bin/python", "/root/venv/bin/torchrun", "--nproc_per_node=1", "t.py"]


def test_a_worker_that_holds_a_gpu_is_a_worker_whatever_it_runs():
    procs = [
        {"pid": 2, "ppid": 1, "argv": TORCHRUN, "start": 5, "cwd": "/d"},
        # a worker that re-exec'd itself: no script on its command line, a GPU held
        {"pid": 3, "ppid": 2, "argv": ["python", "-c", "from t import main"], "start": 6},
    ]
    t = Trainer(2, "torchrun t.py", HAND, members=(2, 3), gpus=(0,))
    args = stop_args(200, t, procs, {3: (0,)}, "/d/t.py", 900, "/var/log/x.log")
    assert [(m["pid"], m["role"], m["start"]) for m in args["members"]] == [
        (2, "launcher", 5),
        (3, "worker", 6),
    ]
    assert (args["unit"], args["timeout_s"], args["gpus"]) == (None, 900, [0])


def test_a_member_gone_since_the_read_is_left_out():
    procs = [{"pid": 3, "ppid": 1, "argv": ["python", "/d/t.py"], "start": 6}]
    assert roles((2, 3), procs, {}, "/d/t.py") == [{"pid": 3, "start": 6, "role": "worker"}]


def test_a_parent_that_forked_its_gpu_worker_is_held_as_its_launcher():
    # multiprocessing's fork: the parent holds no GPU and has its worker's very argv
    argv = ["python", "-c", "import t; t.main()"]
    procs = [
        {"pid": 2, "ppid": 1, "argv": argv, "start": 5},
        {"pid": 3, "ppid": 2, "argv": argv, "start": 6},
    ]
    found = [(m["pid"], m["role"]) for m in roles((2, 3), procs, {3: (0,)}, "/d/t.py")]
    assert found == [(2, "launcher"), (3, "worker")]

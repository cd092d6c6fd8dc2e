"""The training unit under real systemd: the simulated containers boot the Debian tree's own
systemd (SimNode(ct_init="systemd"), systemd-nspawn), so the deployed unit really runs, is really
stopped and restarted, and systemd itself applies TimeoutStopSec, Restart= and the start limit.

The trainer here is a stand-in seeded on the node's data dir: it takes a CUDA context on each GPU
it is given, records each start (its pid, the python it runs with, the GPUs the torch double
sees), writes a checkpoint when SIGTERM arrives,
and misbehaves on request (a `mode` file in the checkpoint dir): `crash` exits 3 at once,
`stubborn-child` also starts a child that ignores SIGTERM (and records one if it gets it),
`hold-on-term` checkpoints only once a `release` file appears (a stop that is in progress for as
long as the test wants), `cpu-only` never makes a CUDA context (a trainer stuck before its first
CUDA call, or one given no GPU).
"""

from __future__ import annotations

import json
import time

import pytest

from pvegpu.plan.unit import digest
from sim.fixtures import skip_without_real_systemd

UNIT = "dflash-train.service"
RECORD = "/run/pvegpu-dflash-train/started"
CKPT_NODE = "/tank/dflash/checkpoints"  # /data/checkpoints in CT 200
TRAIN_NODE = "/tank/dflash/dflash/train.py"

TRAINER = '''\
"""Stand-in trainer for the real-systemd tests (see tests/e2e/test_training_systemd.py)."""
import os
import signal
import sys
import time

import torch

ckpt = sys.argv[sys.argv.index("--checkpoint-dir") + 1]
os.makedirs(ckpt, exist_ok=True)
pid = os.getpid()
try:
    mode = open(os.path.join(ckpt, "mode")).read().strip()
except OSError:
    mode = "run"
if os.environ.get("CUDA_VISIBLE_DEVICES") and mode != "cpu-only":  # a context on each GPU
    torch._sim.register_own_contexts()  # listed by nvidia-smi as a real trainer's are
    for i in range(torch.cuda.device_count()):
        torch.cuda.mem_get_info(i)
with open(os.path.join(ckpt, f"started-{pid}"), "w") as f:
    f.write(f"{torch.cuda.device_count()}\\n")
if mode == "crash":
    sys.exit(3)
if mode == "stubborn-child" and os.fork() == 0:  # records a SIGTERM, then ignores it
    signal.signal(signal.SIGTERM, lambda *a: open(os.path.join(ckpt, "child-got-sigterm"), "w"))
    open(os.path.join(ckpt, f"child-{os.getpid()}"), "w").close()
    while True:
        time.sleep(1)


def checkpoint(signum, frame):
    if mode == "hold-on-term":  # a long checkpoint: done when the test says so
        open(os.path.join(ckpt, f"stopping-{pid}"), "w").close()
        while not os.path.exists(os.path.join(ckpt, "release")):
            time.sleep(0.1)
    with open(os.path.join(ckpt, f"checkpoint-{pid}"), "w") as f:
        f.write("saved on SIGTERM\\n")
    sys.exit(0)


signal.signal(signal.SIGTERM, checkpoint)
while True:
    time.sleep(1)
'''


@pytest.fixture
def node_options(request):
    """Real-systemd containers; a test may add node options (indirect parametrization)."""
    skip_without_real_systemd()
    return {"ct_init": "systemd", **getattr(request, "param", {})}


@pytest.fixture
def trainer_site(site):
    """A site whose training script is the stand-in trainer above."""
    site.node.run(["sh", "-c", f"cat > {TRAIN_NODE}"], input=TRAINER, check=True)
    if site.node.cfg["pve_version"].startswith("9."):
        # Debian 13's Python (as tests/e2e/test_lifecycle.py's PVE 9 run names it)
        site.base_data += ["--data", "python_version=3.13"]
    return site


def show(site, *props):
    """systemctl show -p A,B of the training unit, as a dict."""
    out = site.ct("systemctl", "show", "-p", ",".join(props), UNIT).stdout
    return dict(line.split("=", 1) for line in out.splitlines() if "=" in line)


def ckpt_files(site, prefix):
    out = site.node.run(["sh", "-c", f"cd {CKPT_NODE} && ls {prefix}-* 2>/dev/null"]).stdout
    return sorted(out.split())


def wait_for(what, fetch, done=bool, timeout=120):
    """Poll fetch() until done(value) (a bound on waiting, never an assertion on time)."""
    deadline = time.monotonic() + timeout
    while True:
        value = fetch()
        if done(value):
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what} (last: {value!r})")
        time.sleep(0.2)


def main_argv(site, pid):
    return site.ct("cat", f"/proc/{pid}/cmdline").stdout.split("\0")[:-1]


def test_container_boots_real_systemd_and_stops_clean(site):
    node = site.node
    tpl = node.cfg["template_name"]
    assert (
        node.run(
            ["pct", "create", "200", f"local:vztmpl/{tpl}", "--rootfs", "local-lvm:4"]
        ).returncode
        == 0
    )
    assert node.run(["pct", "start", "200"]).returncode == 0
    comm = node.run(["pct", "exec", "200", "--", "cat", "/proc/1/comm"])
    assert (comm.returncode, comm.stdout) == (0, "systemd\n")
    # no systemctl double: the tree's own, talking to the container's systemd
    state = node.run(["pct", "exec", "200", "--", "systemctl", "is-system-running", "--wait"])
    assert state.stdout.strip() in ("running", "degraded"), state.stdout + state.stderr
    assert (
        node.run(
            ["pct", "exec", "200", "--", "test", "-e", "/var/lib/pve-sim-systemd/calls.log"]
        ).returncode
        == 1
    )
    # pct semantics: exit codes, signals, missing commands
    assert node.run(["pct", "exec", "200", "--", "sh", "-c", "exit 7"]).returncode == 7
    assert node.run(["pct", "exec", "200", "--", "sh", "-c", "kill -9 $$"]).returncode == 137
    assert node.run(["pct", "exec", "200", "--", "no-such-command"]).returncode == 127
    assert node.run(["pct", "shutdown", "200"]).returncode == 0
    assert node.run(["pct", "status", "200"]).stdout == "status: stopped\n"
    # nothing left: no container cgroup, no rootfs mount, no nspawn
    left = node.run(
        [
            "sh",
            "-c",
            "ls -d /sys/fs/cgroup/*/lxc/200 /sys/fs/cgroup/lxc/200 "
            "2>/dev/null; grep ' /var/lib/pve-sim/ct/200/' /proc/self/mountinfo;"
            " ls /run/pve-sim/ct/200 2>/dev/null; pgrep -x systemd-nspawn",
        ]
    )
    assert left.stdout == "", left.stdout


# PVE 8 containers boot Debian 12 (systemd 252), PVE 9 ones Debian 13 (systemd 257)
@pytest.mark.parametrize(
    "node_options", [{"profile": "pve8"}, {"profile": "pve9"}], indirect=True, ids=["pve8", "pve9"]
)
def test_training_unit_runs_under_real_systemd(trainer_site):
    site = trainer_site
    node = site.node

    first = site.deploy()
    assert first.rc == 0, first.output[-4000:]
    assert site.ct("cat", "/proc/1/comm").stdout == "systemd\n"
    unit = show(site, "ActiveState", "SubState", "MainPID", "InvocationID")
    assert (unit["ActiveState"], unit["SubState"]) == ("active", "running"), unit
    pid = unit["MainPID"]
    # MainPID is train.py run by the python of the pinned build /root/venv pointed at
    argv = main_argv(site, pid)
    build = site.ct("readlink", "-f", "/root/venv").stdout.strip()
    assert argv[0] == f"{build}/bin/python" and argv[1] == "/data/dflash/train.py", argv
    assert build.startswith("/root/venvs/torch-2.11.0-cu130"), build
    # the start record ExecStartPre wrote, for this unit file and build
    record = site.ct("cat", RECORD).stdout.splitlines()
    unit_text = site.ct("cat", f"/etc/systemd/system/{UNIT}").stdout
    assert record[0].split()[1] == digest(unit_text), record
    assert record[1] == f"venv {site.ct('readlink', '/root/venv').stdout.strip()}", record
    # the torch double in the unit sees the container's passed-through GPUs
    started = wait_for("the trainer's start file", lambda: ckpt_files(site, "started"))
    assert node.read(f"{CKPT_NODE}/{started[0]}").strip() == "8"

    # A second deploy: no changes, the same run (same InvocationID and MainPID).
    second = site.deploy()
    assert second.rc == 0 and second.changed == 0, second.output[-4000:]
    again = show(site, "ActiveState", "MainPID", "InvocationID")
    assert again == {"ActiveState": "active", "MainPID": pid, "InvocationID": unit["InvocationID"]}

    # A changed unit without consent: keeps running, restart pending.
    pending = site.deploy("training_stop_timeout_s=600")
    assert pending.rc == 0, pending.output[-4000:]
    assert "restart pending" in pending.output
    assert show(site, "InvocationID")["InvocationID"] == unit["InvocationID"]

    # With restart_training=true: systemd stops the run (the trainer checkpoints on SIGTERM) and
    # starts a new one (a new InvocationID) with a new start record.
    restart = site.deploy("training_stop_timeout_s=600", "restart_training=true")
    assert restart.rc == 0, restart.output[-4000:]
    new = show(site, "ActiveState", "MainPID", "InvocationID")
    assert new["ActiveState"] == "active" and new["InvocationID"] != unit["InvocationID"], new
    assert new["MainPID"] != pid
    assert ckpt_files(site, "checkpoint") == [f"checkpoint-{pid}"]
    assert node.read(f"{CKPT_NODE}/checkpoint-{pid}") == "saved on SIGTERM\n"
    unit_text = site.ct("cat", f"/etc/systemd/system/{UNIT}").stdout
    assert "TimeoutStopSec=600s" in unit_text
    assert site.ct("cat", RECORD).stdout.splitlines()[0].split()[1] == digest(unit_text)

    # Stopping the unit: SIGTERM, checkpoint, RuntimeDirectory (and the start record) removed.
    assert site.ct("systemctl", "stop", UNIT).returncode == 0
    assert f"checkpoint-{new['MainPID']}" in ckpt_files(site, "checkpoint")
    assert site.ct("test", "-e", RECORD).returncode == 1
    assert show(site, "ActiveState", "Result") == {"ActiveState": "inactive", "Result": "success"}


def test_only_the_trainer_gets_sigterm_and_what_is_left_is_killed_once_it_is_gone(trainer_site):
    site = trainer_site
    node = site.node
    node.run(
        ["sh", "-c", f"mkdir -p {CKPT_NODE} && echo stubborn-child > {CKPT_NODE}/mode"], check=True
    )
    timeout_s = 2
    first = site.deploy(f"training_stop_timeout_s={timeout_s}")
    assert first.rc == 0, first.output[-4000:]
    child = wait_for("the stubborn child", lambda: ckpt_files(site, "child"))[0].split("-")[1]
    main = show(site, "MainPID")["MainPID"]

    # KillMode=mixed: SIGTERM to the main process only (a DataLoader worker dies by anyone's
    # SIGTERM but its parent's and costs the checkpoint); the main process checkpoints and
    # exits, and systemd then SIGKILLs what is left at once (final-sigterm signals no one in
    # mixed mode): the stop ends within one TimeoutStopSec, with success.
    stop = site.ct("systemctl", "stop", UNIT)
    assert stop.returncode == 0, stop.stderr
    assert ckpt_files(site, "checkpoint") == [f"checkpoint-{main}"]
    assert ckpt_files(site, "child") == [f"child-{child}"]  # no child-got-sigterm
    assert site.ct("test", "-d", f"/proc/{child}").returncode == 1
    assert show(site, "ActiveState", "Result") == {"ActiveState": "inactive", "Result": "success"}
    log = site.ct("journalctl", "-u", UNIT, "-o", "cat", "--no-pager").stdout
    assert "timed out" not in log, log
    # systemd's own timestamps (microseconds): the main process exited within TimeoutStopSec,
    # and the unit was down right after it, not a whole TimeoutStopSec later
    t = {
        k: int(v)
        for k, v in show(
            site,
            "ActiveExitTimestampMonotonic",
            "ExecMainExitTimestampMonotonic",
            "InactiveEnterTimestampMonotonic",
        ).items()
    }
    stop_sigterm = t["ExecMainExitTimestampMonotonic"] - t["ActiveExitTimestampMonotonic"]
    after_main = t["InactiveEnterTimestampMonotonic"] - t["ExecMainExitTimestampMonotonic"]
    assert 0 <= stop_sigterm <= timeout_s * 1_000_000, t
    assert 0 <= after_main < timeout_s * 1_000_000, t


def test_a_trainer_that_never_takes_its_gpus_fails_the_watch(trainer_site):
    """The unit stays active with no restart, but no process of it appears on a GPU during
    training_start_watch_s: the run fails with the watch's line, not "converged"."""
    site = trainer_site
    site.node.run(["sh", "-c", f"mkdir -p {CKPT_NODE} && echo cpu-only > {CKPT_NODE}/mode"])
    run = site.deploy()
    assert run.rc != 0, run.output[-4000:]
    assert (
        f"CT 200: {UNIT} did not come up: active for 5 s, but none of its processes is on a GPU"
        in run.output
    ), run.output[-4000:]
    assert "converged" not in run.output.strip().splitlines()[-1]
    assert show(site, "ActiveState")["ActiveState"] == "active"  # the watch stops nothing
    site.node.run(["rm", "-f", f"{CKPT_NODE}/mode"], check=True)


def test_crash_restarts_then_start_limit_back_off(trainer_site):
    site = trainer_site
    node = site.node
    node.run(["sh", "-c", f"mkdir -p {CKPT_NODE} && echo crash > {CKPT_NODE}/mode"], check=True)
    burst = 3
    crashing = site.deploy("training_restart_delay_s=1", f"training_restart_burst={burst}")
    # Restart=on-failure restarts it after RestartSec while the starts in StartLimitIntervalSec
    # stay within StartLimitBurst: burst 3 is 3 starts in all, the deploy's own included, so
    # exactly 2 automatic restarts (what docs/training-unit.md and the unit's comment say); the
    # next restart is refused and the unit stays failed. Result keeps the first failure
    # ('exit-code', not
    # 'start-limit-hit'); NRestarts counts the refused one too.
    log = lambda: site.ct("journalctl", "-u", UNIT, "-o", "cat", "--no-pager").stdout  # noqa
    text = wait_for("the start limit", log, lambda t: "Start request repeated too quickly" in t)
    starts = text.count(f"Started {UNIT}")
    automatic_restarts = starts - 1  # the first start is the deploy's
    assert (starts, automatic_restarts) == (burst, burst - 1), text
    assert (
        f"Back off: at most {burst} starts an hour"
        in site.ct("cat", f"/etc/systemd/system/{UNIT}").stdout
    )
    assert len(ckpt_files(site, "started")) == burst
    assert text.count("Start request repeated too quickly") == 1, text
    assert show(site, "ActiveState", "Result", "NRestarts") == {
        "ActiveState": "failed",
        "Result": "exit-code",
        "NRestarts": "3",
    }, crashing.output[-3000:]
    # it stays down: no further start happens on its own
    assert site.ct("systemctl", "is-failed", UNIT).stdout == "failed\n"
    # a human fixed the trainer: the next deploy resets the failed state and starts it again
    node.run(["rm", f"{CKPT_NODE}/mode"], check=True)
    fixed = site.deploy("training_restart_delay_s=1", "training_restart_burst=3")
    assert fixed.rc == 0, fixed.output[-4000:]
    assert show(site, "ActiveState")["ActiveState"] == "active"


def test_a_restart_asked_for_is_never_refused_by_the_start_limit(trainer_site):
    """With training_restart_burst=2, two starts in an hour are all systemd allows; a third
    start of the deploy's (a restart asked for with restart_training=true) used to stop the
    running training and then be refused ("Start request repeated too quickly"), leaving no
    training running. Every start the deploy makes resets the unit's start count first."""
    site = trainer_site
    burst = "training_restart_burst=2"
    first = site.deploy(burst)
    assert first.rc == 0, first.output[-4000:]
    for budget in (1000, 2000, 3000):  # a changed token_budget: a pending restart each time
        over = f'variant_overrides={{"cu130": {{"token_budget": {budget}}}}}'
        before = show(site, "InvocationID")["InvocationID"]
        run = site.deploy(burst, over, "restart_training=true")
        assert run.rc == 0, run.output[-4000:]
        assert "Start request repeated too quickly" not in run.output
        now = show(site, "ActiveState", "InvocationID")
        assert now["ActiveState"] == "active" and now["InvocationID"] != before, now
        cmdline = site.ct(
            "sh", "-c", f"cat /proc/$(systemctl show -p MainPID --value {UNIT})/cmdline"
        ).stdout.split("\0")
        assert cmdline[cmdline.index("--token-budget") + 1] == str(budget)


def test_a_deploy_during_a_stop_in_progress(trainer_site):
    site = trainer_site
    node = site.node
    node.run(
        ["sh", "-c", f"mkdir -p {CKPT_NODE} && echo hold-on-term > {CKPT_NODE}/mode"], check=True
    )
    first = site.deploy()
    assert first.rc == 0, first.output[-4000:]
    unit = show(site, "MainPID", "InvocationID")
    # someone stops the training; its checkpoint takes a while
    assert site.ct("systemctl", "stop", "--no-block", UNIT).returncode == 0
    wait_for("the checkpoint to begin", lambda: ckpt_files(site, "stopping"))
    assert show(site, "ActiveState", "SubState") == {
        "ActiveState": "deactivating",
        "SubState": "stop-sigterm",
    }

    # The deploy meanwhile: it starts nothing (that would queue behind the stop) and fails the
    # host with one line saying why the training is not running.
    during = site.deploy()
    assert during.rc != 0, during.output[-4000:]
    assert (
        f"{UNIT} is stopping (deactivating): not started; run deploy.py again once it has stopped"
    ) in during.output, during.output[-4000:]
    assert "Traceback" not in during.output
    assert "restart pending" not in during.output
    assert show(site, "ActiveState", "InvocationID") == {
        "ActiveState": "deactivating",
        "InvocationID": unit["InvocationID"],
    }

    # The checkpoint finishes, the stop completes; the next deploy starts a new run.
    node.run(["touch", f"{CKPT_NODE}/release"], check=True)
    wait_for(
        "the stop",
        lambda: show(site, "ActiveState")["ActiveState"],
        lambda state: state == "inactive",
    )
    assert ckpt_files(site, "checkpoint") == [f"checkpoint-{unit['MainPID']}"]
    after = site.deploy()
    assert after.rc == 0 and after.changed >= 1, after.output[-4000:]
    new = show(site, "ActiveState", "InvocationID")
    assert new["ActiveState"] == "active" and new["InvocationID"] != unit["InvocationID"]


def test_a_restart_says_how_long_the_stop_has_waited_while_the_checkpoint_runs(trainer_site):
    """A restart whose checkpoint takes long (the trainer holds until released): the deploy
    prints its waiting lines while systemd still waits for the checkpoint, not only after it."""
    site = trainer_site
    node = site.node
    node.run(
        ["sh", "-c", f"mkdir -p {CKPT_NODE} && echo hold-on-term > {CKPT_NODE}/mode"], check=True
    )
    first = site.deploy()
    assert first.rc == 0, first.output[-4000:]
    pid = show(site, "MainPID")["MainPID"]
    restart = ("progress_interval_s=1", "training_stop_timeout_s=600", "restart_training=true")
    with site.deploy_streaming(*restart) as run:
        try:
            # the first line once systemd is stopping it (an earlier one may come before the
            # SIGTERM): the sub-state and the timeout systemd applies (the unit reloaded: 600 s)
            line = run.wait_for(
                f"waiting for {UNIT} to stop",
                timeout=120,
                pattern="so far; stop-sigterm, SIGKILL after TimeoutStopSec=10min",
            )
            # the line came while the checkpoint was still being written: the trainer holds
            assert wait_for("the checkpoint to begin", lambda: ckpt_files(site, "stopping")) == [
                f"stopping-{pid}"
            ]
            assert ckpt_files(site, "checkpoint") == []
            assert show(site, "ActiveState")["ActiveState"] == "deactivating", line
        finally:
            node.run(["touch", f"{CKPT_NODE}/release"], check=True)  # the checkpoint ends
        done = run.finish()
    assert done.rc == 0, done.output[-4000:]
    assert ckpt_files(site, "checkpoint") == [f"checkpoint-{pid}"]
    assert show(site, "ActiveState")["ActiveState"] == "active"


def by_hand(site):
    """Start the training command by hand in CT 200, outside the unit (detached, like a run
    someone started in a shell): -> its pid in the container, once it has started."""
    known = set(ckpt_files(site, "started"))
    site.node.ct_run(
        200,
        [
            "sh",
            "-c",
            "setsid -f /root/venv/bin/python /data/dflash/train.py "
            "--checkpoint-dir /data/checkpoints >/dev/null 2>&1 </dev/null",
        ],
        check=True,
    )
    new = wait_for("the hand-started trainer", lambda: set(ckpt_files(site, "started")) - known)
    return int(new.pop().split("-")[1])


def test_a_training_started_by_hand_beside_the_unit_is_a_leftover(trainer_site):
    """A second copy of train.py started outside the unit while the unit runs: verify.py and a
    deploy name it and change nothing; a restart with consent takes it over first (SIGTERM: it
    checkpoints), then stops and starts the unit. With the unit stopped, it is the running
    training (issue 20): the next deploy starts nothing beside it; with consent, takes it over.
    The GPUs they hold are registered on the node by their real pids, so the node sees their
    real cmdline and cgroup (the unit's: .../lxc/200/payload/system.slice/<unit>; the hand
    one: .../lxc/200/payload, outside the unit)."""
    site = trainer_site
    node = site.node
    first = site.deploy()
    assert first.rc == 0, first.output[-4000:]
    unit = show(site, "MainPID", "InvocationID")
    node.register_gpu_process(node.node_pid(200, int(unit["MainPID"])), 0, used_mib=40000)
    hand = by_hand(site)
    hand_node = node.node_pid(200, hand)
    node.register_gpu_process(hand_node, 1, used_mib=30000)
    assert f"/lxc/200/payload/system.slice/{UNIT}" in node.read(
        f"/proc/{node.node_pid(200, int(unit['MainPID']))}/cgroup"
    )
    assert "system.slice" not in node.read(f"/proc/{hand_node}/cgroup")

    # verify.py names it (the unit's own process is fine) and changes nothing
    before = node.tree_digest()
    check = site.pyinfra("verify.py")
    assert check.rc != 0
    assert (
        f"training process pvegpu did not start {hand_node} in CT 200 (outside {UNIT}) "
        "(/root/venv/bin/python /data/dflash/train.py"
    ) in check.output, check.output[-4000:]
    assert f"kill {hand_node}" in check.output
    assert f"pid {node.node_pid(200, int(unit['MainPID']))}" not in check.output
    assert node.tree_digest() == before

    # a deploy without consent fails on it in its verify stage and stops nothing
    refused = site.deploy()
    assert refused.rc != 0
    assert f"training process pvegpu did not start {hand_node} in CT 200" in refused.output
    assert show(site, "MainPID", "InvocationID") == unit
    assert site.ct("test", "-d", f"/proc/{hand}").returncode == 0

    # with a pending change and consent: stop, the leftover ended (it checkpoints), start
    node.clear_pct_log()
    restart = site.deploy("training_stop_timeout_s=600", "restart_training=true")
    assert restart.rc == 0, restart.output[-4000:]
    # the copy pvegpu did not start is taken over first (SIGCONT, then SIGTERM), once verified
    assert f"stopping the running training (pid {hand_node}, started by hand" in restart.output
    assert sorted(ckpt_files(site, "checkpoint")) == sorted(
        [f"checkpoint-{unit['MainPID']}", f"checkpoint-{hand}"]
    )
    killed = [
        json.loads(line)
        for line in node.read("/var/log/pvegpu/training-leftovers.log").splitlines()
    ]
    assert [(k["pid"], k["signal"], k["gpus"]) for k in killed] == [
        (hand_node, "SIGCONT", [1]),
        (hand_node, "SIGTERM", [1]),
    ]
    new = show(site, "ActiveState", "InvocationID")
    assert new["ActiveState"] == "active" and new["InvocationID"] != unit["InvocationID"], new
    execs = [c for c in node.pct_calls() if c["argv"][:1] == ["exec"]]
    stop = next(c for c in execs if f"systemctl stop {UNIT}" in " ".join(c["argv"]))
    start = next(c for c in execs if f"systemctl start {UNIT}" in " ".join(c["argv"]))
    assert killed[0]["time"] <= stop["time"] and killed[0]["by"] == "takeover"
    assert stop["time"] + stop["duration"] <= start["time"]

    # the unit stopped by hand, a copy started by hand: that copy is the running training, no
    # leftover (issue 20): the plain deploy starts nothing beside it; with consent it is
    # taken over (it checkpoints), then the unit starts
    assert site.ct("systemctl", "stop", UNIT).returncode == 0
    hand = by_hand(site)
    hand_node = node.node_pid(200, hand)
    node.register_gpu_process(hand_node, 2, used_mib=30000)
    waits = site.deploy("training_stop_timeout_s=600")
    assert waits.rc == 0, waits.output[-4000:]
    assert (
        f"the start of {UNIT} waits for the running training (pid {hand_node}, started by hand)"
    ) in waits.output, waits.output[-4000:]
    assert site.ct("test", "-d", f"/proc/{hand}").returncode == 0
    assert show(site, "ActiveState")["ActiveState"] != "active"
    again = site.deploy("training_stop_timeout_s=600", "restart_training=true")
    assert again.rc == 0, again.output[-4000:]
    assert f"stopping the running training (pid {hand_node}, started by hand" in again.output
    assert f"checkpoint-{hand}" in ckpt_files(site, "checkpoint")
    assert show(site, "ActiveState")["ActiveState"] == "active"

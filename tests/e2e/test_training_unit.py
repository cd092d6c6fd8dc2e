"""Stage 5 end to end: the training unit is started once, never restarted by accident, and restarted
cleanly only when asked (stop, leftover cleanup on the node, start, in that order).

CT 200 boots real systemd (the simulator's default): the unit really runs the user's stand-in
train.py (sim/__main__.py's TRAIN_PY, which runs until SIGTERM). GPU use is modelled as the node
sees it: compute processes whose /proc/<pid>/cmdline is the unit's ExecStart and whose cgroup reads
as the unit's in CT 200, spawned on the node (sim.node.spawn_gpu_process). Nothing ends them when
systemd stops the unit: they are the processes that survive a stop, which the restart must clear
before it starts the unit again. Which systemctl verbs the deploy ran, and when, is read from the
pct log (every `pct exec` with its time and duration); whether the run was restarted from
systemd's own MainPID and InvocationID.
"""

import json
import re
from pathlib import Path

from pvegpu.facts.probe import probe_command
from pvegpu.plan.unit import digest

GOLDEN = Path(__file__).resolve().parents[1] / "unit" / "golden"
UNIT = "dflash-train.service"
UNIT_FILE = f"/etc/systemd/system/{UNIT}"
RECORD = "/run/pvegpu-dflash-train/started"
UNIT_CGROUP = f"0::/lxc/200/ns/system.slice/{UNIT}"
# argv of the training process, as ExecStart runs it (tests/unit/golden)
TRAINING = [
    "/root/venv/bin/python",
    "/data/dflash/train.py",
    "--target-gpus",
    "0,1,2,3,4",
    "--drafter-gpus",
    "5,6,7",
    "--token-budget",
    "49152",
    "--max-batch-size",
    "48",
    "--dataset-dir",
    "/data/datasets",
    "--checkpoint-dir",
    "/data/checkpoints",
    "--resume",
]


CU130, CU128 = "torch-2.11.0-cu130", "torch-2.11.0-cu128"
ENV = "/root/venvs/{}/.pvegpu-train.env"  # each build's training settings, through its link


def started_as(site, pid):
    """(argv, environment) of the container's process ``pid``, as systemd started it."""
    cmdline = site.ct("cat", f"/proc/{pid}/cmdline").stdout
    environ = site.ct("cat", f"/proc/{pid}/environ").stdout
    env = dict(kv.split("=", 1) for kv in environ.split("\0") if "=" in kv)
    return cmdline.rstrip("\0").split("\0"), env


VERB = re.compile(r"systemctl (start|stop|restart|try-restart|reload-or-restart) (\S+)")


def verbs(calls):
    """start/stop/restart commands of the training unit in the `pct exec` calls, in order."""
    return [
        verb
        for c in calls
        if c["argv"][:1] == ["exec"]
        for verb, unit in VERB.findall(" ".join(c["argv"]))
        if unit.strip("'\"") == UNIT
    ]


def invocation(site):
    return site.ct("systemctl", "show", "-p", "InvocationID", "--value", UNIT).stdout.strip()


def main_pid(site):
    return site.ct("systemctl", "show", "-p", "MainPID", "--value", UNIT).stdout.strip()


def alive(site, pid):
    return (
        site.node.run(
            ["sh", "-c", f"test -d /proc/{pid} && ! grep -q '^[^)]*) Z' /proc/{pid}/stat"]
        ).returncode
        == 0
    )


def test_training_unit_started_once_never_restarted_by_accident_restarted_cleanly_when_asked(site):
    node = site.node

    # Bad input: a missing training script stops the run before anything changes.
    before = node.tree_digest()
    bad = site.deploy("training_script=/data/dflash/missing.py")
    assert bad.rc != 0
    assert (
        "training_script=/data/dflash/missing.py is missing (node path "
        "/tank/dflash/dflash/missing.py)"
    ) in bad.output
    assert node.tree_digest() == before

    # First deploy: the unit, as golden-checked, is enabled and started once.
    first = site.deploy()
    assert first.rc == 0, first.output[-4000:]
    assert site.ct("cat", UNIT_FILE).stdout == (GOLDEN / "dflash-train.service").read_text()
    assert site.ct("cat", ENV.format(CU130)).stdout == (GOLDEN / "train.cu130.env").read_text()
    assert site.ct("systemctl", "is-enabled", UNIT).stdout == "enabled\n"
    calls = node.pct_calls()
    assert verbs(calls) == ["start"]
    record = site.ct("cat", RECORD).stdout.splitlines()
    assert record[0].split()[1] == digest((GOLDEN / "dflash-train.service").read_text())
    assert record[1] == "venv /root/venvs/torch-2.11.0-cu130"
    assert record[3].split()[1] == digest((GOLDEN / "train.cu130.env").read_text())
    pid_before, run_before = main_pid(site), invocation(site)
    # systemd ran ExecStart: the build's own python, with that build's settings
    argv, env = started_as(site, pid_before)
    assert argv[0].startswith(f"/root/venvs/{CU130}.b") and argv[0].endswith("/bin/python")
    assert argv[1:] == TRAINING[1:]
    assert env["TORCHINDUCTOR_CACHE_DIR"] == f"/data/cache/{CU130}/inductor"
    assert "TOKEN_BUDGET" not in env

    # The training now runs: its processes hold GPUs 0 and 5.
    training = [
        node.spawn_gpu_process(g, TRAINING, used_mib=40000, cgroup=UNIT_CGROUP) for g in (0, 5)
    ]

    # A converged re-run: zero changes, no restart, no notice.
    second = site.deploy()
    assert second.rc == 0, second.output[-4000:]
    assert second.changed == 0, second.json
    assert verbs(node.pct_calls()[len(calls) :]) == []
    assert (main_pid(site), invocation(site)) == (pid_before, run_before)
    assert "restart pending" not in second.output

    # Swap the variant while it runs: a new venv with its own settings, the same unit file, and
    # the run is left alone.
    calls = node.pct_calls()
    swap = site.deploy("torch_variant=cu128")
    assert swap.rc == 0, swap.output[-4000:]
    assert site.ct("cat", UNIT_FILE).stdout == (GOLDEN / "dflash-train.service").read_text()
    assert site.ct("cat", ENV.format(CU128)).stdout == (GOLDEN / "train.cu128.env").read_text()
    assert verbs(node.pct_calls()[len(calls) :]) == []
    assert (main_pid(site), invocation(site)) == (pid_before, run_before)
    assert (
        "dflash-train.service keeps running; restart pending (venv build "
        "/root/venvs/torch-2.11.0-cu130 -> /root/venvs/torch-2.11.0-cu128)" in swap.output
    )
    assert "restart_training=true" in swap.output
    assert all(alive(site, pid) for pid in training)

    # Still pending on the next run: the notice again, and still zero changes.
    again = site.deploy("torch_variant=cu128")
    assert again.rc == 0 and again.changed == 0, again.output[-4000:]
    assert "restart pending" in again.output

    # Asked to restart: stop (and wait), end the leftover training processes on the node, start.
    node.clear_pct_log()
    restart = site.deploy("torch_variant=cu128", "restart_training=true")
    assert restart.rc == 0, restart.output[-4000:]
    assert verbs(node.pct_calls()) == ["stop", "start"]
    killed = [
        json.loads(line)
        for line in node.read("/var/log/pvegpu/training-leftovers.log").splitlines()
    ]
    assert sorted(k["pid"] for k in killed) == sorted(training)
    assert all(k["argv"] == TRAINING for k in killed)
    assert not any(alive(site, pid) for pid in training)
    assert "ended leftover training process" in restart.output
    assert main_pid(site) != pid_before and invocation(site) != run_before
    record = site.ct("cat", RECORD).stdout.splitlines()
    assert record[0].split()[1] == digest((GOLDEN / "dflash-train.service").read_text())
    assert record[1] == "venv /root/venvs/torch-2.11.0-cu128"
    assert record[3].split()[1] == digest((GOLDEN / "train.cu128.env").read_text())
    argv, env = started_as(site, main_pid(site))
    assert argv[0].startswith(f"/root/venvs/{CU128}.b")
    assert argv[argv.index("--token-budget") + 1] == "65536"
    assert argv[argv.index("--max-batch-size") + 1] == "64"
    assert env["TORCHINDUCTOR_CACHE_DIR"] == f"/data/cache/{CU128}/inductor"
    # The pct log shows the same order: the stop's exec ends before the first signal, the last
    # signal is sent before the start's exec begins.
    execs = [c for c in node.pct_calls() if c["argv"][:1] == ["exec"]]
    stop_exec = next(c for c in execs if f"systemctl stop {UNIT}" in " ".join(c["argv"]))
    start_exec = next(c for c in execs if f"systemctl start {UNIT}" in " ".join(c["argv"]))
    assert stop_exec["time"] + stop_exec["duration"] <= min(k["time"] for k in killed)
    assert max(k["time"] for k in killed) <= start_exec["time"]

    # What counts as a leftover (run on the node as the restart runs it, with the unit stopped):
    # only what is left in the unit's cgroup -- never the training command started elsewhere (a
    # training pvegpu did not start: it waits, or the takeover stops it with consent), nor a
    # process of another command, of the node or of another container, nor one on a GPU that
    # is not a training GPU.
    site.ct("systemctl", "stop", UNIT)
    by_hand = node.spawn_gpu_process(1, TRAINING, used_mib=1000)
    # ExecStart runs the script with the python of the build /root/venv pointed at when it started.
    resolved = node.spawn_gpu_process(
        0, ["/root/venvs/torch-2.11.0-cu130.b1/bin/python", *TRAINING[1:]], used_mib=1000
    )
    worker = node.spawn_gpu_process(
        4,
        [
            "/root/venv/bin/python",
            "-c",
            "from multiprocessing.spawn import spawn_main; spawn_main()",
        ],
        used_mib=1000,
        cgroup=UNIT_CGROUP,
    )
    notebook = node.spawn_gpu_process(3, ["/usr/bin/python3", "/root/notebook.py"], used_mib=1000)
    other_ct = node.spawn_gpu_process(
        2, TRAINING, used_mib=1000, cgroup=f"0::/lxc/201/ns/system.slice/{UNIT}"
    )
    not_ours = node.spawn_gpu_process(7, TRAINING, used_mib=1000)
    args = {
        "vmid": 200,
        "unit": UNIT,
        "gpus": [0, 1, 2, 3, 4, 5, 6],
        "match": {
            "script": TRAINING[1],
            "pythons": [TRAINING[0]],
            "python_under": ["/root/venvs/"],
        },
        "term_wait_s": 30,
        "log": "/var/log/pvegpu/training-leftovers.log",
    }
    run = node.run(["sh", "-c", probe_command("training_leftovers", args)])
    doc = json.loads(run.stdout.strip().splitlines()[-1])
    assert [p["pid"] for p in doc["killed"]] == [worker], doc
    assert sorted(p["pid"] for p in doc["foreign"]) == sorted(
        [by_hand, resolved, notebook, other_ct]
    ), doc
    assert doc["remaining"] == [] and doc["error"] is None
    assert not alive(site, worker)
    assert all(alive(site, pid) for pid in (by_hand, resolved, notebook, other_ct, not_ours))
    for pid in (by_hand, resolved):
        node.kill_gpu_process(pid)

    # The whole deploy with the unit stopped: the verify stage (4) lets through what the unit
    # stage (5) clears -- a process left in the unit's cgroup that holds nearly all of GPU 6 --
    # and fails on anything else on a training GPU: a process of another command (notebook,
    # GPU 3), of another container (other_ct, GPU 2), the training command on the node
    # (not_ours, GPU 7), leaving them all alone. verify.py names every one and changes nothing.
    stuck = node.spawn_gpu_process(6, TRAINING, used_mib=143000, cgroup=UNIT_CGROUP)
    everyone = (notebook, other_ct, not_ours, stuck)
    calls = node.pct_calls()
    before = node.tree_digest()
    check = site.pyinfra("verify.py", "torch_variant=cu128")
    assert check.rc != 0 and node.tree_digest() == before
    clears = "fix: run deploy.py: it clears leftover training processes before it starts the unit"
    assert any(
        "GPU 6 (drafter) free: expected no compute process but the training unit's; "
        f"found leftover training process {stuck} "
        in line
        and line.endswith(clears)
        for line in check.output.splitlines()
    ), check.output[-4000:]
    assert f"found pid {not_ours} (" in check.output and f"kill {not_ours}" in check.output
    assert f"pid {notebook} (/usr/bin/python3 /root/notebook.py)" in check.output
    assert f"pid {other_ct} in CT 201" in check.output
    assert all(alive(site, pid) for pid in everyone)

    blocked = site.deploy("torch_variant=cu128")
    assert blocked.rc != 0
    assert (
        f"leftover training process {stuck} on GPU 6: cleared before the unit starts"
        in blocked.output
    )
    assert (
        f"GPU 3 (target) free: expected no compute process but the training unit's; found pid "
        f"{notebook} " in blocked.output
    )
    assert "node GPU 2 is also in use by CT 201" in blocked.output
    assert (
        f"GPU 7 (drafter) free: expected no compute process but the training unit's; found "
        f"pid {not_ours} " in blocked.output
    )
    assert "GPU 6 (drafter) free" not in blocked.output
    assert verbs(node.pct_calls()[len(calls) :]) == []  # stage 5 never ran
    assert all(alive(site, pid) for pid in everyone)

    for pid in (notebook, other_ct, not_ours):
        node.kill_gpu_process(pid)
    cleared = site.deploy("torch_variant=cu128")
    assert cleared.rc == 0, cleared.output[-4000:]
    assert (
        f"leftover training process {stuck} on GPU 6: cleared before the unit starts"
        in cleared.output
    )
    assert f"ended leftover training process {stuck} on GPU 6" in cleared.output
    assert not alive(site, stuck)
    assert verbs(node.pct_calls()[len(calls) :]) == ["start"]
    assert site.ct("systemctl", "is-active", UNIT).stdout == "active\n"

"""Consent never costs a checkpoint: with restart_training=true a training pvegpu did not start is
stopped gracefully and whole, once the new build is verified, and pvegpu's unit then runs the only
trainer. On one CT 200 made by hand and adopted (its venv, raw GPU lines, a data dir of its own):
(a) torchrun with 8 workers whose checkpoint takes longer than torchrun's 30 s before SIGKILL,
(b) a `bash run.sh` loop that would start the trainer again, (c) a trainer paused with ctrl-Z,
(d) a trainer cron started (cron.service only started it: it stays enabled and running), each
with the preview listing the plan first and changing nothing; (f) a build that fails after
consent leaves the users' training running, untouched.
"""

from __future__ import annotations

import json
import shlex
import signal

import pytest

from sim.__main__ import seed_training_code, site_data
from sim.fixtures import check_host, skip_without_real_systemd
from sim.index import PackageIndex
from sim.node import SimNode
from tests.e2e.conftest import Site
from tests.e2e.test_adopt import CKPT_NODE, ckpt_files, handmade_ct, trainers, wait_for
from tests.e2e.test_trainings_recognised import (
    TRAIN,
    VENV_PY,
    root_node_pid,
    start,
    stop_all,
    training_pids,
)

UNIT = "dflash-train.service"


@pytest.fixture(scope="module")
def adopted(wheelhouse, tmp_path_factory):
    """CT 200 made by hand, adopted by a first deploy (nothing trains yet): pvegpu's unit runs;
    each test stops it, starts its own training and takes it over."""
    skip_without_real_systemd()
    check_host("systemd")
    tmp = tmp_path_factory.mktemp("takeover")
    with (
        PackageIndex(wheelhouse.torch_index(), wheelhouse.pypi()) as index,
        SimNode(tmp / "node", ct_init="systemd") as node,
    ):
        seed_training_code(node)
        site = Site(
            node, index, [*site_data(index, tmp / "locks"), "--data", "training_requirements=[]"]
        )
        handmade_ct(site)
        node.torch_config(register_contexts=True)
        first = site.deploy("adopt=true")
        assert first.rc == 0, first.output[-6000:]
        yield site


@pytest.fixture
def site(adopted):
    """The adopted site with pvegpu's unit stopped and disabled, no checkpoint files, and
    whatever a test started ended afterwards."""
    adopted.ct("systemctl", "disable", "--now", UNIT)
    adopted.node.run(["sh", "-c", f"rm -f {CKPT_NODE}/*"], check=True)
    yield adopted
    adopted.node.run(["rm", "-f", f"{CKPT_NODE}/checkpoint_s"])
    adopted.ct("systemctl", "disable", "--now", UNIT)
    adopted.ct("sh", "-c", "crontab -r 2>/dev/null; true")
    stop_all(adopted)


def started(site) -> dict[int, dict]:
    """Container pid -> what each trainer recorded at its start (its argv and rank variables)."""
    found = {}
    for name in ckpt_files(site, "started"):
        text = site.node.read(f"{CKPT_NODE}/{name}").splitlines()
        found[int(name.split("-")[1])] = json.loads(text[1]) if len(text) > 1 else {}
    return found


def unit_trainer(site) -> int:
    out = site.ct("systemctl", "show", "-p", "MainPID", "--value", UNIT).stdout.strip()
    return int(out or 0)


def taken_over(site, plan_lines, *data):
    """Preview first (the plan, nothing changed), then the consented deploy; -> its Run."""
    before = training_pids(site)
    preview = site.deploy("restart_training=true", *data, yes=False)
    for line in plan_lines:
        assert line in preview.output, preview.output[-6000:]
    assert training_pids(site) == before, preview.output[-6000:]
    run = site.deploy("restart_training=true", "progress_interval_s=5", *data)
    assert run.rc == 0, run.output[-6000:]
    return run


def one_trainer_ours(site) -> None:
    """Exactly one trainer afterwards: pvegpu's unit's (enabled), nothing else of the tests'."""
    pid = wait_for("the unit's trainer", lambda: unit_trainer(site))
    assert trainers(site) == [pid]  # its DataLoader-like helpers aside
    assert site.ct("systemctl", "is-enabled", UNIT).stdout.strip() == "enabled"


def test_a_torchrun_with_8_workers_lets_every_worker_checkpoint(site):
    site.node.run(["sh", "-c", f"echo 40 > {CKPT_NODE}/checkpoint_s"], check=True)
    start(site, f"/root/venv/bin/torchrun --nproc_per_node=8 --standalone {TRAIN}")
    root = root_node_pid(site, "torchrun")
    workers = wait_for("8 workers", lambda: started(site), done=lambda s: len(s) == 8)
    assert sorted(int(w["LOCAL_RANK"]) for w in workers.values()) == list(range(8))
    run = taken_over(
        site,
        [
            # torchrun, 8 workers, 2 DataLoader-like helpers each
            f"CT 200 already trains (pid {root}, started by hand, 25 processes",
            "stop the training started by hand (pid",
        ],
    )
    # 40 s each, beyond torchrun's 30 s: every worker finished its checkpoint
    assert sorted(ckpt_files(site, "checkpoint")) == sorted(f"checkpoint-{w}" for w in workers)
    assert f"its launchers held (SIGSTOP to pid {root})" in run.output, run.output[-6000:]
    assert "waiting for pid " in run.output  # progress lines while the workers checkpoint
    one_trainer_ours(site)


def test_a_wrapper_loop_does_not_start_its_trainer_again(site):
    site.node.run(
        ["sh", "-c", "cat > /tank/dflash/dflash/run.sh"],
        input=f"while true; do {VENV_PY} {TRAIN} --resume; sleep 1; done\n",
        check=True,
    )
    site.node.run(["sh", "-c", f"echo 5 > {CKPT_NODE}/checkpoint_s"], check=True)
    start(site, "bash run.sh")
    root_node_pid(site, "run.sh")
    (trainer,) = wait_for("the loop's trainer", lambda: started(site))
    taken_over(site, ["stop the training started by hand (pid"])
    assert ckpt_files(site, "checkpoint") == [f"checkpoint-{trainer}"]
    # the loop never started it again: the only later start is pvegpu's unit's
    one_trainer_ours(site)
    assert set(started(site)) == {trainer, unit_trainer(site)}


def test_a_paused_trainer_is_continued_so_it_can_checkpoint(site):
    site.node.run(["sh", "-c", f"echo 5 > {CKPT_NODE}/checkpoint_s"], check=True)
    start(site, f"{VENV_PY} {TRAIN}")
    (trainer,) = wait_for("the trainer", lambda: started(site))
    site.ct("sh", "-c", f"kill -STOP {trainer}")  # ctrl-Z
    assert site.ct("sh", "-c", f"grep -q '^State:.*T' /proc/{trainer}/status").returncode == 0
    taken_over(site, ["stop the training started by hand (pid"])
    assert ckpt_files(site, "checkpoint") == [f"checkpoint-{trainer}"]
    one_trainer_ours(site)


def test_a_trainer_cron_started_is_stopped_and_cron_stays(site):
    line = f"@reboot cd /data/dflash && {VENV_PY} {TRAIN}"
    site.node.ct_run(200, ["sh", "-c", "crontab -"], input=line + "\n", check=True)
    # cron runs @reboot jobs when it starts after a boot (Debian: /run/crond.reboot marks it)
    site.ct("sh", "-c", "rm -f /run/crond.reboot && systemctl restart cron")
    (trainer,) = wait_for("cron's trainer", lambda: started(site))
    site.node.run(["sh", "-c", f"echo 5 > {CKPT_NODE}/checkpoint_s"], check=True)
    run = taken_over(
        site,
        ["stop the training started under cron.service", "at boot: /var/spool/cron/crontabs/root:"],
    )
    assert ckpt_files(site, "checkpoint") == [f"checkpoint-{trainer}"], run.output[-8000:]
    assert "systemctl disable --now cron" not in run.output
    assert site.ct("systemctl", "is-enabled", "cron").stdout.strip() == "enabled"
    assert site.ct("systemctl", "is-active", "cron").stdout.strip() == "active"
    crontab = site.ct("crontab", "-l").stdout
    assert f"# disabled by pvegpu (it would start a second trainer at boot): {line}" in crontab
    one_trainer_ours(site)


def test_a_failed_build_after_consent_leaves_the_training_running(site):
    start(site, f"{VENV_PY} {TRAIN}")
    root = root_node_pid(site, "train.py")
    before = training_pids(site)
    run = site.deploy("restart_training=true", 'training_requirements=["no-such-package==1.0"]')
    assert run.rc != 0, run.output[-6000:]
    assert training_pids(site) == before and ckpt_files(site, "stopping") == []
    assert f"stopping the running training (pid {root}" not in run.output
    assert site.ct("systemctl", "is-active", UNIT).stdout.strip() != "active"


def test_a_new_trainer_that_dies_at_import_fails_the_run_and_says_how_to_start_the_old_one(site):
    """After a takeover pvegpu's unit starts the new trainer; one that exits while it loads (a
    package the hand-made venv had and the build lacks) is watched and fails the run with its
    journal, and the last line says how to start the stopped training again: that command, run
    as it is, starts it as it ran (its arguments, directory and GPUs; no secret of its
    environment is printed)."""
    site.node.run(["sh", "-c", f"echo 3 > {CKPT_NODE}/checkpoint_s"], check=True)
    env = "CUDA_VISIBLE_DEVICES=3 HF_TOKEN=s3cret NCCL_DEBUG=INFO"
    site.ct(
        "sh",
        "-c",
        f"cd /data/dflash && {env} setsid nohup {VENV_PY} {TRAIN} --note 'a b' "
        ">/dev/null 2>&1 </dev/null &",
    )
    (trainer,) = wait_for("the trainer", lambda: started(site))
    dies = (
        'training_command=["{script}", "--checkpoint-dir", "{checkpoint_dir}", '
        '"--exit-at-start", "1"]'
    )
    run = site.deploy("restart_training=true", dies, "training_start_watch_s=20")
    assert run.rc != 0, run.output[-6000:]
    assert ckpt_files(site, "checkpoint") == [f"checkpoint-{trainer}"]  # the old one's kept
    assert f"CT 200: {UNIT} did not come up: " in run.output, run.output[-6000:]
    last = run.output.strip().splitlines()[-1]
    assert "the takeover had stopped 1 training(s): start again with `" in last, last
    assert "converged" not in last and "s3cret" not in last, last
    hint = last.split("start again with `", 1)[1].split("`", 1)[0]
    site.ct("systemctl", "disable", "--now", UNIT)
    assert site.node.run(shlex.split(hint)).returncode == 0, hint
    again = wait_for("the trainer started again", lambda: set(started(site)) - {trainer})
    record = started(site)[again.pop()]
    assert record["argv"][-2:] == ["--note", "a b"], record
    assert record.get("CUDA_VISIBLE_DEVICES") == "3", record


def torchrun_checkpointing_35_s(site) -> dict[int, dict]:
    """A torchrun training of 2 workers started by hand, each checkpoint 35 s: -> its workers."""
    site.node.run(["sh", "-c", f"echo 35 > {CKPT_NODE}/checkpoint_s"], check=True)
    start(site, f"/root/venv/bin/torchrun --nproc_per_node=2 --standalone {TRAIN}")
    return wait_for("2 workers", lambda: started(site), done=lambda s: len(s) == 2)


def the_stop_went_on_then_one_trainer(site, workers) -> None:
    """After a run cut short in the stop: every worker's checkpoint, the training ended
    (nothing left held), and the next consented deploy ends with exactly one trainer, ours."""
    wait_for("both checkpoints", lambda: ckpt_files(site, "checkpoint"), lambda c: len(c) == 2)
    assert sorted(ckpt_files(site, "checkpoint")) == sorted(f"checkpoint-{w}" for w in workers)
    wait_for("the training to end", lambda: training_pids(site), done=lambda p: p == [])
    again = site.deploy("restart_training=true")
    assert again.rc == 0, again.output[-6000:]
    one_trainer_ours(site)


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM], ids=["ctrl-c", "sigterm"])
def test_a_deploy_cut_short_during_the_takeover_says_so_and_the_stop_goes_on(site, sig):
    """Ctrl-C (or SIGTERM) three seconds into the stop of a torchrun training whose checkpoint
    takes 35 s: the run ends 130 (143) with a last line that says it was interrupted and that
    the stop goes on on the node; the stop finishes every checkpoint and leaves nothing held;
    the next deploy ends with exactly one trainer, pvegpu's."""
    workers = torchrun_checkpointing_35_s(site)
    with site.deploy_streaming("restart_training=true", "progress_interval_s=5") as run:
        run.wait_for("CT 200: stopping the running training")
        wait_for("the checkpoints to begin", lambda: ckpt_files(site, "stopping"))
        run.process.send_signal(sig)
        done = run.finish(timeout=120)
    assert done.rc == 128 + sig, done.output[-4000:]
    last = done.stdout.strip().splitlines()[-1]
    assert last.startswith(f"pvegpu: 127.0.0.1: INTERRUPTED ({sig.name}), not converged"), last
    assert "the takeover's stop of the running training (pid " in last, last
    assert "goes on on the node until its checkpoints are written" in last, last
    the_stop_went_on_then_one_trainer(site, workers)


def test_a_stop_process_killed_on_the_node_leaves_no_launcher_stopped(site):
    """An admin (or the OOM killer) kills the node's stop process while a torchrun training's
    workers checkpoint: its watchdog continues the launcher it held, the workers finish their
    checkpoints, the run fails saying so, and the next deploy ends with exactly one trainer."""
    workers = torchrun_checkpointing_35_s(site)
    launcher = root_node_pid(site, "torchrun")
    holder = "/run/lock/pvegpu-stop.holder"
    with site.deploy_streaming("restart_training=true", "progress_interval_s=5") as run:
        run.wait_for("CT 200: stopping the running training")
        wait_for("the checkpoints to begin", lambda: ckpt_files(site, "stopping"))
        text = wait_for("the stop's record", lambda: site.node.run(["cat", holder]).stdout)
        stop_pid = int(text.rsplit("(pid ", 1)[1].split(")")[0])
        site.node.run(["kill", "-9", str(stop_pid)], check=True)
        done = run.finish(timeout=300)
    assert done.rc != 0, done.output[-4000:]
    last = [line for line in done.output.splitlines() if line.startswith("pvegpu: 127.0.0.1:")]
    assert last and "FAILED" in last[-1] and "converged" not in last[-1], done.output[-4000:]
    state = lambda: site.node.run(  # noqa: E731
        ["sh", "-c", f"sed 's/.*) //' /proc/{launcher}/stat | cut -c1"]
    ).stdout.strip()
    wait_for("the launcher continued", state, done=lambda s: s != "T", timeout=30)
    the_stop_went_on_then_one_trainer(site, workers)

"""Safety end to end (issue 11): no setting, fault or second deploy stops a running training
without consent or leaves the node without a working venv.

- a renamed training unit needs consent, and leftover cleanup ends only the restarted unit's
  processes;
- one deploy at a time per node (a lock on the node);
- rebuild=venv builds beside the live venv: a deploy killed mid-rebuild leaves the old one live.
"""

from __future__ import annotations

import contextlib
import re
import shlex
import signal
import subprocess
import sys
import time
from pathlib import Path

from sim.__main__ import site_env
from tests.e2e import test_rebuild as rebuild_data  # a module: its tests are not collected
from tests.e2e.stall_proxy import StallProxy

ROOT = Path(__file__).resolve().parents[2]
UNIT = "dflash-train.service"
NEW = "dflash-train2.service"
RECORD = "/run/pvegpu-dflash-train/started"
CGROUP = "0::/lxc/200/ns/system.slice/{}"
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


def show(site, prop, unit):
    return site.ct("systemctl", "show", "-p", prop, "--value", unit).stdout.strip()


def alive(site, pid):
    check = f"test -d /proc/{pid} && ! grep -q '^[^)]*) Z' /proc/{pid}/stat"
    return site.node.run(["sh", "-c", check]).returncode == 0


VERB = re.compile(r"systemctl (start|stop|restart|enable|disable) (\S+)")


def unit_commands(calls):
    """(verb, unit) of every start/stop/restart/enable/disable the `pct exec` calls ran, in
    order (the pct log; CT 200's systemd is real and keeps no call log)."""
    return [
        (verb, unit.strip("'\""))
        for c in calls
        if c["argv"][:1] == ["exec"]
        for verb, unit in VERB.findall(" ".join(c["argv"]))
    ]


def test_renamed_unit_needs_consent_and_cleanup_ends_only_the_restarted_units(deployed):
    site, node = deployed, deployed.node
    trainer = node.spawn_gpu_process(0, TRAINING, used_mib=40000, cgroup=CGROUP.format(UNIT))
    started = (
        show(site, "MainPID", UNIT),
        show(site, "InvocationID", UNIT),
        show(site, "ExecMainStartTimestamp", UNIT),
        site.ct("cat", RECORD).stdout,
    )
    before = node.tree_digest()

    # Without consent: one line naming both units, before anything changes.
    refused = site.deploy("training_unit_name=dflash-train2")
    assert refused.rc != 0
    lines = [
        ln
        for ln in refused.output.splitlines()
        if f"{UNIT} is running, but training_unit_name=dflash-train2" in ln
    ]
    assert lines and NEW in lines[0] and "restart_training=true" in lines[0], refused.output[-3000:]
    assert node.tree_digest() == before
    assert (
        show(site, "MainPID", UNIT),
        show(site, "InvocationID", UNIT),
        show(site, "ExecMainStartTimestamp", UNIT),
        site.ct("cat", RECORD).stdout,
    ) == started
    assert alive(site, trainer)

    # With consent: the old unit is stopped (its leftover ended) and disabled, then the new starts.
    node.clear_pct_log()
    run = site.deploy("training_unit_name=dflash-train2", "restart_training=true")
    assert run.rc == 0, run.output[-4000:]
    order = [
        (verb, unit)
        for verb, unit in unit_commands(node.pct_calls())
        if verb in ("stop", "disable", "start") and unit in (UNIT, NEW)
    ]
    assert order == [("stop", UNIT), ("disable", UNIT), ("start", NEW)], order
    assert show(site, "ActiveState", UNIT) == "inactive"
    assert site.ct("systemctl", "is-enabled", UNIT).stdout.strip() == "disabled"
    assert show(site, "ActiveState", NEW) == "active"
    assert not alive(site, trainer)
    again = site.deploy("training_unit_name=dflash-train2")
    assert again.rc == 0 and again.changed == 0, again.output[-3000:]

    # The same training command run by another service of the container is a running training
    # (issue 20): never a leftover of dflash-train2, and the stopped unit does not start beside
    # it (the start waits for it; restart_training=true would take it over first).
    other = node.spawn_gpu_process(1, TRAINING, used_mib=1000, cgroup=CGROUP.format("hand.service"))
    site.ct("systemctl", "stop", NEW)
    restart = site.deploy("training_unit_name=dflash-train2")
    assert restart.rc == 0, restart.output[-3000:]
    assert (
        f"the start of {NEW} waits for the running training (pid {other}, under hand.service)"
    ) in restart.output, restart.output[-3000:]
    assert show(site, "ActiveState", NEW) != "active"
    assert alive(site, other)


def test_deploy_killed_mid_rebuild_leaves_the_previous_build_live(deployed, tmp_path):
    site, node = deployed, deployed.node
    torch_of = ["/root/venv/bin/python", "-c", "import torch; print(torch.__version__)"]
    live = site.ct("readlink", "-f", "/root/venv").stdout.strip()
    assert site.ct(*torch_of).stdout.strip() == "2.11.0+cu130"
    rebuild_data.put_data(node)  # checkpoints, a dataset, a compile cache under /tank/dflash
    training, data = show(site, "InvocationID", UNIT), rebuild_data.data_sums(node)
    assert training and data
    # Without uv's cache the fresh build downloads torch: the proxy holds that download, and the
    # deploy is SIGKILLed while it waits (mid-rebuild, after the old code deleted every build).
    site.ct("rm", "-rf", "/root/.cache/uv")
    held = lambda path: "/files/" in path and "torch-" in path  # noqa: E731
    with StallProxy(site.index.url, held) as proxy:
        argv = [
            sys.executable,
            "-m",
            "pyinfra",
            "inventory.py",
            "deploy.py",
            "-y",
            "--data",
            f"torch_index_base={proxy.url}/whl",
            "--data",
            f"package_index_url={proxy.url}/simple",
            "--data",
            "training_requirements=[]",
            "--data",
            f"locks_dir={tmp_path / 'locks'}",
            "--data",
            "rebuild=venv",
            "--data",
            "restart_training=true",
        ]
        with open(tmp_path / "killed.log", "w") as log:
            deploy = subprocess.Popen(
                argv,
                cwd=ROOT,
                env=site_env(node),
                stdout=log,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
            )
            try:
                # (a deploy that ends before it reaches the download fails the test at once)
                while not proxy.reached.wait(1) and deploy.poll() is None:
                    pass
                assert proxy.reached.is_set(), (tmp_path / "killed.log").read_text()[-3000:]
            finally:
                deploy.send_signal(signal.SIGKILL)
                deploy.wait()
        assert site.ct("readlink", "-f", "/root/venv").stdout.strip() == live
        assert site.ct(*torch_of).stdout.strip() == "2.11.0+cu130"
        assert show(site, "ActiveState", UNIT) == "active"
        assert show(site, "InvocationID", UNIT) == training  # the same run of the training
        assert rebuild_data.data_sums(node) == data
        # The next deploy (the held download still hanging) finishes the rebuild and switches.
        run = site.deploy("rebuild=venv", "restart_training=true")
        assert run.rc == 0, run.output[-4000:]
        new = site.ct("readlink", "-f", "/root/venv").stdout.strip()
        assert new != live and site.ct(*torch_of).stdout.strip() == "2.11.0+cu130"
        assert site.ct("test", "-e", live).returncode != 0  # replaced: deleted after the switch
        assert rebuild_data.data_sums(node) == data


LOCK = "/run/lock/pvegpu-deploy.lock"
HOLDER = "/run/lock/pvegpu-deploy.holder"


@contextlib.contextmanager
def lock_held_by_test(node):
    """Hold the node's deploy lock from the test (as another deploy would) until the block ends."""
    script = (
        f"mkdir -p /run/lock && exec 9>>{LOCK} && flock 9 && "
        f'echo "pid $$ since now: the test\'s holder" > {HOLDER} && echo held && '
        "exec cat >/dev/null"
    )
    holder = subprocess.Popen(
        node.ssh_argv("sh", "-c", shlex.quote(script)),
        text=True,
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
    )
    try:
        assert holder.stdout.readline().strip() == "held"
        yield
    finally:
        holder.stdin.close()
        holder.wait()


def start_deploy(site, log: Path, *data: str) -> subprocess.Popen:
    argv = [sys.executable, "-m", "pyinfra", "inventory.py", "deploy.py", "-y", *site.base_data]
    for kv in data:
        argv += ["--data", kv]
    with open(log, "w") as out:
        return subprocess.Popen(
            argv,
            cwd=ROOT,
            env=site_env(site.node),
            stdout=out,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
        )


def wait_for_line(log: Path, text: str, proc: subprocess.Popen):
    """Until ``text`` is in the log (the process is blocked there) or the process ended."""
    for _ in range(6000):
        if text in log.read_text():
            return
        assert proc.poll() is None, f"ended before {text!r}:\n" + log.read_text()[-3000:]
        time.sleep(0.1)
    raise AssertionError(f"{text!r} never appeared:\n" + log.read_text()[-3000:])


def test_one_deploy_at_a_time_per_node(deployed, tmp_path):
    site, node = deployed, deployed.node
    before = node.tree_digest()
    with lock_held_by_test(node):
        # A second deploy waits deploy_lock_wait_s, then refuses naming the holder; no change.
        refused = site.deploy("torch_variant=cu128", "deploy_lock_wait_s=0")
        assert refused.rc != 0
        assert (
            "127.0.0.1: another deploy holds the node (pid " in refused.output
            and "the test's holder" in refused.output
        ), refused.output[-3000:]
        assert node.tree_digest() == before
        # verify.py takes no lock: it reads beside a deploy.
        assert site.pyinfra("verify.py").rc == 0
        # Nor does a preview, whatever else is on its command line: --dry, with -y too.
        for yes in (True, False):
            dry = site.pyinfra("deploy.py", "deploy_lock_wait_s=60", extra=("--dry",), yes=yes)
            assert "for the deploy lock" not in dry.output, (yes, dry.output[-3000:])
            assert "another deploy holds the node" not in dry.output, (yes, dry.output[-3000:])
        # Two deploys at once (a swap, another requirement): both wait for the lock ...
        a = start_deploy(site, tmp_path / "a.log", "torch_variant=cu128")
        b = start_deploy(site, tmp_path / "b.log", 'training_requirements=["transformers==5.6.0"]')
        for proc, log in ((a, tmp_path / "a.log"), (b, tmp_path / "b.log")):
            wait_for_line(log, "waiting up to 600s for the deploy lock", proc)
    # ... and then run one after the other: the venv is what the last one asked for.
    assert a.wait() == 0, (tmp_path / "a.log").read_text()[-3000:]
    assert b.wait() == 0, (tmp_path / "b.log").read_text()[-3000:]
    last = node.read(HOLDER)
    listed = site.ct("/usr/local/bin/uv", "pip", "list", "--python", "/root/venv/bin/python").stdout
    if "torch_variant=cu128" in last:
        assert "2.11.0+cu128" in listed and "transformers" not in listed, listed
    else:
        assert "2.11.0+cu130" in listed and "transformers" in listed, listed


def test_an_extra_package_alone_is_repaired_not_only_reported(deployed):
    site = deployed
    uv, py = "/usr/local/bin/uv", "/root/venv/bin/python"
    junk = site.ct(
        uv,
        "pip",
        "install",
        "--python",
        py,
        "--index-url",
        site.index.package_index_url,
        "sglang-junk==0.1.0",
    )
    assert junk.returncode == 0, junk.stderr
    live = site.ct("readlink", "-f", "/root/venv").stdout.strip()
    repair = site.deploy()
    assert repair.rc == 0, repair.output[-4000:]
    assert "sglang-junk 0.1.0 is installed but not in the lock (extra)" in repair.output
    assert site.ct(py, "-c", "import sglang_junk").returncode != 0
    assert (
        site.ct(py, "-c", "import torch; print(torch.__version__)").stdout.strip() == "2.11.0+cu130"
    )
    assert site.ct("readlink", "-f", "/root/venv").stdout.strip() != live
    assert site.deploy().changed == 0


def test_a_container_only_run_is_refused_before_any_change(deployed):
    """`pyinfra @pct/<node>/<vmid> deploy.py` (no node host in the run) would change the container
    outside the node's deploy lock and preflight, or, as the host is in no group of
    inventory.py's, do nothing and say it passed: it is refused with one line, while another
    deploy holds the lock and while none does."""
    site, node = deployed, deployed.node
    before = node.tree_digest()
    ssh = [
        f"ssh_port={node.port}",
        "ssh_user=root",
        f"ssh_key={node.key_path}",
        f"ssh_known_hosts_file={node.known_hosts_path}",
    ]
    argv = [
        sys.executable,
        "-m",
        "pyinfra",
        f"@pct/{node.host}/200",
        "deploy.py",
        "-y",
        *site.base_data,
    ]
    for kv in [*ssh, "torch_variant=cu128", "deploy_lock_wait_s=0"]:
        argv += ["--data", kv]

    def run():
        p = subprocess.run(
            argv,
            cwd=ROOT,
            env=site_env(node),
            capture_output=True,
            text=True,
            timeout=600,
            stdin=subprocess.DEVNULL,
        )
        return p.returncode, p.stdout + p.stderr

    with lock_held_by_test(node):
        held_rc, held_out = run()
    rc, out = run()
    for code, text in ((held_rc, held_out), (rc, out)):
        assert code != 0, text[-3000:]
        assert (
            f"@pct/{node.host}/200: in neither pve_hosts nor training_cts, so deploy.py would "
            "change nothing there: run `pyinfra inventory.py deploy.py`"
        ) in text, text[-3000:]
        assert "Traceback" not in text, text[-3000:]
    assert node.tree_digest() == before


def test_a_build_that_fails_verification_never_goes_live(deployed):
    """A swap to a built variant whose torch no longer imports (a file of it damaged: nothing
    the build stage's package check sees): verify fails on that build before anything switches,
    so /root/venv, the unit, the live build's settings and the running training stay as they
    were. (Before, the live link switched first and verify failed after.)"""
    site = deployed
    built = site.deploy("torch_variant=cu128")  # cu128 built and verified, then back to cu130
    assert built.rc == 0, built.output[-4000:]
    back = site.deploy()
    assert back.rc == 0, back.output[-4000:]
    init = "/root/venvs/torch-2.11.0-cu128/lib/python3*/site-packages/torch/__init__.py"
    damage = f'for f in {init}; do echo \'raise ImportError("damaged")\' > "$f"; done'
    assert site.ct("sh", "-c", damage).returncode == 0
    live = site.ct("readlink", "-f", "/root/venv").stdout.strip()
    kept = {
        path: site.ct("cat", path).stdout
        for path in ("/etc/systemd/system/dflash-train.service", "/root/venv/.pvegpu-train.env")
    }
    running = (show(site, "MainPID", UNIT), show(site, "InvocationID", UNIT))

    failed = site.deploy("torch_variant=cu128")
    assert failed.rc != 0
    assert "import torch works in /root/venvs/torch-2.11.0-cu128" in failed.output, failed.output[
        -4000:
    ]
    assert site.ct("readlink", "-f", "/root/venv").stdout.strip() == live
    assert live.startswith("/root/venvs/torch-2.11.0-cu130.b")
    assert {path: site.ct("cat", path).stdout for path in kept} == kept
    assert (show(site, "MainPID", UNIT), show(site, "InvocationID", UNIT)) == running
    assert site.deploy().changed == 0  # the live variant stays converged

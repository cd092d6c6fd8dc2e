"""What a user sees is true, on one shared simulated node: the version on the run's first pvegpu
line; the closing line of each state (converged and verified, not verified because a container
was left out or its verification failed, refused by the settings or the preflight, a restart
pending, changes waiting for the running training) with its exit status; a bad setting as one
line, not a crash; the data dir refused where the user did not mean it; the preview's diffs of
the node's boot units, the training unit and `pct set`; and a preview that takes no deploy lock.
"""

from __future__ import annotations

import re
import subprocess
import sys
from importlib.metadata import version

import pytest

from sim.__main__ import seed_training_code, site_data, site_env
from sim.index import PackageIndex
from sim.node import SimNode
from tests.e2e.conftest import ROOT, Run, Site
from tests.e2e.test_deploy_safety import lock_held_by_test

NODE = "127.0.0.1"


@pytest.fixture(scope="module")
def shared(tmp_path_factory, wheelhouse):
    from sim.fixtures import check_host

    check_host()
    index = PackageIndex(wheelhouse.torch_index(), wheelhouse.pypi())
    index.start()
    try:
        with SimNode(tmp_path_factory.mktemp("sees") / "node") as node:
            seed_training_code(node)
            locks = tmp_path_factory.mktemp("sees-locks")
            data = [*site_data(index, locks), "--data", "training_requirements=[]"]
            yield Site(node, index, data)
    finally:
        index.stop()


def closing(run: Run) -> str:
    """The node's closing line: the run's last ``pvegpu: <node>: `` line, which is its last."""
    lines = [ln for ln in run.output.splitlines() if ln.startswith(f"pvegpu: {NODE}: ")]
    assert len(lines) == 1, run.output[-4000:]
    assert run.stderr.rstrip().endswith(lines[0]), run.output[-4000:]
    return lines[0]


def shown(run: Run) -> str:
    """The run's output without colors."""
    return re.sub(r"\x1b\[[0-9;]*m", "", run.output)


def test_a_first_preview_shows_the_boot_units_it_creates(shared):
    before = shared.node.tree_digest()
    run = shared.pyinfra("deploy.py", as_json=False, extra=("--dry",), yes=False)
    assert run.rc == 0, run.output[-4000:]
    out = shown(run)
    first = next(ln for ln in out.splitlines() if "pvegpu" in ln)
    assert first == f"--> pvegpu {version('pvegpu')}", out[:2000]
    assert "creates /etc/modules-load.d/nvidia.conf:" in out, out[-6000:]
    assert "+++ /etc/modules-load.d/nvidia.conf (new)" in out and "\n      +nvidia_uvm\n" in out
    assert "creates /etc/systemd/system/nvidia-uvm-init.service:" in out
    assert shared.node.tree_digest() == before


def test_each_closing_line_and_its_exit_status(shared):
    site = shared
    first = site.deploy()
    assert first.rc == 0, first.output[-4000:]
    assert closing(first) == f"pvegpu: {NODE}: converged and verified"

    # the node alone: its container was not verified in this run
    node_only = site.deploy(extra=("--limit", NODE))
    assert node_only.rc != 0, node_only.output[-4000:]
    assert closing(node_only).startswith(
        f"pvegpu: {NODE}: converged, not verified: CT 200 was not in this run (--limit or "
        "--exclude left it out)"
    )
    ct_only = site.deploy(extra=("--limit", f"@pct/{NODE}/200"))
    assert ct_only.rc == 0, ct_only.output[-4000:]
    assert closing(ct_only) == (
        f"pvegpu: {NODE}: CT 200 converged and verified; the node's own stage was not in this "
        "run (--limit or --exclude)"
    )

    # a verification that fails: more free memory than the GPUs have
    failed = site.deploy("min_free_gpu_mib=999999")
    assert failed.rc != 0
    assert closing(failed).startswith(
        f"pvegpu: {NODE}: not verified: the verification of CT 200 failed"
    ), failed.output[-4000:]


def test_a_bad_setting_is_one_line_and_refuses_the_node(shared):
    site = shared
    before = site.node.tree_digest()
    run = site.deploy("ct_memory_mib=1")
    assert run.rc != 0
    line = "ct_memory_mib=1 is outside pct's range >= 16: set a value in range"
    # once, although the node and its container both have it; no place in pvegpu's code
    assert run.output.count(line) == 1, run.output[-4000:]
    assert "pyinfra error" not in run.output and "Traceback" not in run.output
    assert not re.search(r"\.py line \d+", run.output), run.output[-4000:]
    assert closing(run) == (
        f"pvegpu: {NODE}: refused, nothing changed there: bad settings (1 problem above)"
    )
    assert site.node.tree_digest() == before


def test_the_data_dir_is_refused_where_the_user_did_not_mean_it(shared):
    site = shared
    before = site.node.tree_digest()
    root_fs = site.deploy("data_dir_node=/var/lib/dflash")
    assert root_fs.rc != 0
    assert closing(root_fs).startswith(
        f"pvegpu: {NODE}: refused, nothing changed there: {NODE}: data_dir_node=/var/lib/dflash "
        "would be on the node's root filesystem"
    ), root_fs.output[-4000:]
    # in the preview a refused node is a failure, not a change to make
    preview = site.pyinfra(
        "deploy.py", "data_dir_node=/var/lib/dflash", yes=False, as_json=False, extra=("--dry",)
    )
    out = shown(preview)
    assert "preflight failed: nothing will be changed here" in out, out[-4000:]
    check = next(ln for ln in out.splitlines() if "Preflight of this host's node passed" in ln)
    assert check.split()[-2:] == ["-", "-"], check
    no_parent = site.deploy("data_dir_node=/pool/dflash")
    assert no_parent.rc != 0
    assert (
        f"{NODE}: data_dir_node=/pool/dflash: its parent /pool does not exist on the node"
        in no_parent.output
    ), no_parent.output[-4000:]
    # said explicitly: that line is gone (the training code is still elsewhere, refused as such)
    allowed = site.pyinfra(
        "deploy.py",
        "data_dir_node=/var/lib/dflash",
        "data_dir_on_root_fs=true",
        yes=False,
        extra=("--dry",),
    )
    assert "/var/lib/dflash would be on the node's root filesystem" not in allowed.output
    assert "training_script=/data/dflash/train.py is missing" in allowed.output
    assert site.node.tree_digest() == before


def preview_and_go_on(site, *data: str) -> Run:
    """deploy.py without -y, answering pyinfra's prompt with Enter (go on)."""
    argv = [sys.executable, "-m", "pyinfra", "inventory.py", "deploy.py", *site.base_data]
    for kv in data:
        argv += ["--data", kv]
    p = subprocess.run(
        argv,
        cwd=ROOT,
        env=site_env(site.node),
        input="\n",
        capture_output=True,
        text=True,
        timeout=900,
    )
    return Run(p.returncode, p.stdout, p.stderr)


def test_a_preview_takes_no_lock_and_changes_take_it_when_they_start(shared):
    site = shared
    before = site.node.tree_digest()
    with lock_held_by_test(site.node):
        # --dry reads beside the holder: a preview never waits for a deploy (wait 0: it would be
        # refused at once if it took the lock)
        dry = site.pyinfra(
            "deploy.py", "ct_cores=64", "deploy_lock_wait_s=0", yes=False, extra=("--dry",)
        )
        assert dry.rc == 0, dry.output[-4000:]
        assert "another deploy holds the node" not in dry.output
        assert "cores: 32 -> 64" in shown(dry), dry.output[-4000:]
        # going on after the preview: the lock is taken when changes start, and refused there
        went_on = preview_and_go_on(site, "ct_cores=64", "deploy_lock_wait_s=0")
        assert went_on.rc != 0
        out = shown(went_on)
        assert out.index("cores: 32 -> 64") < out.index("Beginning operation run")
        assert "another deploy holds the node (pid " in out, out[-4000:]
        assert closing(went_on).startswith(
            f"pvegpu: {NODE}: refused, nothing changed there: {NODE}: another deploy holds"
        )
    assert site.node.tree_digest() == before


def test_the_preview_diffs_the_unit_and_a_change_waits_or_is_pending(shared):
    site = shared
    preview = site.pyinfra(
        "deploy.py", "training_restart_delay_s=31", yes=False, as_json=False, extra=("--dry",)
    )
    out = shown(preview)
    assert "modifies /etc/systemd/system/dflash-train.service:" in out, out[-4000:]
    assert "\n      -RestartSec=30s\n      +RestartSec=31s\n" in out, out[-4000:]

    # the unit changed under the running training: converged and verified, restart pending
    pending = site.deploy("training_restart_delay_s=31")
    assert pending.rc == 0, pending.output[-4000:]
    assert closing(pending) == (
        f"pvegpu: {NODE}: converged and verified; the training's restart is pending (CT 200: "
        "unit file changed): rerun with --data restart_training=true to restart it"
    )
    # lowering the cores under the running training waits for it
    waits = site.deploy("training_restart_delay_s=31", "ct_cores=16")
    assert waits.rc == 0, waits.output[-4000:]
    assert re.fullmatch(
        rf"pvegpu: {NODE}: converged; 1 changes? waits? for the running training \(pid \d+, "
        r"under dflash-train.service\): rerun with --data restart_training=true to apply them",
        closing(waits),
    ), waits.output[-4000:]
    assert "cores: 32" in site.node.read("/etc/pve/lxc/200.conf")

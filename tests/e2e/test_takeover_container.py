"""What is not ours is not taken without asking, and consent never cuts pvegpu's own unit's
checkpoint. On one node: (g) a CT 200 made by hand that runs another service is left exactly as it
is by a plain deploy (its plan shown, nothing changed), then adopted with --data adopt=true;
(e) with pvegpu's unit training (a checkpoint of 40 s on SIGTERM), a passthrough restart and a
rebuild=container with consent stop the unit first under its own TimeoutStopSec and shut the
container down without --forceStop: its checkpoint is written; (h) a one-run decision left in a
group_data file is refused before any change.
"""

from __future__ import annotations

import pytest

from tests.e2e.conftest import systemd_site
from tests.e2e.test_adopt import CKPT_NODE, ckpt_files, wait_for

UNIT = "dflash-train.service"
NOTES = """\
[Unit]
Description=a service the users keep on CT 200

[Service]
ExecStart=/bin/sleep infinity

[Install]
WantedBy=multi-user.target
"""


@pytest.fixture(scope="module")
def site(wheelhouse, tmp_path_factory):
    with systemd_site(wheelhouse, tmp_path_factory.mktemp("takeover-ct")) as shared:
        yield shared


def unit_trainer(site) -> int:
    out = site.ct("systemctl", "show", "-p", "MainPID", "--value", UNIT).stdout.strip()
    return int(out or 0)


def ct_state(site) -> dict:
    return {
        "config": site.node.read("/etc/pve/lxc/200.conf"),
        "tree": {k: v for k, v in site.node.tree_digest().items() if k.startswith("ct/200/")},
        "notes": site.ct("systemctl", "show", "-p", "MainPID", "--value", "notes.service").stdout,
    }


def test_g_a_container_that_runs_another_service_is_adopted_only_with_consent(site):
    node = site.node
    tpl = node.cfg["template_name"]
    node.run(
        ["pct", "create", "200", f"local:vztmpl/{tpl}", "--rootfs", "local-lvm:32", "--cores", "4"],
        check=True,
    )
    node.run(["pct", "start", "200"], check=True)
    wait_for("CT 200's exec", lambda: site.ct("true").returncode == 0)
    node.ct_run(
        200, ["sh", "-c", "cat > /etc/systemd/system/notes.service"], input=NOTES, check=True
    )
    site.ct("systemctl", "daemon-reload")
    assert site.ct("systemctl", "enable", "--now", "notes.service").returncode == 0
    before = ct_state(site)
    preview = site.deploy(yes=False)
    plain = site.deploy()
    assert plain.rc != 0, plain.output[-6000:]
    for run in (preview, plain):
        for line in (
            "CT 200 was not created by pvegpu (no 'pvegpu' tag: made by hand or by another tool)",
            "CT 200 cores: 4 -> 32: with --data adopt=true",
            "uv under /opt/pvegpu (pvegpu's own directory in CT 200): with --data adopt=true",
            "CT 200 gets the tag 'pvegpu' (pvegpu's from then on): with --data adopt=true",
            "run again with --data adopt=true to adopt it",
        ):
            assert line in run.output, run.output[-6000:]
    assert ct_state(site) == before
    adopted = site.deploy("adopt=true")
    assert adopted.rc == 0, adopted.output[-6000:]
    assert "tags: pvegpu" in node.read("/etc/pve/lxc/200.conf")
    # the passthrough needed the restart the plan named; the users' service came back with it
    assert "CT 200 restarts:" in plain.output
    assert site.ct("systemctl", "is-active", "notes.service").stdout.strip() == "active"
    again = site.deploy()
    assert again.rc == 0 and again.changed == 0, again.output[-6000:]


def test_e_a_passthrough_restart_with_consent_lets_the_unit_checkpoint(site):
    trainer = wait_for("the unit's trainer", lambda: unit_trainer(site))
    site.node.run(["sh", "-c", f"echo 40 > {CKPT_NODE}/checkpoint_s"], check=True)
    site.node.configure(uvm_major=site.node.cfg["uvm_major"] + 1)  # the container's nodes go stale
    run = site.deploy("restart_training=true", "progress_interval_s=5")
    assert run.rc == 0, run.output[-6000:]
    assert f"checkpoint-{trainer}" in ckpt_files(site, "checkpoint"), run.output[-6000:]
    assert "waiting for CT 200 to shut down (its training unit stopped first)" in run.output
    calls = [c["argv"] for c in site.node.pct_calls()]
    assert not any("--forceStop" in a or a[:1] == ["stop"] for a in calls), calls
    assert wait_for("the restarted trainer", lambda: unit_trainer(site)) != trainer


def test_e_rebuild_container_with_consent_lets_the_unit_checkpoint(site):
    trainer = wait_for("the unit's trainer", lambda: unit_trainer(site))
    site.node.run(["sh", "-c", f"echo 40 > {CKPT_NODE}/checkpoint_s"], check=True)
    preview = site.deploy("rebuild=container", "restart_training=true", yes=False)
    assert unit_trainer(site) == trainer, preview.output[-6000:]
    run = site.deploy("rebuild=container", "restart_training=true", "progress_interval_s=5")
    assert run.rc == 0, run.output[-6000:]
    assert f"checkpoint-{trainer}" in ckpt_files(site, "checkpoint"), run.output[-6000:]
    calls = [c["argv"] for c in site.node.pct_calls()]
    assert not any("--forceStop" in a or a[:1] == ["stop"] for a in calls), calls
    assert "tags: pvegpu" in site.node.read("/etc/pve/lxc/200.conf")
    site.node.run(["rm", "-f", f"{CKPT_NODE}/checkpoint_s"])


def test_h_a_one_run_decision_in_group_data_is_refused(site, tmp_path):
    (tmp_path / "all.py").write_text('rebuild = "container"\n')
    # nothing may write meanwhile: the unit's trainer records its starts in the checkpoint dir
    site.ct("systemctl", "disable", "--now", "dflash-train.service")
    before = site.node.tree_digest()
    run = site.pyinfra("deploy.py", extra=["--group-data", str(tmp_path)])
    assert run.rc != 0
    assert (
        "rebuild=container (group_data/all.py): a one-run decision, taken from --data only"
        in run.output
    ), run.output[-4000:]
    assert site.node.tree_digest() == before

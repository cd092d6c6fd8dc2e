"""Issue 26: a mistyped setting is an error, not a silent default. A key no one reads, on the
command line, in a group_data file or in the fleet file, stops deploy.py and verify.py before any
command runs on the node, naming where it came from and the setting it most likely means;
pyinfra's own keys and the user's declared own keys (x_ prefix, extra_data_keys) pass."""

from __future__ import annotations

import os
import subprocess
import sys

import yaml
from test_fleet_run import ROOT, fleet_file
from test_speed import counted

from sim.__main__ import site_data

TYPO = "torch_varient (--data): not a setting; did you mean torch_variant?"


def live_build(site) -> str:
    return site.ct("readlink", "/root/venv").stdout.strip()


def assert_refused_before_any_command(site, run, container, execs, other, node, line, before):
    assert run.rc != 0, run.output[-3000:]
    assert line in run.output, run.output[-3000:]
    assert "Traceback" not in run.output, run.output[-3000:]
    assert (container, execs, other, node) == ([], [], [], []), run.output[-3000:]
    assert site.node.tree_digest() == before


def test_a_typo_on_a_converged_node_fails_with_the_suggestion_and_changes_nothing(
    deployed, tmp_path
):
    site = deployed
    build, before = live_build(site), site.node.tree_digest()
    assert build.endswith("cu130"), build

    # the issue's own example: the swap the user meant does not silently not happen
    for script in ("deploy.py", "verify.py"):
        found = counted(site, script, "torch_varient=cu128")
        assert_refused_before_any_command(site, *found, TYPO, before)
        assert "did you mean torch_variant?" in found[0].stderr
    assert live_build(site) == build

    # a typo in a group_data file (here one more directory of them, as --group-data loads)
    extra = tmp_path / "group_data"
    extra.mkdir()
    (extra / "training_cts.py").write_text("restart_trainig = True\n")
    site.node.clear_pct_log()
    run = site.pyinfra("deploy.py", extra=("--debug", "--group-data", str(extra)))
    line = (
        "restart_trainig (group_data/training_cts.py): not a setting; did you mean "
        "restart_training?"
    )
    assert run.rc != 0 and line in run.output, run.output[-3000:]
    assert "Running command on" not in run.stderr, run.stderr[-3000:]
    assert site.node.pct_calls() == [] and site.node.tree_digest() == before

    # pyinfra's own keys and the user's own keys pass: a converged no-op
    run = site.deploy(
        "ssh_connect_retries=1", "x_team=vision", "my_note=hi", "extra_data_keys=my_note"
    )
    assert run.rc == 0, run.output[-3000:]
    assert run.changed == 0, run.output[-3000:]


def test_a_typo_in_the_fleet_file_is_refused_before_any_command(site, tmp_path):
    path = fleet_file(tmp_path / "fleet.yaml", site.node)
    doc = yaml.safe_load(path.read_text())
    doc["nodes"][0]["torch_varient"] = "cu128"
    path.write_text(yaml.safe_dump(doc))
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PVE_", "CT_ID"))}
    env["PVE_FLEET"] = str(path)
    before = site.node.tree_digest()
    site.node.clear_pct_log()
    p = subprocess.run(
        [
            sys.executable,
            "-m",
            "pyinfra",
            "--debug",
            "-y",
            "inventory.py",
            "deploy.py",
            *site_data(site.index, tmp_path / "locks"),
            "--data",
            "training_requirements=[]",
        ],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=900,
        stdin=subprocess.DEVNULL,
    )
    out = p.stdout + p.stderr
    line = (
        f"{site.node.host}, @pct/{site.node.host}/200: torch_varient (the fleet file or "
        "inventory): not a setting; did you mean torch_variant?"
    )
    assert p.returncode != 0 and line in out, out[-3000:]
    assert "Running command on" not in p.stderr, p.stderr[-3000:]
    assert site.node.pct_calls() == [] and site.node.tree_digest() == before

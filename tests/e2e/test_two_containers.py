"""Issue 22: two training containers on one node, each on its own GPUs (CT 200 on GPUs 0-3, CT
201 on 4-7: the fleet file's `containers:` entries), through the lifecycle: a GPU in both
containers' training sets is refused before any change; deploy; a no-op with zero changes whose
one node read folds both containers' reads (no `pct exec` of the second container's own); verify;
a swap back with one `pct exec` per container besides the read.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import yaml

from sim.__main__ import seed_training_code, site_data
from sim.node import SimNode
from tests.e2e import test_speed as speed  # a module: its tests are not collected

ROOT = Path(__file__).resolve().parents[2]
GPUS = {200: ([0, 1, 2], [3]), 201: ([4, 5, 6], [7])}


class FleetSite:
    """A one-node fleet file with two containers, run like test_speed's ``site``."""

    def __init__(self, node: SimNode, data: list[str], fleet: Path):
        self.node, self.data, self.fleet = node, data, fleet

    def write(self, gpus) -> None:
        containers = [
            {"vmid": v, "target_gpus": t, "drafter_gpus": d} for v, (t, d) in gpus.items()
        ]
        self.fleet.write_text(
            yaml.safe_dump(
                {
                    "nodes": [
                        {
                            "address": self.node.host,
                            "ssh_port": self.node.port,
                            "ssh_key": self.node.key_path,
                            "ssh_known_hosts_file": self.node.known_hosts_path,
                            "containers": containers,
                        }
                    ]
                }
            )
        )

    def pyinfra(self, script="deploy.py", *data, extra=()):
        env = {k: v for k, v in os.environ.items() if not k.startswith(("PVE_", "CT_ID"))}
        env["PVE_FLEET"] = str(self.fleet)
        argv = [
            sys.executable,
            "-m",
            "pyinfra",
            *extra,
            "inventory.py",
            script,
            "-y",
            "--json",
            *self.data,
            *(a for kv in data for a in ("--data", kv)),
        ]
        p = subprocess.run(
            argv,
            cwd=ROOT,
            env=env,
            capture_output=True,
            text=True,
            timeout=1800,
            stdin=subprocess.DEVNULL,
        )
        return Result(p.returncode, p.stdout, p.stderr)


class Result:
    def __init__(self, rc, stdout, stderr):
        self.rc, self.stdout, self.stderr = rc, stdout, stderr
        self.output = stdout + stderr

    @property
    def changed(self) -> int:
        import json

        return json.loads(self.stdout)["results"]["totals"]["success"]


def test_two_containers_on_one_node_deploy_no_op_and_verify(tmp_path, package_index):
    with SimNode(tmp_path / "node") as node:
        seed_training_code(node)
        site = FleetSite(
            node,
            [*site_data(package_index, tmp_path / "locks"), "--data", "training_requirements=[]"],
            tmp_path / "fleet.yaml",
        )

        # GPU 3 in both containers' training sets: one line naming both, before any change
        site.write({200: GPUS[200], 201: ([4, 5, 6], [3])})
        before = node.tree_digest()
        refused = site.pyinfra()
        assert refused.rc != 0
        assert (
            "127.0.0.1: GPU 3 is a training GPU of both CT 200 (drafter_gpus) and CT 201 "
            "(drafter_gpus): give each container of a node its own GPUs"
        ) in refused.output
        assert node.tree_digest() == before

        site.write(GPUS)
        first = site.pyinfra()
        assert first.rc == 0, first.output[-4000:]
        for vmid, (targets, drafters) in GPUS.items():
            unit = node.ct_run(vmid, ["systemctl", "is-active", "dflash-train.service"])
            assert unit.stdout.strip() == "active", (vmid, unit.stdout, unit.stderr)
            text = node.ct_run(vmid, ["cat", "/etc/systemd/system/dflash-train.service"]).stdout
            visible = ",".join(str(g) for g in targets + drafters)
            assert f"CUDA_VISIBLE_DEVICES={visible}" in text, (vmid, text)

        # the no-op: zero changes; one node command whose one pct exec into each container also
        # runs that container's python-env state and verification reads (the second container's
        # too: no fixed budget that only the first fits); one SSH handshake for the node
        run, container, execs, other, commands = speed.counted(site, "deploy.py")
        why = speed.report("two-container no-op", container, execs, other, commands)
        assert run.rc == 0, run.output[-4000:]
        assert run.changed == 0, run.output[-4000:]
        assert container == [], why
        assert sorted(a[1] for a in execs) == ["200", "201"], why
        assert other == [] and len(commands) == 1, why
        assert speed.handshakes(run) == [node.host], run.stderr[-2000:]

        # verify.py: one node command, whose one pct exec into each container runs its
        # verification read (no container command of its own)
        verify, container, execs, other, commands = speed.counted(site, "verify.py")
        why = speed.report("two-container verify", container, execs, other, commands)
        assert verify.rc == 0, verify.output[-4000:]
        assert re.search(r"CT 201|@pct/127\.0\.0\.1/201", verify.output), verify.output[-2000:]
        assert container == [] and sorted(a[1] for a in execs) == ["200", "201"], why
        assert other == [] and len(commands) == 1, why

        # a swap back: one node read, then each container's link flip; neither container's
        # flip makes the other read its state again (a sibling changes only its own container);
        # each flip is made by a fresh read of its container, right after its check there (a
        # training started meanwhile: pvegpu.run.gated), in that read's one pct exec
        assert site.pyinfra("deploy.py", "torch_variant=cu128").rc == 0
        run, container, execs, other, commands = speed.counted(site, "deploy.py")
        why = speed.report("two-container swap back", container, execs, other, commands)
        assert run.rc == 0, run.output[-4000:]
        assert container == [] and sorted(a[1] for a in execs) == ["200", "200", "201", "201"], why
        assert len(commands) == 3, why

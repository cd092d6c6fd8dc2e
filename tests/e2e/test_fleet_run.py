"""A fleet in one run (issue 11 item 10): two simulated nodes, one container each, deployed side by
side; a node that fails its preflight (an old driver) stops only itself, and the run ends with one
summary line per node saying which failed and why."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import yaml

from sim.__main__ import seed_training_code, site_data
from sim.node import SimNode

ROOT = Path(__file__).resolve().parents[2]


def fleet_file(path: Path, *nodes: SimNode) -> Path:
    path.write_text(
        yaml.safe_dump(
            {
                "nodes": [
                    {
                        "address": n.host,
                        "ssh_port": n.port,
                        "ssh_key": n.key_path,
                        "ssh_known_hosts_file": n.known_hosts_path,
                        "containers": [200],
                    }
                    for n in nodes
                ]
            }
        )
    )
    return path


def test_a_failing_node_does_not_stop_the_other(tmp_path, package_index):
    with (
        SimNode(tmp_path / "good") as good,
        SimNode(tmp_path / "old", host="127.0.0.2", driver_version="570.86.10") as old,
    ):
        for node in (good, old):
            seed_training_code(node)
        env = {k: v for k, v in os.environ.items() if not k.startswith(("PVE_", "CT_ID"))}
        env["PVE_FLEET"] = str(fleet_file(tmp_path / "fleet.yaml", good, old))
        before = old.tree_digest()
        run = subprocess.run(
            [
                sys.executable,
                "-m",
                "pyinfra",
                "-y",
                "inventory.py",
                "deploy.py",
                *site_data(package_index, tmp_path / "locks"),
                "--data",
                "training_requirements=[]",
            ],
            cwd=ROOT,
            env=env,
            capture_output=True,
            text=True,
            timeout=1800,
            stdin=subprocess.DEVNULL,
        )
        output = run.stdout + run.stderr
        assert run.returncode != 0, output[-4000:]
        # the old-driver node: refused before any change, named with its reason
        assert old.tree_digest() == before
        summary = [line for line in output.splitlines() if line.startswith("pvegpu: 127.0.0.")]
        assert summary == [
            "pvegpu: 127.0.0.1: converged and verified",
            "pvegpu: 127.0.0.2: refused, nothing changed there: 127.0.0.2: driver for cu130: "
            "expected >= 580.65.06 (CUDA 13.0); found 570.86.10 on node 127.0.0.2; fix: upgrade "
            "the node's NVIDIA driver to >= 580.65.06 (then deploy.py matches the container), or "
            "set torch_variant to a build the driver supports",
        ], output[-4000:]
        # the good node went all the way
        torch = good.ct_run(
            200, ["/root/venv/bin/python", "-c", "import torch; print(torch.__version__)"]
        )
        assert torch.stdout.strip() == "2.11.0+cu130", torch.stderr
        unit = good.ct_run(200, ["systemctl", "is-active", "dflash-train.service"])
        assert unit.stdout.strip() == "active"

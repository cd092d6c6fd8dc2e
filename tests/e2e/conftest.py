"""End-to-end fixtures: a simulated Proxmox node over real SSH, loopback indexes, and a runner for
the real pyinfra CLI against them."""

from __future__ import annotations

import json
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest
from sim.__main__ import seed_training_code, site_data, site_env
from sim.fixtures import check_host
from sim.node import SimNode

ROOT = Path(__file__).resolve().parents[2]


@dataclass
class Run:
    rc: int
    stdout: str
    stderr: str

    @property
    def output(self) -> str:
        return self.stdout + self.stderr

    @property
    def json(self) -> dict:
        return json.loads(self.stdout)

    @property
    def changed(self) -> int:
        return self.json["results"]["totals"]["success"]


@dataclass
class Site:
    node: SimNode
    index: object
    base_data: list[str]

    def pyinfra(self, script="deploy.py", *data: str, yes=True, as_json=True, extra=(), timeout=900) -> Run:
        """Run `pyinfra inventory.py <script>` with --data overrides (key=value strings)."""
        argv = [sys.executable, "-m", "pyinfra", *extra, "inventory.py", script]
        if yes:
            argv.append("-y")
        if as_json:
            argv.append("--json")
        argv += self.base_data
        for kv in data:
            argv += ["--data", kv]
        p = subprocess.run(argv, cwd=ROOT, env=site_env(self.node), capture_output=True, text=True,
                           timeout=timeout, stdin=subprocess.DEVNULL)
        return Run(p.returncode, p.stdout, p.stderr)

    def deploy(self, *data: str, **kw) -> Run:
        return self.pyinfra("deploy.py", *data, **kw)

    def ct(self, *argv: str, vmid=200):
        return self.node.ct_run(vmid, list(argv))


@pytest.fixture
def node_options():
    """Override in a test module (or parametrize) to shape the simulated node."""
    return {}


@pytest.fixture
def site(tmp_path, package_index, node_options):
    check_host(node_options.get("ct_init"))
    with SimNode(tmp_path / "node", **node_options) as node:
        seed_training_code(node)
        # locks made on first use go to a scratch locks_dir, never the repo's locks/
        data = site_data(package_index, tmp_path / "locks")
        yield Site(node, package_index, [*data, "--data", "training_requirements=[]"])


@pytest.fixture
def deployed(site):
    """A site after one successful full deploy."""
    run = site.deploy()
    assert run.rc == 0, run.output[-4000:]
    return site

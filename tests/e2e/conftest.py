"""End-to-end fixtures: a simulated Proxmox node over real SSH, loopback indexes, and a runner for
the real pyinfra CLI against them."""

from __future__ import annotations

import json
import queue
import re
import subprocess
import sys
import threading
from contextlib import contextmanager
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

    def pyinfra(
        self, script="deploy.py", *data: str, yes=True, as_json=True, extra=(), timeout=900
    ) -> Run:
        """Run `pyinfra inventory.py <script>` with --data overrides (key=value strings)."""
        argv = [sys.executable, "-m", "pyinfra", *extra, "inventory.py", script]
        if yes:
            argv.append("-y")
        if as_json:
            argv.append("--json")
        argv += self.base_data
        for kv in data:
            argv += ["--data", kv]
        p = subprocess.run(
            argv,
            cwd=ROOT,
            env=site_env(self.node),
            capture_output=True,
            text=True,
            timeout=timeout,
            stdin=subprocess.DEVNULL,
        )
        return Run(p.returncode, p.stdout, p.stderr)

    def deploy(self, *data: str, **kw) -> Run:
        return self.pyinfra("deploy.py", *data, **kw)

    @contextmanager
    def deploy_streaming(self, *data: str):
        """Start `pyinfra inventory.py deploy.py -y --json` and read its output as it arrives
        (a test can act while the deploy runs); the process is ended on the way out if it is
        still running (a failed test)."""
        argv = [
            sys.executable,
            "-m",
            "pyinfra",
            "inventory.py",
            "deploy.py",
            "-y",
            "--json",
            *self.base_data,
        ]
        for kv in data:
            argv += ["--data", kv]
        p = subprocess.Popen(
            argv,
            cwd=ROOT,
            env=site_env(self.node),
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            stdin=subprocess.DEVNULL,
        )
        stream = Streaming(p)
        try:
            yield stream
        finally:
            if p.poll() is None:
                p.kill()
            p.wait()
            stream.join()

    def ct(self, *argv: str, vmid=200):
        return self.node.ct_run(vmid, list(argv))


class Streaming:
    """A running pyinfra's output, line by line as it arrives (stderr: pyinfra's log lines)."""

    def __init__(self, process: subprocess.Popen):
        self.process = process
        self.lines: queue.Queue[str | None] = queue.Queue()
        self.stderr: list[str] = []
        self.stdout: list[str] = []
        self._readers = [
            threading.Thread(target=self._read, args=(process.stderr, self.stderr), daemon=True),
            threading.Thread(target=self._read, args=(process.stdout, self.stdout), daemon=True),
        ]
        for reader in self._readers:
            reader.start()

    def _read(self, pipe, into: list[str]) -> None:
        for line in pipe:
            into.append(line)
            if into is self.stderr:
                self.lines.put(line)
        if into is self.stderr:
            self.lines.put(None)

    def wait_for(self, what: str, timeout: float = 600, pattern: str = "") -> str:
        """The first line (from now on) containing ``what`` (and matching the regex
        ``pattern``), read while the deploy runs; fails when the deploy ends first (a bound on
        waiting, never an assertion on time)."""
        while True:
            try:
                line = self.lines.get(timeout=timeout)
            except queue.Empty:
                raise AssertionError(f"no line with {what!r} in {timeout} s") from None
            if line is None:
                tail = "".join(self.stderr)[-4000:]
                raise AssertionError(f"the deploy ended without a line with {what!r}:\n{tail}")
            if what in line and re.search(pattern, line):
                return line

    def join(self) -> None:
        for reader in self._readers:
            reader.join()

    def finish(self, timeout: float = 900) -> Run:
        """Wait for the deploy to end: -> its Run (all of its output)."""
        rc = self.process.wait(timeout=timeout)
        self.join()
        return Run(rc, "".join(self.stdout), "".join(self.stderr))


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


@contextmanager
def systemd_site(wheelhouse, tmp: Path, trainer: bool = True, **node_options):
    """A site whose CT 200 boots real systemd (a module's shared node): the loopback indexes,
    the users' training code and, with ``trainer``, the stand-in trainer as train.py (it records
    each start and checkpoints on SIGTERM: sim/trainer.py). Both servers stopped on the way out."""
    from sim.fixtures import skip_without_real_systemd
    from sim.index import PackageIndex
    from sim.trainer import TRAINER

    skip_without_real_systemd()
    check_host("systemd")
    with (
        PackageIndex(wheelhouse.torch_index(), wheelhouse.pypi()) as index,
        SimNode(tmp / "node", ct_init="systemd", **node_options) as node,
    ):
        seed_training_code(node)
        if trainer:
            train = "/tank/dflash/dflash/train.py"  # /data/dflash/train.py in CT 200
            node.run(["sh", "-c", f"cat > {train}"], input=TRAINER, check=True)
        yield Site(
            node, index, [*site_data(index, tmp / "locks"), "--data", "training_requirements=[]"]
        )

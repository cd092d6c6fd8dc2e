import os
from pathlib import Path

import pytest

pytest_plugins = ["sim.fixtures_index", "sim.fixtures_apt"]

LOCKS = Path(__file__).resolve().parents[1] / "locks"


def _locks_snapshot() -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in sorted(LOCKS.iterdir()) if p.is_file()}


@pytest.fixture(scope="session", autouse=True)
def repo_locks_untouched():
    """Deploys make locks on first use: every test must point locks_dir at a scratch directory,
    never at the repo's locks/ (a lock made against a loopback index must not land there)."""
    before = _locks_snapshot()
    yield
    assert _locks_snapshot() == before, "a test wrote into the repo's locks/: give it a locks_dir"


def _left_behind(base: str) -> list[str]:
    """What a stopped SimNode must not leave: its cgroup directories (pve-sim-<this pid>-*), a
    mount under this run's temp dir, a process whose command line names it (a node's init)."""
    from sim.node import _own_cgroup, cgroup_hierarchies

    left = []
    for h in cgroup_hierarchies():
        own = h / _own_cgroup(h).lstrip("/")
        left += [str(d) for d in own.glob(f"pve-sim-{os.getpid()}-*")]
    left += [line for line in Path("/proc/self/mountinfo").read_text().splitlines() if base in line]
    for proc in Path("/proc").iterdir():
        try:
            cmdline = (proc / "cmdline").read_bytes().replace(b"\0", b" ").decode()
        except (OSError, ValueError):
            continue
        if proc.name.isdigit() and base in cmdline:
            left.append(f"pid {proc.name}: {cmdline}")
    return left


@pytest.fixture(scope="session", autouse=True)
def nothing_left_behind(tmp_path_factory):
    """After the session: no simulated node of this run still running, mounted or in the cgroup
    trees (SimNode.stop() removes all three; a leak fails the run here)."""
    yield
    left = _left_behind(str(tmp_path_factory.getbasetemp()))
    assert not left, f"left behind by the simulated nodes: {left}"

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

"""pytest fixtures for the wheels and the loopback package index.

Use from a test module or a conftest:

    from sim.fixtures_index import wheelhouse, package_index  # noqa: F401

or ``pytest_plugins = ["sim.fixtures_index"]`` in the root conftest.py.

- ``wheelhouse`` (session): every double wheel, built once per session in a tmp dir, plus the
  real uv wheel (downloaded once into ``$PVE_SIM_WHEEL_CACHE`` or ``~/.cache/pvegpu-sim/wheels``).
- ``package_index`` (function): a started ``PackageIndex`` serving the wheelhouse (torch mirror:
  cu128, cu130; package mirror: unlabeled torch, transformers, sglang-junk, uv); always stopped.
"""

from __future__ import annotations

import pytest

from sim.index import PackageIndex
from sim.wheels import Wheelhouse, build_wheelhouse

__all__ = ["Wheelhouse", "build_wheelhouse", "package_index", "wheelhouse"]


@pytest.fixture(scope="session")
def wheelhouse(tmp_path_factory) -> Wheelhouse:
    return build_wheelhouse(tmp_path_factory.mktemp("wheelhouse"))


@pytest.fixture
def package_index(wheelhouse):
    index = PackageIndex(wheelhouse.torch_index(), wheelhouse.pypi())
    index.start()
    try:
        yield index
    finally:
        index.stop()

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

import importlib.metadata
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from sim.index import PackageIndex
from sim.wheels import UNLABELED, build_simple_wheels, build_torch_wheels, ensure_uv_wheel


@dataclass
class Wheelhouse:
    dir: Path
    torch: dict[str, Path]  # "cu128", "cu130", "unlabeled"
    simple: dict[str, Path]  # "transformers", "sglang-junk"
    uv: Path
    uv_version: str
    variants: tuple[str, ...] = field(default=("cu128", "cu130"))

    def torch_index(self) -> dict[str, list[Path]]:
        """The torch mirror's content: ``{variant: [torch-<v>+<variant> wheel]}``."""
        return {v: [self.torch[v]] for v in self.variants}

    def pypi(self) -> list[Path]:
        """The package mirror's content (PyPI-like: the unlabeled torch is the CUDA 13 build)."""
        return [self.torch[UNLABELED], *self.simple.values(), self.uv]


def build_wheelhouse(out_dir, uv_cache=None, variants=("cu128", "cu130")) -> Wheelhouse:
    out = Path(out_dir)
    uv_version = importlib.metadata.version("uv")
    uv = ensure_uv_wheel(uv_cache, uv_version)
    return Wheelhouse(
        dir=out,
        torch=build_torch_wheels(out, variants=variants),
        simple=build_simple_wheels(out),
        uv=uv,
        uv_version=uv_version,
        variants=tuple(variants),
    )


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

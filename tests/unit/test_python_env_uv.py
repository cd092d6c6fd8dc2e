"""The torch-variant traps, shown with the real uv against the loopback index, and defended by the
exact command lines the deploy runs (pvegpu.operations.python_env.{compile,sync}_argv).

The loopback index is like the real pair: ``<url>/whl/<variant>/`` serves ``torch-2.11.0+<variant>``,
``<url>/simple/`` (PyPI) serves the unlabeled ``torch-2.11.0``, which is the CUDA 13 build. Here
PyPI also gets a newer unlabeled ``torch-2.12.0`` and a package depending on ``torch>=2.11``.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest
import uv as uv_package

from pvegpu.locks import constraints, requirements_in
from pvegpu.operations.python_env import compile_argv, sync_argv
from pvegpu.settings import Settings, defaults
from pvegpu.venvs import drift
from sim.index import PackageIndex
from sim.wheels import build_torch_wheels, build_wheel

UV = uv_package.find_uv_bin()


@pytest.fixture
def index(wheelhouse, tmp_path):
    extra = tmp_path / "extra"
    needs = build_wheel("needs-torch", "1.0", {"needs_torch/__init__.py": ""}, extra,
                        requires=["torch>=2.11"])
    newer = build_torch_wheels(extra, version="2.12.0", variants=())["unlabeled"]
    with PackageIndex(wheelhouse.torch_index(), [*wheelhouse.pypi(), needs, newer]) as ix:
        yield ix


class Box:
    """A scratch dir with uv's cache, venvs and files, running uv with a clean environment."""

    def __init__(self, tmp_path, index):
        self.dir, self.index = tmp_path, index
        self.env = {k: v for k, v in os.environ.items() if not k.startswith(("UV_", "VIRTUAL_ENV"))}
        self.env.update(UV_CACHE_DIR=str(tmp_path / "cache"), UV_NO_PROGRESS="1",
                        UV_PYTHON_DOWNLOADS="never")

    def settings(self, variant, **over) -> Settings:
        return Settings.from_data({
            **defaults(), "torch_variant": variant, "training_requirements": [],
            "package_index_url": self.index.package_index_url,
            "torch_index_base": self.index.torch_index_base, **over,
        })

    def uv(self, *argv, check=True):
        p = subprocess.run([UV, *argv] if argv[0] != UV else list(argv), cwd=self.dir, env=self.env,
                           capture_output=True, text=True)
        if check:
            assert p.returncode == 0, p.stdout + p.stderr
        return p

    def venv(self, name):
        self.uv("venv", "--no-config", "--quiet", "--python", sys.executable, str(self.dir / name))
        return str(self.dir / name / "bin" / "python")

    def torch(self, python):
        out = subprocess.run([python, "-c", "import torch, json; print(json.dumps("
                              "[torch.__version__, torch.version.cuda]))"],
                             capture_output=True, text=True, env=self.env)
        return tuple(json.loads(out.stdout)) if out.returncode == 0 else None

    def installed(self, python):
        out = self.uv("pip", "list", "--python", python, "--format", "json").stdout
        return {p["name"]: p["version"] for p in json.loads(out)}

    def write(self, name, text):
        (self.dir / name).write_text(text)
        return str(self.dir / name)

    def lock(self, s: Settings, python, pins=None):
        """What the deploy does: compile the pins with hashes, for this interpreter."""
        inp = self.write(f"{s.torch_variant}.in", pins or requirements_in(s))
        cons = self.write(f"{s.torch_variant}.constraints", constraints(s))
        out = str(self.dir / f"{s.torch_variant}.lock")
        self.uv(*compile_argv(s, UV, python, inp, cons, out))
        return out, cons

    def sync(self, s, python, lock, cons, offline=False, check=True):
        return self.uv(*sync_argv(s, UV, python, lock, cons, offline=offline), check=check)


@pytest.fixture
def box(tmp_path, index):
    return Box(tmp_path, index)


def test_trap_unlabeled_pin_silently_installs_pypis_cuda13_build(box):
    py = box.venv("unlabeled")
    box.uv("pip", "install", "--no-config", "--python", py, "--index-url",
           box.index.package_index_url, "torch==2.11.0")
    assert box.torch(py) == ("2.11.0", "13.0")  # the trap: asked for "torch 2.11", got CUDA 13

    s = box.settings("cu128")
    py = box.venv("labeled")
    lock, cons = box.lock(s, py)
    box.sync(s, py, lock, cons)
    assert box.torch(py) == ("2.11.0+cu128", "12.8")
    assert "torch==2.11.0+cu128" in open(lock).read()


def test_trap_a_dependency_pulling_torch_from_pypi(box):
    s = box.settings("cu128")
    # the trap: unsafe-best-match lets PyPI's newer unlabeled torch satisfy "torch>=2.11"
    py = box.venv("unsafe")
    box.uv("pip", "install", "--no-config", "--python", py, "--index-url",
           box.index.package_index_url, "--extra-index-url", s.torch_index_url,
           "--index-strategy", "unsafe-best-match", "needs-torch==1.0")
    assert box.torch(py)[0] == "2.12.0"
    # the defence: full-label pin, constraint, first-index -> the dependency gets the cu128 build
    py = box.venv("ours")
    lock, cons = box.lock(s, py, pins="torch==2.11.0+cu128\nneeds-torch==1.0\n")
    box.sync(s, py, lock, cons)
    assert box.installed(py) == {"needs-torch": "1.0", "torch": "2.11.0+cu128"}
    # even the dependency alone, with the constraint, cannot pull another torch
    py = box.venv("dep-alone")
    lock, cons = box.lock(s, py, pins="needs-torch==1.0\n")
    assert "torch==2.11.0+cu128" in open(lock).read()


def test_trap_unlabeled_pin_says_nothing_to_do_over_another_variant(box):
    s128, s130 = box.settings("cu128"), box.settings("cu130")
    py = box.venv("live")
    lock128, cons128 = box.lock(s128, py)
    box.sync(s128, py, lock128, cons128)
    # the trap: "make sure torch 2.11.0 is installed" over the cu128 build changes nothing
    again = box.uv("pip", "install", "--no-config", "--python", py, "--index-url",
                   box.index.package_index_url, "torch==2.11.0")
    assert "Checked 1 package" in again.stderr or "Audited" in again.stderr
    assert box.torch(py) == ("2.11.0+cu128", "12.8")
    # the defence: drift against the cu130 lock names it, and syncing the cu130 lock replaces it
    lock130, cons130 = box.lock(s130, box.venv("scratch"))
    from pvegpu.locks import parse_pins
    found = drift(box.installed(py), parse_pins(open(lock130).read()))
    assert found.wrong_variant == {"torch": ("2.11.0+cu128", "2.11.0+cu130")}
    box.sync(s130, py, lock130, cons130)
    assert box.torch(py) == ("2.11.0+cu130", "13.0")


def test_sync_removes_extraneous_packages(box):
    s = box.settings("cu130")
    py = box.venv("polluted")
    lock, cons = box.lock(s, py)
    box.uv("pip", "install", "--no-config", "--python", py, "--index-url",
           box.index.package_index_url, "sglang-junk==0.1.0", "transformers==5.6.0")
    box.sync(s, py, lock, cons)
    assert box.installed(py) == {"torch": "2.11.0+cu130"}


def test_unchanged_lock_installs_offline_from_the_cache(box):
    s = box.settings("cu130")
    py = box.venv("first")
    lock, cons = box.lock(s, py)
    box.sync(s, py, lock, cons)
    box.index.stop()  # nothing is reachable now: only uv's cache can serve the rebuild
    py2 = box.venv("second")
    box.sync(s, py2, lock, cons, offline=True)
    assert box.torch(py2) == ("2.11.0+cu130", "13.0")


def test_a_lock_that_does_not_resolve_fails_the_sync(box):
    s = box.settings("cu130")
    py = box.venv("tampered")
    lock, cons = box.lock(s, py)
    text = open(lock).read()
    digest = text.split("--hash=sha256:")[1][:64]
    bad = box.write("bad.lock", text.replace(digest, "0" * 64))
    result = box.sync(s, py, bad, cons, check=False)
    assert result.returncode != 0 and "hash" in result.stderr.lower()
    missing = box.write("missing.lock", text.replace("torch==2.11.0+cu130", "torch==2.11.9+cu130"))
    result = box.sync(s, py, missing, cons, check=False)
    assert result.returncode != 0

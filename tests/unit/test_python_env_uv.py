"""The torch-variant traps, shown with the real uv against the loopback index, and defended by the
exact command lines the deploy runs (pvegpu.plan.uv_commands.sync_argv, pvegpu.locks.compile_argv).

The loopback index is like the real pair: ``<url>/whl/<variant>/`` serves ``torch-2.11.0+<variant>``
and older copies of some of torch's dependencies (filelock, typing-extensions), ``<url>/simple/``
(PyPI) serves the unlabeled ``torch-2.11.0``, which is the CUDA 13 build, the fresh dependencies
and ``trainer-utils`` (which needs them). Here PyPI also gets a newer unlabeled ``torch-2.12.0``
and a package depending on ``torch>=2.11``.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
import uv as uv_package

from pvegpu.locks import make_lock, parse_pins, training_pyproject
from pvegpu.plan.uv_commands import lock_requirements, sync_argv
from pvegpu.plan.venvs import drift
from pvegpu.settings import Settings, defaults
from sim.index import PackageIndex
from sim.wheels import build_torch_wheels, build_wheel
from tests.unit.mutmut_state import instrumented_by_mutmut

UV = uv_package.find_uv_bin()


@pytest.fixture
def index(wheelhouse, tmp_path):
    extra = tmp_path / "extra"
    needs = build_wheel(
        "needs-torch", "1.0", {"needs_torch/__init__.py": ""}, extra, requires=["torch>=2.11"]
    )
    newer = build_torch_wheels(extra, version="2.12.0", variants=())["unlabeled"]
    with PackageIndex(wheelhouse.torch_index(), [*wheelhouse.pypi(), needs, newer]) as ix:
        yield ix


class Box:
    """A scratch dir with uv's cache, venvs and files, running uv with a clean environment."""

    def __init__(self, tmp_path, index):
        self.dir, self.index = tmp_path, index
        self.env = {k: v for k, v in os.environ.items() if not k.startswith(("UV_", "VIRTUAL_ENV"))}
        self.env.update(
            UV_CACHE_DIR=str(tmp_path / "cache"), UV_NO_PROGRESS="1", UV_PYTHON_DOWNLOADS="never"
        )

    def settings(self, variant, **over) -> Settings:
        return Settings.from_data(
            {
                **defaults(),
                "torch_variant": variant,
                "training_requirements": [],
                "package_index_url": self.index.package_index_url,
                "torch_index_base": self.index.torch_index_base,
                **over,
            }
        )

    def uv(self, *argv, check=True):
        p = subprocess.run(
            [UV, *argv] if argv[0] != UV else list(argv),
            cwd=self.dir,
            env=self.env,
            capture_output=True,
            text=True,
        )
        if check:
            assert p.returncode == 0, p.stdout + p.stderr
        return p

    def venv(self, name):
        self.uv("venv", "--no-config", "--quiet", "--python", sys.executable, str(self.dir / name))
        return str(self.dir / name / "bin" / "python")

    def torch(self, python):
        out = subprocess.run(
            [
                python,
                "-c",
                "import torch, json; print(json.dumps([torch.__version__, torch.version.cuda]))",
            ],
            capture_output=True,
            text=True,
            env=self.env,
        )
        return tuple(json.loads(out.stdout)) if out.returncode == 0 else None

    def installed(self, python):
        out = self.uv("pip", "list", "--python", python, "--format", "json").stdout
        return {p["name"]: p["version"] for p in json.loads(out)}

    def write(self, name, text):
        (self.dir / name).write_text(text)
        return str(self.dir / name)

    def lock(self, s: Settings, python, pins=None):
        """What the deploy does: make the lock on the controller (``make_lock``), for this
        interpreter's X.Y, in a scratch locks_dir; returns (lock path, sync pyproject path)."""
        if pins:
            s = s.changed(training_requirements=tuple(pins))
        s = s.changed(locks_dir=str(self.dir / "locks"))
        version = ".".join(map(str, sys.version_info[:2]))
        plan = make_lock(s, version, uv=UV)
        assert plan.kind == "lock" and plan.error is None, plan.error
        # uv reads sources/indexes only from a file named pyproject.toml
        (self.dir / f"sync-{s.torch.variant}").mkdir(exist_ok=True)
        pyproject = self.write(
            f"sync-{s.torch.variant}/pyproject.toml",
            training_pyproject(s, lock_requirements(plan.text)),
        )
        return str(self.dir / "locks" / f"{s.torch.variant}-py{version}.lock"), pyproject

    def sync(self, s, python, lock, pyproject, offline=False, check=True):
        return self.uv(*sync_argv(s, UV, python, pyproject, lock, offline=offline), check=check)


@pytest.fixture
def box(tmp_path, index):
    return Box(tmp_path, index)


def test_trap_unlabeled_pin_silently_installs_pypis_cuda13_build(box):
    py = box.venv("unlabeled")
    box.uv(
        "pip",
        "install",
        "--no-config",
        "--python",
        py,
        "--index-url",
        box.index.package_index_url,
        "torch==2.11.0",
    )
    assert box.torch(py) == ("2.11.0", "13.0")  # the trap: asked for "torch 2.11", got CUDA 13

    s = box.settings("cu128")
    py = box.venv("labeled")
    lock, cons = box.lock(s, py)
    box.sync(s, py, lock, cons)
    assert box.torch(py) == ("2.11.0+cu128", "12.8")
    assert "torch==2.11.0+cu128" in Path(lock).read_text()


def test_trap_a_dependency_pulling_torch_from_pypi(box):
    s = box.settings("cu128")
    # the trap: unsafe-best-match lets PyPI's newer unlabeled torch satisfy "torch>=2.11"
    py = box.venv("unsafe")
    box.uv(
        "pip",
        "install",
        "--no-config",
        "--python",
        py,
        "--index-url",
        box.index.package_index_url,
        "--extra-index-url",
        s.torch.index_url,
        "--index-strategy",
        "unsafe-best-match",
        "needs-torch==1.0",
    )
    assert box.torch(py)[0] == "2.12.0"
    # the defence: full-label pin, constraint, first-index -> the dependency gets the cu128 build
    py = box.venv("ours")
    lock, cons = box.lock(s, py, pins=["needs-torch==1.0"])
    box.sync(s, py, lock, cons)
    assert box.installed(py) == {"needs-torch": "1.0", "torch": "2.11.0+cu128"}
    assert "torch==2.11.0+cu128" in Path(lock).read_text()


def test_trap_unlabeled_pin_says_nothing_to_do_over_another_variant(box):
    s128, s130 = box.settings("cu128"), box.settings("cu130")
    py = box.venv("live")
    lock128, cons128 = box.lock(s128, py)
    box.sync(s128, py, lock128, cons128)
    # the trap: "make sure torch 2.11.0 is installed" over the cu128 build changes nothing
    again = box.uv(
        "pip",
        "install",
        "--no-config",
        "--python",
        py,
        "--index-url",
        box.index.package_index_url,
        "torch==2.11.0",
    )
    assert "Checked 1 package" in again.stderr or "Audited" in again.stderr
    assert box.torch(py) == ("2.11.0+cu128", "12.8")
    # the defence: drift against the cu130 lock names it, and syncing the cu130 lock replaces it
    lock130, cons130 = box.lock(s130, box.venv("scratch"))
    from pvegpu.locks import parse_pins

    found = drift(box.installed(py), parse_pins(Path(lock130).read_text()))
    assert found.wrong_variant == {"torch": ("2.11.0+cu128", "2.11.0+cu130")}
    box.sync(s130, py, lock130, cons130)
    assert box.torch(py) == ("2.11.0+cu130", "13.0")


def test_sync_removes_extraneous_packages(box):
    s = box.settings("cu130")
    py = box.venv("polluted")
    lock, cons = box.lock(s, py)
    box.uv(
        "pip",
        "install",
        "--no-config",
        "--python",
        py,
        "--index-url",
        box.index.package_index_url,
        "sglang-junk==0.1.0",
        "transformers==5.6.0",
    )
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
    text = Path(lock).read_text()
    digest = text.split("--hash=sha256:")[1][:64]
    bad = box.write("bad.lock", text.replace(digest, "0" * 64))
    result = box.sync(s, py, bad, cons, check=False)
    assert result.returncode != 0 and "hash" in result.stderr.lower()
    missing = box.write("missing.lock", text.replace("torch==2.11.0+cu130", "torch==2.11.9+cu130"))
    result = box.sync(s, py, missing, cons, check=False)
    assert result.returncode != 0


def test_trap_the_torch_index_has_stale_copies_of_torchs_dependencies(box):
    """The real torch index hosts old filelock/typing-extensions; trainer-utils (PyPI) needs
    newer ones. first-index with the torch index as an extra index fails on them."""
    s = box.settings("cu130", training_requirements=["trainer-utils==1.0.0"])
    box.write("trap.in", "torch==2.11.0+cu130\ntrainer-utils==1.0.0\n")
    trap = box.uv(
        "pip",
        "compile",
        "--no-config",
        "--generate-hashes",
        "--index-url",
        box.index.package_index_url,
        "--extra-index-url",
        s.torch.index_url,
        "--index-strategy",
        "first-index",
        "trap.in",
        check=False,
    )
    assert trap.returncode != 0
    assert "was found on " + s.torch.index_url in trap.stderr  # uv names the stale copy
    # the defence: torch bound to the explicit torch index, the rest from package_index_url
    py = box.venv("fresh")
    lock, pyproject = box.lock(s, py)
    pins = parse_pins(Path(lock).read_text())
    assert pins == {
        "torch": "2.11.0+cu130",
        "trainer-utils": "1.0.0",
        "filelock": "3.20.0",
        "typing-extensions": "4.15.0",
    }
    box.index.clear_requests()
    box.sync(s, py, lock, pyproject)
    assert box.installed(py) == {
        "torch": "2.11.0+cu130",
        "trainer-utils": "1.0.0",
        "filelock": "3.20.0",
        "typing-extensions": "4.15.0",
    }
    # torch came from the torch index, filelock from the package index, never the stale copy
    assert "torch-2.11.0+cu130-py3-none-any.whl" in box.index.downloads()
    assert not [p for _, p in box.index.requests if p.startswith("/whl/cu130/filelock")]
    # installing the same lock the old way (extra index + first-index) falls into the trap
    py2 = box.venv("old-way")
    old = box.uv(
        "pip",
        "sync",
        "--no-config",
        "--require-hashes",
        "--python",
        py2,
        "--index-url",
        box.index.package_index_url,
        "--extra-index-url",
        s.torch.index_url,
        "--index-strategy",
        "first-index",
        lock,
        check=False,
    )
    assert old.returncode != 0 and "filelock" in old.stderr


def test_sync_requires_a_hash_for_every_entry(box):
    """Behavioural: a lock entry without a hash is refused (uv checks the hashes it has
    anyway; only --require-hashes refuses one that has none). Fails if the flag is dropped."""
    s = box.settings("cu130", training_requirements=["trainer-utils==1.0.0"])
    py = box.venv("strict")
    lock, pyproject = box.lock(s, py)
    text = Path(lock).read_text()
    unhashed = re.sub(
        r"filelock==3.20.0 \\\n    --hash=sha256:[0-9a-f]{64}\n", "filelock==3.20.0\n", text
    )
    assert unhashed != text
    bad = box.write("unhashed.lock", unhashed)
    result = box.sync(s, py, bad, pyproject, check=False)
    assert result.returncode != 0, result.stderr
    assert "filelock" not in box.installed(py)


@pytest.mark.skipif(instrumented_by_mutmut(), reason="sources instrumented by mutmut")
def test_reachability_checks_send_credentials_from_the_netrc_not_the_url(wheelhouse, tmp_path):
    """The container's check (REACH, via $NETRC) and the controller's (index_problem) against an
    index that needs basic auth: no token in their argv or in a host name to resolve; a wrong
    token is one line naming the variable, redacted."""
    from pvegpu.locks import index_problem, netrc_text
    from pvegpu.plan.uv_commands import reach_command

    with PackageIndex(wheelhouse.torch_index(), wheelhouse.pypi(), auth=("me", "tok3n")) as ix:

        def s_with(token):
            base = ix.url.replace("http://", f"http://me:{token}@")
            return Settings.from_data(
                {
                    **defaults(),
                    "package_index_url": f"{base}/simple",
                    "torch_index_base": f"{base}/whl",
                    "python_interpreter": sys.executable,
                }
            )

        for token, ok in (("tok3n", True), ("wrong", False)):
            s = s_with(token)
            netrc = tmp_path / f"netrc-{token}"
            netrc.write_text(netrc_text(s.torch))
            cmd = reach_command(s)
            assert token not in cmd and "me:" not in cmd
            r = subprocess.run(
                ["sh", "-c", cmd],
                env={"NETRC": str(netrc), "PATH": "/usr/bin:/bin"},
                capture_output=True,
                text=True,
            )
            assert (r.returncode == 0) == ok, r.stderr
            problem = index_problem(s)
            if ok:
                assert problem is None
            else:
                assert "refused the credentials (HTTP 401)" in r.stderr
                assert problem == (
                    f"package_index_url={ix.url.replace('http://', 'http://me:***@')}"
                    "/simple refused the credentials (HTTP 401): fix the user:token "
                    "in package_index_url"
                )
        # without credentials the index refuses: the checks say so instead of "not found"
        assert "refused the credentials" in index_problem(
            Settings.from_data(
                {
                    **defaults(),
                    "package_index_url": f"{ix.url}/simple",
                    "torch_index_base": f"{ix.url}/whl",
                }
            )
        )

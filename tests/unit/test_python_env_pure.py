"""The python env stage's pure parts: locks, uv command lines, drift, what to build, pruning."""

from __future__ import annotations

import re
import subprocess
import tomllib
from dataclasses import replace
from pathlib import Path

import pytest

from pvegpu import variants as variants_mod
from pvegpu.locks import (
    LockPlan,
    compile_argv,
    desired_pins,
    early_lock_error,
    index_args,
    lock_plan,
    make_lock,
    parse_pins,
    requirements_in,
    training_pyproject,
    uv_error,
    uv_wheel_hashes,
)
from pvegpu.plan.uv_commands import sync_argv, uv_env
from pvegpu.plan.venv_build import build_script
from pvegpu.plan.venvs import (
    build_reasons,
    drift,
    drift_report,
    effective_python_version,
    marker,
    prune_plan,
    python_problem,
)
from pvegpu.settings import Settings, SettingsError, defaults
from pvegpu.variants import VARIANTS, Variant

ROOT = Path(__file__).resolve().parents[2]
HASH = "--hash=sha256:" + "ab" * 32


def settings(**over) -> Settings:
    return Settings.from_data({**defaults(), **over})


def write_locks(
    d: Path,
    s: Settings,
    lock: str | None = "default",
    in_text: str | None = None,
    python: str = "3.11",
):
    d.mkdir(parents=True, exist_ok=True)
    (d / f"{s.torch.variant}.in").write_text(in_text if in_text is not None else requirements_in(s))
    if lock == "default":
        lock = "".join(f"{k}=={v} \\\n    {HASH}\n" for k, v in desired_pins(s.torch).items())
        lock += f"filelock==3.20.0 \\\n    {HASH}\n    # via torch\n"
    if lock is not None:
        (d / f"{s.torch.variant}-py{python}.lock").write_text(lock)


# --- locks ----------------------------------------------------------------------------------------
@pytest.mark.parametrize("variant", sorted(VARIANTS))
def test_shipped_in_files_pin_what_the_defaults_ask_for(variant):
    s = settings(torch_variant=variant)
    text = (ROOT / "locks" / f"{variant}.in").read_text()
    assert parse_pins(text) == desired_pins(s.torch)
    assert f"torch=={s.torch.version}+{variant}" in text.splitlines()


def test_a_matching_lock_is_used_as_is(tmp_path):
    s = settings(locks_dir=str(tmp_path))
    write_locks(tmp_path, s)
    plan = lock_plan(s, "3.11")
    assert plan.kind == "lock" and plan.reason is None and plan.error is None
    assert "filelock==3.20.0" in plan.text and plan.source == f"{tmp_path}/cu130-py3.11.lock"


def test_locks_are_per_python_version(tmp_path):
    s = settings(locks_dir=str(tmp_path))
    write_locks(tmp_path, s, python="3.11")
    plan = lock_plan(s, "3.13")  # e.g. a Debian 13 container: another lock
    assert plan.kind == "make" and plan.error is None
    assert plan.reason == f"{tmp_path}/cu130-py3.13.lock is missing"
    assert lock_plan(s, "3.11").kind == "lock"


def test_require_lock_refuses_in_one_line_naming_the_lock(tmp_path):
    s = settings(locks_dir=str(tmp_path), require_lock=True)
    write_locks(tmp_path, s, lock=None)
    plan = lock_plan(s, "3.11")
    assert plan.error.startswith(f"require_lock=true and {tmp_path}/cu130-py3.11.lock is missing: ")
    assert plan.error.count("\n") == 0 and "run deploy.py once without require_lock" in plan.error


def test_an_in_file_that_pins_something_else_is_remade_or_refused_with_require_lock(tmp_path):
    base = settings(locks_dir=str(tmp_path))
    write_locks(tmp_path, base)
    plan = lock_plan(base.changed(training_requirements=()), "3.11")
    assert plan.kind == "make" and plan.error is None
    assert "does not pin what the settings ask for (transformers 5.6.0 vs (absent))" in plan.reason
    plan = lock_plan(base.changed(training_requirements=(), require_lock=True), "3.11")
    assert plan.kind == "make" and plan.error.count("\n") == 0
    assert plan.error.startswith("require_lock=true and ")
    assert "does not pin what the settings ask for (transformers 5.6.0 vs (absent))" in plan.error
    assert "write the settings' pins (torch==2.11.0+cu130) to" in plan.error


def test_changed_pins_rewrite_the_in_file_and_make_a_new_lock(tmp_path):
    base = settings(locks_dir=str(tmp_path))
    write_locks(tmp_path, base)
    changed = base.changed(training_requirements=())

    def compile_stub(argv, **kw):  # stands in for uv pip compile: writes the -o file
        out = Path(argv[argv.index("-o") + 1])
        out.write_text(f"torch==2.11.0+cu130 \\\n    {HASH}\n")
        return subprocess.CompletedProcess(argv, 0, "", "")

    plan = make_lock(changed, "3.11", uv="uv", run=compile_stub, check=lambda s: None)
    assert plan.error is None and plan.made and plan.kind == "lock"
    assert parse_pins((tmp_path / "cu130.in").read_text()) == {"torch": "2.11.0+cu130"}
    assert parse_pins((tmp_path / "cu130-py3.11.lock").read_text()) == {"torch": "2.11.0+cu130"}
    assert lock_plan(changed, "3.11").kind == "lock"


@pytest.mark.parametrize(
    "lock, why",
    [
        (
            "torch==2.11.0+cu128 \\\n    " + HASH + "\n",
            "out of date (it does not pin torch==2.11.0+cu130",
        ),
        (
            "torch==2.11.0 \\\n    " + HASH + "\n",
            "out of date (it does not pin torch==2.11.0+cu130",
        ),
        ("torch==2.11.0+cu130\n", "entries without hashes (torch)"),
    ],
)
def test_a_stale_or_unhashed_lock_is_made_again(tmp_path, lock, why):
    s = settings(locks_dir=str(tmp_path), training_requirements=[])
    write_locks(tmp_path, s, lock=lock)
    plan = lock_plan(s, "3.11")
    assert plan.kind == "make" and why in plan.reason and plan.error is None


def test_lock_identity_changes_with_the_lock(tmp_path):
    s = settings(locks_dir=str(tmp_path))
    write_locks(tmp_path, s)
    first = lock_plan(s, "3.11").sha256
    lock = tmp_path / "cu130-py3.11.lock"
    lock.write_text(lock.read_text() + f"x==1 \\\n    {HASH}\n")
    assert lock_plan(s, "3.11").sha256 != first


def test_early_refusals_without_a_python_version(tmp_path):
    s = settings(locks_dir=str(tmp_path), require_lock=True)
    assert s.python_env.version is None  # the default: follow the container's Python
    write_locks(tmp_path, s, lock=None)
    assert "there is no " in early_lock_error(s) and "cu130-py<X.Y>.lock" in early_lock_error(s)
    write_locks(tmp_path, s, python="3.13")
    assert early_lock_error(s) is None  # may be the container's; venv_built decides
    # other pins than the .in: made again without require_lock, refused with it
    assert early_lock_error(s.changed(require_lock=False, training_requirements=())) is None
    assert "does not pin what the settings ask" in early_lock_error(
        s.changed(training_requirements=())
    )
    assert early_lock_error(s.changed(python_version="3.11")).startswith("require_lock=true")


def no_check(settings):
    return None  # the indexes of these tests are not real: never contacted


def test_different_credentials_for_one_host_are_refused_early():
    s = settings(
        package_index_url="https://me:a@mirror.example/simple",
        torch_index_base="https://me:b@mirror.example/whl",
    )
    line = early_lock_error(s)
    assert line.startswith("package_index_url and torch_index_base carry different credentials")
    assert "me:a" not in line and "me:b" not in line


class FakeUv:
    """Stands in for ``uv pip compile``: records argv and env, writes ``lock`` to ``-o``."""

    def __init__(self, lock: str, rc: int = 0, stderr: str = ""):
        self.lock, self.rc, self.stderr, self.calls = lock, rc, stderr, []

    def __call__(self, argv, env, **kw):
        netrc = Path(env["NETRC"]).read_text() if "NETRC" in env else None
        self.calls.append((argv, env, netrc, Path(argv[-3]).read_text()))
        if self.rc == 0:
            Path(argv[-1]).write_text(self.lock)
        return subprocess.CompletedProcess(argv, self.rc, "", self.stderr)


def test_make_lock_writes_the_in_and_the_lock_and_keeps_credentials_out_of_argv(tmp_path):
    s = settings(
        locks_dir=str(tmp_path / "locks"),
        training_requirements=[],
        package_index_url="https://me:s3cret@mirror.example/simple",
        torch_index_base="https://me:s3cret@mirror.example/whl",
    )
    fake = FakeUv(f"torch==2.11.0+cu130 \\\n    {HASH}\n")
    plan = make_lock(s, "3.13", uv="uv", run=fake, check=no_check)
    assert plan.kind == "lock" and plan.made and plan.source.endswith("locks/cu130-py3.13.lock")
    written = (tmp_path / "locks" / "cu130-py3.13.lock").read_text()
    assert written == plan.text and written.endswith(fake.lock)
    assert "s3cret" not in written and "me:***@mirror.example" in written
    assert parse_pins((tmp_path / "locks" / "cu130.in").read_text()) == {"torch": "2.11.0+cu130"}
    [(argv, env, netrc, pyproject)] = fake.calls
    assert not any("s3cret" in a for a in argv) and "s3cret" not in pyproject
    assert netrc == "machine mirror.example login me password s3cret\n"
    assert argv[argv.index("--python-version") + 1] == "3.13"
    assert (
        make_lock(s, "3.13", uv="uv", run=fake, check=no_check).made is False
    )  # now recorded: used as is
    assert len(fake.calls) == 1


def test_a_failed_compile_is_one_redacted_line_and_writes_nothing(tmp_path):
    s = settings(
        locks_dir=str(tmp_path),
        training_requirements=["nope==9"],
        package_index_url="https://me:s3cret@mirror.example/simple",
    )
    fake = FakeUv(
        "",
        rc=2,
        stderr="error: Failed to fetch https://me:s3cret@mirror.example/simple\n"
        "  Caused by: HTTP status 401\n",
    )
    plan = make_lock(s, "3.11", uv="uv", run=fake, check=no_check)
    assert plan.error.startswith(
        f"making {tmp_path}/cu130-py3.11.lock failed: Failed to fetch "
        "https://me:***@mirror.example/simple HTTP status 401: fix"
    )
    assert plan.error.count("\n") == 0 and "s3cret" not in plan.error
    assert list(tmp_path.iterdir()) == []


def test_compile_command_is_explicit_and_never_auto():
    s = settings(
        torch_variant="cu128",
        package_index_url="http://u:t@mirror/simple",
        torch_index_base="http://u:t@mirror/whl",
    )
    argv = compile_argv(s, "uv", "pyproject.toml", "out", "3.11")
    assert (
        "--generate-hashes" in argv
        and argv[argv.index("--index-url") + 1] == "http://mirror/simple"
    )
    assert "--extra-index-url" not in argv  # the torch index is explicit, in the pyproject
    assert not any("torch-backend" in a or "unsafe" in a or "u:t" in a for a in argv)
    text = training_pyproject(s, ["torch==2.11.0+cu128", "filelock==3.20.0"])
    doc = tomllib.loads(text)
    assert doc["tool"]["uv"]["index"] == [
        {"name": "pytorch", "url": "http://mirror/whl/cu128", "explicit": True}
    ]
    assert doc["tool"]["uv"]["sources"] == {"torch": {"index": "pytorch"}}
    assert doc["project"]["dependencies"] == ["torch==2.11.0+cu128", "filelock==3.20.0"]


def test_uv_wheel_hashes_come_from_the_projects_uv_lock():
    from importlib.metadata import version

    hashes = uv_wheel_hashes(version("uv"))
    assert any("manylinux_2_17_x86_64" in name for name in hashes)
    assert all(re.fullmatch(r"[0-9a-f]{64}", h) for h in hashes.values())
    assert uv_wheel_hashes("0.0.0") == {}


# --- uv command lines: the traps ------------------------------------------------------------------
def test_every_uv_call_pins_the_indexes_first_index_and_no_backend():
    s = settings(
        torch_variant="cu128",
        package_index_url="http://mirror/simple",
        torch_index_base="http://mirror/whl",
    )
    for argv in (
        sync_argv(s, "uv", "py", "pyproject.toml", "lock"),
        compile_argv(s, "uv", "pyproject.toml", "out", "3.11"),
    ):
        assert argv[argv.index("--index-strategy") + 1] == "first-index"
        assert argv[argv.index("--index-url") + 1] == "http://mirror/simple"
        assert "--extra-index-url" not in argv and "--no-config" in argv
        assert not any("torch-backend" in a or "unsafe" in a for a in argv)
    sync = sync_argv(s, "uv", "py", "pyproject.toml", "lock")
    assert sync[sync.index("--constraints") + 1] == "lock" and sync[-1] == "pyproject.toml"
    assert index_args(s)[-1] == "first-index"


def test_uv_env_unsets_what_could_change_the_index_or_backend():
    env = uv_env(settings())
    for var in (
        "UV_TORCH_BACKEND",
        "UV_INDEX_URL",
        "UV_EXTRA_INDEX_URL",
        "UV_INDEX_STRATEGY",
        "UV_INDEX",
        "UV_CONSTRAINT",
        "UV_OFFLINE",
    ):
        assert f"-u {var} " in env
    assert "UV_CACHE_DIR=/root/.cache/uv" in env and "UV_PYTHON_DOWNLOADS=never" in env


def lock_of(s: Settings) -> LockPlan:
    text = "".join(f"{k}=={v} \\\n    {HASH}\n" for k, v in desired_pins(s.torch).items())
    return LockPlan("lock", text, "ab" * 32, "locks/cu130-py3.11.lock")


def test_build_script_builds_beside_the_live_venv_offline_first():
    s = settings(training_requirements=[])
    script = build_script(s, lock_of(s), "3.11.2")
    lines = script.splitlines()
    assert lines[0] == "set -e"
    assert (
        "rm -rf -- /root/venvs/torch-2.11.0-cu130.building /root/venvs/torch-2.11.0-cu130.next"
        in script
    )
    assert (
        lines[-1]
        == "mv /root/venvs/torch-2.11.0-cu130.building /root/venvs/torch-2.11.0-cu130.next"
    )
    # nothing but .building/.next of this build is removed; the live link is never touched
    assert [ln for ln in lines if "rm " in ln] == [lines[2]]
    assert "/root/venv " not in script and "/root/venv'" not in script
    offline = script.index("pip sync")
    assert "--offline" in script[offline : script.index("; else ", offline)]
    assert script.index("package_index_url=", offline) < script.index("pip sync", offline + 1)
    assert "pip compile" not in script  # locks are made on the controller, never in the container
    assert "NETRC=" not in script


def test_build_script_never_carries_index_credentials():
    s = settings(
        training_requirements=[], package_index_url="https://me:s3cret@mirror.example/simple"
    )
    script = build_script(s, lock_of(s), "3.11.2")
    assert "s3cret" not in script and "NETRC=/root/.config/pvegpu/netrc" in script
    assert "package_index_url=https://mirror.example/simple" in script


def test_uv_error_condenses_uv_output_to_one_line():
    lines = [
        "  × No solution found when resolving dependencies:",
        "  ╰─▶ Because there is no version of torch==2.11.0+cu128 and you require "
        "torch==2.11.0+cu128, we can conclude that your requirements are unsatisfiable.",
    ]
    assert uv_error(lines).startswith(
        "No solution found when resolving dependencies: Because there"
    )
    assert (
        uv_error(["error: Failed to fetch: `http://x/`", "  Caused by: connection refused"])
        == "Failed to fetch: `http://x/` connection refused"
    )
    assert uv_error(["plain"]) is None


def test_python_version_follows_the_container_unless_set():
    s = settings()
    assert s.python_env.version is None
    assert python_problem({"python": {"version": "3.13.5"}}, s.python_env) is None  # a Debian 13 CT
    assert effective_python_version(s.python_env, {"python": {"version": "3.13.5"}}) == "3.13"
    assert effective_python_version(s.python_env, {"python": {"version": "3.11.2"}}) == "3.11"


def test_python_version_is_checked_against_the_interpreter():
    s = settings(python_version="3.11")
    assert python_problem({"python": {"version": "3.11.2"}}, s.python_env) is None
    line = python_problem({"python": {"version": "3.13.5"}}, s.python_env)
    assert line.startswith(
        "python_interpreter=/usr/bin/python3 is Python 3.13.5, python_version=3.11"
    )
    assert "does not run" in python_problem({"python": {"version": None}}, s.python_env)


def test_bad_python_version_is_a_settings_error():
    with pytest.raises(SettingsError, match=r"python_version='3' is not a Python version"):
        settings(python_version="3")


# --- drift ----------------------------------------------------------------------------------------
def test_drift_reports_every_kind():
    d = drift(
        {"torch": "2.11.0", "Sglang_Junk": "0.1.0", "numpy": "2.0.0"},
        {"torch": "2.11.0+cu130", "numpy": "2.3.0", "transformers": "5.6.0"},
    )
    assert d.as_dict() == {
        "extra": {"sglang-junk": "0.1.0"},
        "missing": {"transformers": "5.6.0"},
        "wrong_version": {"numpy": ["2.0.0", "2.3.0"]},
        "wrong_variant": {"torch": ["2.11.0", "2.11.0+cu130"]},
    }
    assert d.lines()[0] == (
        "torch is 2.11.0, the lock says 2.11.0+cu130 "
        "(wrong variant: PyPI's unlabeled build, not the cu130 build)"
    )
    assert not drift({"torch": "2.11.0+cu130"}, {"torch": "2.11.0+cu130"})


def state_with(s: Settings, plan, installed=None, **extra) -> dict:
    real = f"{s.torch.build_name}.b1"
    entry = {
        "path": f"/root/venvs/{real}",
        "build": marker(s, plan, "3.11.2"),
        "python_ok": True,
        "built": 100,
        "selected_at": 100,
        "in_use": [],
        "installed": installed if installed is not None else {"torch": "2.11.0+cu130"},
        "locked": {"torch": "2.11.0+cu130"},
    }
    venvs = {real: entry, s.torch.build_name: dict(entry, link=real, real=real)}
    doc = {
        "python": {"version": "3.11.2"},
        "venvs": venvs,
        "venv_link": s.build_venv,
        "venv_real": f"/root/venvs/{real}",
    }
    doc.update(extra)
    return doc


def test_build_reasons():
    s = settings(training_requirements=[])
    plan = lock_of(s)
    assert build_reasons(state_with(s, plan), s, plan) == []
    assert build_reasons({"venvs": {}}, s, plan) == ["torch-2.11.0-cu130 is not built yet"]
    polluted = state_with(s, plan, {"torch": "2.11.0+cu128", "sglang-junk": "0.1.0"})
    assert build_reasons(polluted, s, plan) == [
        "torch-2.11.0-cu130: torch is 2.11.0+cu128, the lock says 2.11.0+cu130 (wrong variant: "
        "the cu128 build, not cu130)",
        "torch-2.11.0-cu130: sglang-junk 0.1.0 is installed but not in the lock (extra)",
    ]
    assert drift_report(polluted, s)[1] == (
        "/root/venv (torch-2.11.0-cu130.b1): sglang-junk 0.1.0 "
        "is installed but not in the lock (extra)"
    )
    other = replace(plan, text=plan.text + "x==1\n", sha256="cd" * 32)
    assert "its lock input changed" in build_reasons(state_with(s, plan), s, other)[0]
    newer_python = state_with(s, plan, python={"version": "3.12.1"})
    assert "python version changed (3.11 -> 3.12)" in build_reasons(newer_python, s, plan)[0]
    leftover = state_with(s, plan)
    leftover["venvs"]["torch-2.11.0-cu130.next"] = {"path": "x"}
    assert "unchecked build torch-2.11.0-cu130.next" in build_reasons(leftover, s, plan)[0]


# --- pruning --------------------------------------------------------------------------------------
def real(build, n, selected_at, in_use=(), made=True):
    return {
        "path": f"/root/venvs/{build}.b{n}",
        "build": {"build": build} if made else None,
        "selected_at": selected_at,
        "built": selected_at,
        "in_use": list(in_use),
    }


def layout(*dirs, links, live):
    venvs = {}
    for name, entry in dirs:
        venvs[name] = entry
    for build, target in links.items():
        venvs[build] = dict(venvs[target], link=target, real=target)
    return {"venvs": venvs, "venv_real": f"/root/venvs/{live}"}


def test_prune_keeps_selected_and_most_recent_previous_and_removes_older():
    s = settings(keep_venvs=2)
    st = layout(
        ("torch-2.11.0-cu130.b1", real("torch-2.11.0-cu130", 1, 300)),
        ("torch-2.11.0-cu128.b1", real("torch-2.11.0-cu128", 1, 200)),
        ("torch-2.10.0-cu128.b1", real("torch-2.10.0-cu128", 1, 100)),
        ("torch-2.11.0-cu130.building", {"path": "x", "in_use": []}),
        ("someone-elses-venv", {"path": "y", "build": None, "in_use": []}),
        links={
            "torch-2.11.0-cu130": "torch-2.11.0-cu130.b1",
            "torch-2.11.0-cu128": "torch-2.11.0-cu128.b1",
            "torch-2.10.0-cu128": "torch-2.10.0-cu128.b1",
        },
        live="torch-2.11.0-cu130.b1",
    )
    remove, in_use = prune_plan(st, s.torch.build_name, s.python_env.keep_venvs)
    assert sorted(remove) == [
        "torch-2.10.0-cu128",
        "torch-2.10.0-cu128.b1",
        "torch-2.11.0-cu130.building",
    ]
    assert in_use == []
    assert prune_plan(st, s.torch.build_name, 3)[0] == ["torch-2.11.0-cu130.building"]


def test_prune_never_removes_the_live_one_or_one_in_use():
    s = settings(keep_venvs=1)
    st = layout(
        ("torch-2.11.0-cu130.b2", real("torch-2.11.0-cu130", 2, 400)),
        ("torch-2.11.0-cu130.b1", real("torch-2.11.0-cu130", 1, 300, in_use=[4242])),
        ("torch-2.11.0-cu128.b1", real("torch-2.11.0-cu128", 1, 200)),
        links={
            "torch-2.11.0-cu130": "torch-2.11.0-cu130.b2",
            "torch-2.11.0-cu128": "torch-2.11.0-cu128.b1",
        },
        live="torch-2.11.0-cu128.b1",  # a failed switch left the other build live
    )
    remove, in_use = prune_plan(st, s.torch.build_name, s.python_env.keep_venvs)
    assert remove == []
    assert in_use == ["torch-2.11.0-cu130.b1"]
    st["venv_real"] = "/root/venvs/torch-2.11.0-cu130.b2"
    remove, in_use = prune_plan(st, s.torch.build_name, s.python_env.keep_venvs)
    assert sorted(remove) == ["torch-2.11.0-cu128", "torch-2.11.0-cu128.b1"]


# --- variants are data ----------------------------------------------------------------------------
def test_a_new_variant_is_one_row_and_its_in_file(tmp_path, monkeypatch):
    monkeypatch.setitem(
        VARIANTS,
        "cu126",
        Variant(
            name="cu126",
            cuda="12.6",
            index_path="cu126",
            min_driver="560.28.03",
            compat_driver="525.60.13",
            notes="test row",
        ),
    )
    s = settings(torch_variant="cu126", locks_dir=str(tmp_path), training_requirements=[])
    write_locks(tmp_path, s, lock=None)
    assert s.torch.index_url == "https://download.pytorch.org/whl/cu126"
    assert s.torch.pin == "torch==2.11.0+cu126" and s.build_venv == "/root/venvs/torch-2.11.0-cu126"
    plan = lock_plan(s, "3.11")
    assert plan.kind == "make" and "cu126-py3.11.lock is missing" in plan.reason
    script = build_script(s, lock_of(s), "3.11.2")
    assert "whl/cu126" in script and "cu128" not in script and "cu130" not in script
    assert variants_mod.driver_fit(VARIANTS["cu126"], "570.0") == "ok"


def test_every_variant_has_its_in_file():
    assert sorted(p.stem for p in (ROOT / "locks").glob("*.in")) == sorted(VARIANTS)


# --- the probe, run for real on this machine ----------------------------------------------------
def test_ct_state_probe_reads_builds_links_packages_and_users(tmp_path):
    import json
    import subprocess
    import sys

    from pvegpu.facts.probe import parse_probe_output, probe_command

    venvs = tmp_path / "venvs"
    real = venvs / "torch-2.11.0-cu130.b1"
    site = real / "lib" / "python3.11" / "site-packages"
    for name, ver in (("torch", "2.11.0+cu130"), ("Sglang_Junk", "0.1.0")):
        d = site / f"{name}-{ver}.dist-info"
        d.mkdir(parents=True)
        (d / "METADATA").write_text(
            f"Metadata-Version: 2.1\nName: {name}\nVersion: {ver}\n\nbody\n"
        )
    (real / ".pvegpu-build.json").write_text(json.dumps({"build": "torch-2.11.0-cu130"}))
    (real / ".pvegpu-lock.txt").write_text(f"torch==2.11.0+cu130 \\\n    {HASH}\n    # via -r in\n")
    (venvs / "torch-2.11.0-cu130").symlink_to("torch-2.11.0-cu130.b1")
    (venvs / "torch-2.11.0-cu128.b1").mkdir()
    live = tmp_path / "venv"
    live.symlink_to(venvs / "torch-2.11.0-cu130")
    user = subprocess.Popen(["sleep", "30"], cwd=real)
    try:
        args = {
            "uv_bin": "/nonexistent/uv",
            "venvs_dir": str(venvs),
            "venv_path": str(live),
            "python": sys.executable,
            "uv_cache_dir": str(tmp_path / "cache"),
        }
        out = subprocess.run(
            ["sh", "-c", probe_command("ct_state", args, python=sys.executable)],
            capture_output=True,
            text=True,
            check=True,
        ).stdout
    finally:
        user.kill()
        user.wait()
    doc = parse_probe_output("ct_state", out.splitlines())
    entry = doc["venvs"]["torch-2.11.0-cu130.b1"]
    assert entry["installed"] == {"torch": "2.11.0+cu130", "sglang-junk": "0.1.0"}
    assert entry["locked"] == {"torch": "2.11.0+cu130"}
    assert entry["in_use"] == [user.pid]
    assert doc["venvs"]["torch-2.11.0-cu128.b1"]["in_use"] == []
    linked = doc["venvs"]["torch-2.11.0-cu130"]
    assert linked["link"] == "torch-2.11.0-cu130.b1" and linked["real"] == "torch-2.11.0-cu130.b1"
    assert doc["venv_link"] == str(venvs / "torch-2.11.0-cu130")
    assert doc["venv_real"] == str(real)
    assert doc["python"]["version"].startswith("3.") and doc["uv_version"] is None
    assert doc["uv_cache_same_fs"] is True
    s = settings(venvs_dir=str(venvs), venv_path=str(live))
    assert drift_report(doc, s) == [
        f"{live} (torch-2.11.0-cu130.b1): sglang-junk 0.1.0 is installed but not in the lock "
        "(extra)"
    ]

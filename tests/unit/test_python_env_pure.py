"""The python env stage's pure parts: locks, uv command lines, drift, what to build, pruning."""

from __future__ import annotations

import re
from dataclasses import replace
from pathlib import Path

import pytest

from pvegpu import variants as variants_mod
from pvegpu.locks import (
    compile_command, desired_pins, lock_plan, parse_pins, requirements_in, uv_wheel_hashes,
)
from pvegpu.operations.python_env import (
    build_script, compile_argv, drift_report, index_args, sync_argv, uv_env, uv_error,
    _python_problem,
)
from pvegpu.settings import Settings, SettingsError, defaults
from pvegpu.variants import VARIANTS, Variant
from pvegpu.venvs import build_reasons, drift, marker, prune_plan

ROOT = Path(__file__).resolve().parents[2]
HASH = "--hash=sha256:" + "ab" * 32


def settings(**over) -> Settings:
    return Settings.from_data({**defaults(), **over})


def write_locks(d: Path, s: Settings, lock: str | None = "default", in_text: str | None = None):
    d.mkdir(parents=True, exist_ok=True)
    (d / f"{s.torch_variant}.in").write_text(in_text if in_text is not None else requirements_in(s))
    if lock == "default":
        lock = "".join(f"{k}=={v} \\\n    {HASH}\n" for k, v in desired_pins(s).items())
        lock += f"filelock==3.20.0 \\\n    {HASH}\n    # via torch\n"
    if lock is not None:
        (d / f"{s.torch_variant}.lock").write_text(lock)


# --- locks ----------------------------------------------------------------------------------------
@pytest.mark.parametrize("variant", sorted(VARIANTS))
def test_shipped_in_files_pin_what_the_defaults_ask_for(variant):
    s = settings(torch_variant=variant)
    text = (ROOT / "locks" / f"{variant}.in").read_text()
    assert parse_pins(text) == desired_pins(s)
    assert f"torch=={s.torch_version}+{variant}" in text.splitlines()


def test_a_matching_lock_is_used_as_is(tmp_path):
    s = settings(locks_dir=str(tmp_path))
    write_locks(tmp_path, s)
    plan = lock_plan(s)
    assert plan.kind == "lock" and plan.warning is None and plan.error is None
    assert "filelock==3.20.0" in plan.text and plan.source.endswith("cu130.lock")


def test_missing_lock_installs_from_pins_with_a_warning_naming_the_command(tmp_path):
    s = settings(locks_dir=str(tmp_path))
    write_locks(tmp_path, s, lock=None)
    plan = lock_plan(s)
    assert plan.kind == "pins" and plan.error is None
    assert plan.text == "torch==2.11.0+cu130\ntransformers==5.6.0\n"
    assert "cu130.lock is missing" in plan.warning
    assert "uv pip compile --no-config --generate-hashes" in plan.warning
    assert "--extra-index-url https://download.pytorch.org/whl/cu130" in plan.warning


def test_require_lock_refuses_with_the_one_command(tmp_path):
    s = settings(locks_dir=str(tmp_path), require_lock=True)
    write_locks(tmp_path, s, lock=None)
    plan = lock_plan(s)
    assert plan.error.startswith("require_lock=true and ")
    assert plan.error.count("\n") == 0
    assert "run: uv pip compile" in plan.error and f"-o {tmp_path}/cu130.lock" in plan.error


def test_settings_that_differ_from_the_in_file_do_not_use_its_lock(tmp_path):
    base = settings(locks_dir=str(tmp_path))
    write_locks(tmp_path, base)
    plan = lock_plan(replace(base, training_requirements=()))
    assert plan.kind == "pins"
    assert "does not pin what the settings ask for (transformers 5.6.0 vs (absent))" in plan.warning
    assert plan.text == "torch==2.11.0+cu130\n"


@pytest.mark.parametrize("lock, why", [
    ("torch==2.11.0+cu128 \\\n    " + HASH + "\n", "out of date (it does not pin torch==2.11.0+cu130"),
    ("torch==2.11.0 \\\n    " + HASH + "\n", "out of date (it does not pin torch==2.11.0+cu130"),
    ("torch==2.11.0+cu130\n", "entries without hashes (torch)"),
])
def test_a_stale_or_unhashed_lock_is_not_used(tmp_path, lock, why):
    s = settings(locks_dir=str(tmp_path), training_requirements=[])
    write_locks(tmp_path, s, lock=lock)
    plan = lock_plan(s)
    assert plan.kind == "pins" and why in plan.warning


def test_lock_input_identity_changes_with_the_lock(tmp_path):
    s = settings(locks_dir=str(tmp_path))
    write_locks(tmp_path, s)
    first = lock_plan(s).sha256
    (tmp_path / "cu130.lock").write_text((tmp_path / "cu130.lock").read_text() + f"x==1 \\\n    {HASH}\n")
    assert lock_plan(s).sha256 != first


def test_compile_command_is_explicit_and_never_auto():
    cmd = compile_command(settings(torch_variant="cu128"))
    assert "--index-strategy first-index" in cmd and "--generate-hashes" in cmd
    assert "--extra-index-url https://download.pytorch.org/whl/cu128" in cmd
    assert "torch-backend" not in cmd and "unsafe" not in cmd
    assert cmd.endswith("locks/cu128.in -o locks/cu128.lock")


def test_uv_wheel_hashes_come_from_the_projects_uv_lock():
    from importlib.metadata import version
    hashes = uv_wheel_hashes(version("uv"))
    assert any("manylinux_2_17_x86_64" in name for name in hashes)
    assert all(re.fullmatch(r"[0-9a-f]{64}", h) for h in hashes.values())
    assert uv_wheel_hashes("0.0.0") == {}


# --- uv command lines: the traps ------------------------------------------------------------------
def test_every_uv_call_pins_the_indexes_first_index_and_no_backend():
    s = settings(torch_variant="cu128", package_index_url="http://mirror/simple",
                 torch_index_base="http://mirror/whl")
    for argv in (sync_argv(s, "uv", "py", "lock", "cons"), compile_argv(s, "uv", "py", "in", "cons", "out")):
        assert argv[argv.index("--index-strategy") + 1] == "first-index"
        assert argv[argv.index("--index-url") + 1] == "http://mirror/simple"
        assert argv[argv.index("--extra-index-url") + 1] == "http://mirror/whl/cu128"
        assert "--no-config" in argv and "--constraints" in argv
        assert not any("torch-backend" in a or "unsafe" in a for a in argv)
    assert "--require-hashes" in sync_argv(s, "uv", "py", "lock", "cons")
    assert "--generate-hashes" in compile_argv(s, "uv", "py", "in", "cons", "out")
    assert index_args(s)[-1] == "first-index"


def test_uv_env_unsets_what_could_change_the_index_or_backend():
    env = uv_env(settings())
    for var in ("UV_TORCH_BACKEND", "UV_INDEX_URL", "UV_EXTRA_INDEX_URL", "UV_INDEX_STRATEGY",
                "UV_INDEX", "UV_CONSTRAINT", "UV_OFFLINE"):
        assert f"-u {var} " in env
    assert "UV_CACHE_DIR=/root/.cache/uv" in env and "UV_PYTHON_DOWNLOADS=never" in env


def test_build_script_builds_beside_the_live_venv_offline_first():
    s = settings(training_requirements=[])
    plan = lock_plan(replace(s, locks_dir="/nonexistent"))
    script = build_script(s, plan, "3.11.2")
    lines = script.splitlines()
    assert lines[0] == "set -e"
    assert "rm -rf -- /root/venvs/torch-2.11.0-cu130.building /root/venvs/torch-2.11.0-cu130.next" in script
    assert lines[-1] == "mv /root/venvs/torch-2.11.0-cu130.building /root/venvs/torch-2.11.0-cu130.next"
    # nothing but .building/.next of this build is removed; the live link is never touched
    assert [l for l in lines if "rm " in l] == [lines[2]]
    assert "/root/venv " not in script and "/root/venv'" not in script
    offline = script.index("pip sync")
    assert "--offline" in script[offline:script.index("; else ", offline)]
    assert script.index("package_index_url=", offline) < script.index("pip sync", offline + 1)
    assert "pip compile" in script  # pins: resolved with hashes in the container
    again = build_script(s, plan, "3.11.2", resolved_locks=[f"{plan.sha256}.txt"])
    assert "pip compile" not in again and f"resolved-locks/{plan.sha256}.txt" in again


def test_uv_error_condenses_uv_output_to_one_line():
    lines = ["  × No solution found when resolving dependencies:",
             "  ╰─▶ Because there is no version of torch==2.11.0+cu128 and you require "
             "torch==2.11.0+cu128, we can conclude that your requirements are unsatisfiable."]
    assert uv_error(lines).startswith("No solution found when resolving dependencies: Because there")
    assert uv_error(["error: Failed to fetch: `http://x/`", "  Caused by: connection refused"]) == \
        "Failed to fetch: `http://x/` connection refused"
    assert uv_error(["plain"]) is None


def test_python_version_is_checked_against_the_interpreter():
    s = settings()
    assert _python_problem({"python": {"version": "3.11.2"}}, s) is None
    line = _python_problem({"python": {"version": "3.13.5"}}, s)
    assert line.startswith("python_interpreter=/usr/bin/python3 is Python 3.13.5, python_version=3.11")
    assert "does not run" in _python_problem({"python": {"version": None}}, s)


def test_bad_python_version_is_a_settings_error():
    with pytest.raises(SettingsError, match=r"python_version='3' is not a Python version"):
        settings(python_version="3")


# --- drift ----------------------------------------------------------------------------------------
def test_drift_reports_every_kind():
    d = drift({"torch": "2.11.0", "Sglang_Junk": "0.1.0", "numpy": "2.0.0"},
              {"torch": "2.11.0+cu130", "numpy": "2.3.0", "transformers": "5.6.0"})
    assert d.as_dict() == {
        "extra": {"sglang-junk": "0.1.0"}, "missing": {"transformers": "5.6.0"},
        "wrong_version": {"numpy": ["2.0.0", "2.3.0"]},
        "wrong_variant": {"torch": ["2.11.0", "2.11.0+cu130"]},
    }
    assert d.lines()[0] == ("torch is 2.11.0, the lock says 2.11.0+cu130 "
                            "(wrong variant: PyPI's unlabeled build, not the cu130 build)")
    assert not drift({"torch": "2.11.0+cu130"}, {"torch": "2.11.0+cu130"})


def state_with(s: Settings, plan, installed=None, **extra) -> dict:
    real = f"{s.build_name}.b1"
    entry = {"path": f"/root/venvs/{real}", "build": marker(s, plan, "3.11.2"), "python_ok": True,
             "built": 100, "selected_at": 100, "in_use": [],
             "installed": installed if installed is not None else {"torch": "2.11.0+cu130"},
             "locked": {"torch": "2.11.0+cu130"}}
    venvs = {real: entry, s.build_name: dict(entry, link=real, real=real)}
    doc = {"python": {"version": "3.11.2"}, "venvs": venvs, "venv_link": s.build_venv,
           "venv_real": f"/root/venvs/{real}"}
    doc.update(extra)
    return doc


def test_build_reasons():
    s = settings(training_requirements=[])
    plan = lock_plan(s)
    assert build_reasons(state_with(s, plan), s, plan) == []
    assert build_reasons({"venvs": {}}, s, plan) == ["torch-2.11.0-cu130 is not built yet"]
    polluted = state_with(s, plan, {"torch": "2.11.0+cu128", "sglang-junk": "0.1.0"})
    assert build_reasons(polluted, s, plan) == [
        "torch-2.11.0-cu130: torch is 2.11.0+cu128, the lock says 2.11.0+cu130 (wrong variant: "
        "the cu128 build, not cu130)",
        "torch-2.11.0-cu130: sglang-junk 0.1.0 is installed but not in the lock (extra)",
    ]
    assert drift_report(polluted, s)[1] == ("/root/venv (torch-2.11.0-cu130.b1): sglang-junk 0.1.0 "
                                            "is installed but not in the lock (extra)")
    other = lock_plan(replace(s, training_requirements=("transformers==5.6.0",)))
    assert "its lock input changed" in build_reasons(state_with(s, plan), s, other)[0]
    newer_python = state_with(s, plan, python={"version": "3.12.1"})
    assert "python version changed (3.11 -> 3.12)" in build_reasons(newer_python, s, plan)[0]
    leftover = state_with(s, plan)
    leftover["venvs"]["torch-2.11.0-cu130.next"] = {"path": "x"}
    assert "unchecked build torch-2.11.0-cu130.next" in build_reasons(leftover, s, plan)[0]


# --- pruning --------------------------------------------------------------------------------------
def real(build, n, selected_at, in_use=(), made=True):
    return {"path": f"/root/venvs/{build}.b{n}", "build": {"build": build} if made else None,
            "selected_at": selected_at, "built": selected_at, "in_use": list(in_use)}


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
        links={"torch-2.11.0-cu130": "torch-2.11.0-cu130.b1", "torch-2.11.0-cu128": "torch-2.11.0-cu128.b1",
               "torch-2.10.0-cu128": "torch-2.10.0-cu128.b1"},
        live="torch-2.11.0-cu130.b1",
    )
    remove, in_use = prune_plan(st, s)
    assert sorted(remove) == ["torch-2.10.0-cu128", "torch-2.10.0-cu128.b1", "torch-2.11.0-cu130.building"]
    assert in_use == []
    assert prune_plan(st, replace(s, keep_venvs=3))[0] == ["torch-2.11.0-cu130.building"]


def test_prune_never_removes_the_live_one_or_one_in_use():
    s = settings(keep_venvs=1)
    st = layout(
        ("torch-2.11.0-cu130.b2", real("torch-2.11.0-cu130", 2, 400)),
        ("torch-2.11.0-cu130.b1", real("torch-2.11.0-cu130", 1, 300, in_use=[4242])),
        ("torch-2.11.0-cu128.b1", real("torch-2.11.0-cu128", 1, 200)),
        links={"torch-2.11.0-cu130": "torch-2.11.0-cu130.b2", "torch-2.11.0-cu128": "torch-2.11.0-cu128.b1"},
        live="torch-2.11.0-cu128.b1",  # a failed switch left the other build live
    )
    remove, in_use = prune_plan(st, s)
    assert remove == []
    assert in_use == ["torch-2.11.0-cu130.b1"]
    st["venv_real"] = "/root/venvs/torch-2.11.0-cu130.b2"
    remove, in_use = prune_plan(st, s)
    assert sorted(remove) == ["torch-2.11.0-cu128", "torch-2.11.0-cu128.b1"]


# --- variants are data ----------------------------------------------------------------------------
def test_a_new_variant_is_one_row_and_its_in_file(tmp_path, monkeypatch):
    monkeypatch.setitem(VARIANTS, "cu126", Variant(
        name="cu126", cuda="12.6", index_path="cu126", min_driver="560.28.03",
        compat_driver="525.60.13", notes="test row"))
    s = settings(torch_variant="cu126", locks_dir=str(tmp_path), training_requirements=[])
    write_locks(tmp_path, s, lock=None)
    assert s.torch_index_url == "https://download.pytorch.org/whl/cu126"
    assert s.torch_pin == "torch==2.11.0+cu126" and s.build_venv == "/root/venvs/torch-2.11.0-cu126"
    plan = lock_plan(s)
    assert plan.text == "torch==2.11.0+cu126\n" and "cu126.lock is missing" in plan.warning
    script = build_script(s, plan, "3.11.2")
    assert "whl/cu126" in script and "cu128" not in script and "cu130" not in script
    assert variants_mod.driver_fit(VARIANTS["cu126"], "570.0") == "ok"


def test_every_variant_has_its_in_file():
    assert sorted(p.stem for p in (ROOT / "locks").glob("*.in")) == sorted(VARIANTS)


# --- the probe, run for real on this machine --------------------------------------------------------
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
        (d / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {name}\nVersion: {ver}\n\nbody\n")
    (real / ".pvegpu-build.json").write_text(json.dumps({"build": "torch-2.11.0-cu130"}))
    (real / ".pvegpu-lock.txt").write_text(f"torch==2.11.0+cu130 \\\n    {HASH}\n    # via -r in\n")
    (venvs / "torch-2.11.0-cu130").symlink_to("torch-2.11.0-cu130.b1")
    (venvs / "torch-2.11.0-cu128.b1").mkdir()
    live = tmp_path / "venv"
    live.symlink_to(venvs / "torch-2.11.0-cu130")
    user = subprocess.Popen(["sleep", "30"], cwd=real)
    try:
        args = {"uv_bin": "/nonexistent/uv", "venvs_dir": str(venvs), "venv_path": str(live),
                "python": sys.executable, "uv_cache_dir": str(tmp_path / "cache")}
        out = subprocess.run(["sh", "-c", probe_command("ct_state", args, python=sys.executable)],
                             capture_output=True, text=True, check=True).stdout
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
        f"{live} (torch-2.11.0-cu130.b1): sglang-junk 0.1.0 is installed but not in the lock (extra)"]

"""The delete guard (pvegpu.guard): every recursive delete the product can run goes through it,
and it refuses any path outside pvegpu's own build directories."""

import re
import subprocess
import sys
from importlib import resources
from pathlib import Path

import pytest

from pvegpu.facts.probe import PRELUDE_IMPORT, PRELUDES, probe_source
from pvegpu.guard import UnsafeDelete, delete_command, delete_refusal, remove_tree

ROOT = Path(__file__).resolve().parents[2]
PRELUDE = resources.files("pvegpu.probes").joinpath("prelude.py").read_text()


@pytest.mark.parametrize(
    "path, venvs_dir",
    [
        ("/data", "/data"),
        ("/", None),
        ("/root", "/root"),
        ("/root/venvs", "/root/venvs"),
        ("/data/checkpoints", "/data"),
        ("/tank/dflash", None),
        ("/opt/pvegpu", None),
        ("/var/lib/pvegpu", None),
        ("/var/lib", None),
        ("/tmp", None),
        ("/tmp/other", None),
        ("/etc/pve/torch-2.11.0-cu130", "/etc/pve"),
        ("/root/venvs/../torch-2.11.0-cu130", "/root/venvs"),
        ("/root/venvs/torch-2.11.0-cu130/..", "/root/venvs"),
        ("/opt/pvegpu/../..", None),
        ("/root/venvs/torch-2.11.0-cu130 /data", "/root/venvs"),
        ("/root/venvs/torch-x", "/root/venvs"),
        ("relative/torch-2.11.0-cu130", "relative"),
        ("/opt/pvegpu/a\n/data", None),
    ],
)
def test_paths_outside_pvegpus_build_dirs_are_refused(path, venvs_dir):
    assert delete_refusal(path, venvs_dir)
    with pytest.raises(UnsafeDelete, match="refusing to delete"):
        delete_command([path], venvs_dir=venvs_dir)


@pytest.mark.parametrize(
    "path, venvs_dir",
    [
        ("/root/venvs/torch-2.11.0-cu130", "/root/venvs"),
        ("/root/venvs/torch-2.11.0-cu130.b12", "/root/venvs"),
        ("/root/venvs/torch-2.11.0-cu128.building", "/root/venvs"),
        ("/root/venvs/torch-2.11.0-cu128.next", "/root/venvs"),
        ("/opt/pvegpu/uv-0.9.5", None),
        ("/opt/pvegpu/.uv-install-abc", None),
        ("/tmp/pvegpu-compile-check-x1", None),
    ],
)
def test_pvegpus_own_build_dirs_may_be_deleted(path, venvs_dir):
    assert delete_command([path], venvs_dir=venvs_dir) == f"rm -rf -- {path}"


def test_one_bad_path_refuses_the_whole_delete():
    with pytest.raises(UnsafeDelete, match="/data"):
        delete_command(["/root/venvs/torch-2.11.0-cu130.b1", "/data"], venvs_dir="/root/venvs")


def test_remove_tree_refuses_before_touching_anything(tmp_path):
    victim = tmp_path / "data"
    victim.mkdir()
    (victim / "ckpt").write_text("x")
    with pytest.raises(UnsafeDelete):
        remove_tree(str(victim))
    assert (victim / "ckpt").read_text() == "x"


def test_the_probes_that_delete_carry_the_guard_and_it_refuses_there(tmp_path):
    # Compared as whole texts, not split at "def": under mutmut guard.py holds many copies.
    guard = resources.files("pvegpu").joinpath("guard.py").read_text()
    netrules = resources.files("pvegpu").joinpath("netrules.py").read_text()
    for name in ("install_uv", "verification"):
        probe = resources.files("pvegpu.probes").joinpath(f"{name}.py").read_text()
        probe = PRELUDE_IMPORT.sub("", probe)
        # a probe's own preludes (pvegpu.facts.probe.PRELUDES) come before it, after the guard
        before = "".join(
            PRELUDE_IMPORT.sub("", resources.files("pvegpu.probes").joinpath(f"{p}.py").read_text())
            + "\n"
            for p in PRELUDES.get(name, ())
        )
        # one that reaches an index gets uv's proxy and CA rules first (pvegpu/netrules.py)
        rules = netrules + "\n" if "site_urlopen(" in probe else ""
        assert probe_source(name) == PRELUDE + "\n" + rules + guard + "\n" + before + probe, name
        assert "def remove_tree(" in guard and "shutil.rmtree(" not in probe, name
    # The guard's source runs on its own, as prepended to a probe, and refuses /.
    code = probe_source("install_uv").split("\nversion, index, home")[0] + "\nremove_tree('/')\n"
    code = "ARGS = '{}'\n" + code
    # on stdin, not -c: under mutmut the guard and netrules carry its trampolines, past the
    # kernel's limit on one argument
    p = subprocess.run([sys.executable, "-"], input=code, capture_output=True, text=True)
    assert p.returncode != 0 and "UnsafeDelete: refusing to delete /:" in p.stderr


# Every way to delete a tree, as it would be written in the product's code or templates.
DELETES = re.compile(
    r"\brm\s+(-[A-Za-z]*[rR]|--recursive)|rmtree|(?<!-)-delete\b|removedirs|"
    r"\bfind\b.*-exec\s+rm"
)
# The only places allowed to hold one: the guard itself, and NVIDIA's own runtime directory in
# the node's nvidia-persistenced unit (a fixed path no setting reaches; NVIDIA's sample unit does
# the same).
ALLOWED = {
    ("src/pvegpu/guard.py", "shutil.rmtree(path, ignore_errors=ignore_errors)"),
    (
        "templates/nvidia-persistenced.service.j2",
        "ExecStopPost=/bin/rm -rf /run/nvidia-persistenced",
    ),
}


def test_every_recursive_delete_of_the_product_goes_through_the_guard():
    found = set()
    files = [
        *ROOT.glob("src/**/*.py"),
        *ROOT.glob("tasks/*.py"),
        *ROOT.glob("templates/*"),
        ROOT / "deploy.py",
        ROOT / "verify.py",
        ROOT / "inventory.py",
    ]
    for path in files:
        for line in path.read_text().splitlines():
            code = line.split("#", 1)[0] if path.suffix == ".py" else line
            if DELETES.search(code) and '"""' not in code and not code.strip().startswith(">>>"):
                found.add((str(path.relative_to(ROOT)), line.strip()))
    guard_lines = {f for f in found if f[0] == "src/pvegpu/guard.py"}
    assert found - guard_lines - ALLOWED == set()
    assert (
        "src/pvegpu/guard.py",
        'return "rm -rf -- " + " ".join(shlex.quote(p) for p in checked)',
    ) in guard_lines

"""The preflight's refusals and their consents (startup/preflight.py, startup/adoption_plan.py,
startup/site_preflight.py, plan/toolchain.py): refuse or wait for a restart a training blocks,
adopt=true, destroy_volumes=true, the adoption plan, the free space against the build's estimate,
the container lock, the Fabric Manager states and the toolchain's apt when one source is down
(issue 35)."""

from __future__ import annotations

import os
import stat
import subprocess

import pytest

from pvegpu.plan.toolchain import install_toolchain_script
from pvegpu.startup.adoption_plan import adoption_lines
from pvegpu.startup.preflight import node_problems
from pvegpu.startup.site_preflight import (
    BUILD_ESTIMATE_GIB,
    disk_problem,
    fabric_problems,
    lock_problem,
)
from tests.unit.test_preflight import node, running_ct, settings

HAND = {
    "pid": 4242,
    "ppid": 1,
    "argv": ["/root/venv/bin/python", "/data/dflash/train.py"],
    "cwd": "/data/dflash",
    "cgroup": "0::/lxc/200/ns/user.slice/user-0.slice/session-3.scope",
}


def test_a_restart_a_users_training_blocks_waits_and_one_of_our_unit_is_refused():
    ct = running_ct(uvm_major_in_ct=508, unit="inactive")
    ct["processes"] = [HAND]  # not holding a GPU yet: known by its script
    problems, _ = node_problems(settings(), node(containers={"200": ct}), "n1", [200])
    assert problems == []  # the passthrough operation waits for it (and lists it)
    ours = running_ct(uvm_major_in_ct=508, unit="active")
    problems, _ = node_problems(settings(), node(containers={"200": ours}), "n1", [200])
    assert len(problems) == 1 and "dflash-train.service is running in it" in problems[0]


def test_a_container_pvegpu_did_not_make_needs_adopt_and_no_other_consent():
    ct = running_ct()
    ct["config"]["tags"] = "ml"
    state = node(containers={"200": ct})
    for other in ({}, {"restart_training": True}, {"destroy_volumes": True}):
        problems, _ = node_problems(settings(**other), state, "n1", [200])
        assert any("adopt=true to adopt it" in p for p in problems), other
    assert node_problems(settings(adopt=True), state, "n1", [200])[0] == []


def test_rebuild_container_destroys_a_storage_volume_only_with_destroy_volumes():
    ct = running_ct()
    ct["config"]["mp1"] = "local-lvm:vm-200-disk-1,mp=/scratch"
    state = node(containers={"200": ct})
    for other in ({}, {"adopt": True}, {"restart_training": True}):
        problems, warnings = node_problems(
            settings(rebuild="container", **other), state, "n1", [200]
        )
        assert any("would destroy storage-backed mp1" in p for p in problems), other
        purge = "storage-backed mp1 (local-lvm:vm-200-disk-1 at /scratch) is destroyed"
        assert f"n1: rebuild=container: {purge}" in warnings
    problems, _ = node_problems(
        settings(rebuild="container", destroy_volumes=True), state, "n1", [200]
    )
    assert problems == []


def test_the_adoption_plan_names_a_training_that_holds_no_gpu_yet():
    ct = running_ct()
    ct["processes"] = [HAND]
    lines = adoption_lines(settings(), node(containers={"200": ct}), "pve1", 200)
    assert lines[0] == (
        "pve1: CT 200 already trains (pid 4242, started by hand: /root/venv/bin/python "
        "/data/dflash/train.py); adoption plan:"
    )
    assert adoption_lines(settings(), node(containers={"200": running_ct()}), "pve1", 200) == []


def test_a_unit_of_ours_under_an_earlier_name_is_no_boot_starter():
    ct = running_ct()
    old = {
        "id": "old-train.service",
        "file_state": "enabled",
        "active": "inactive",
        "exec": [["/root/venv/bin/python", "/data/dflash/train.py"]],
        "wd": None,
    }
    ct["live"].update(units=[old], other_units={"old-train.service": "inactive"}, crons=[])
    from pvegpu.plan.adoption import boot_starters
    from pvegpu.plan.running_training import match_of

    s = settings()
    match = match_of(s.training, s.python_env)
    assert boot_starters(ct, match, "dflash-train.service") == []
    ct["live"]["other_units"] = {}
    assert boot_starters(ct, match, "dflash-train.service") == [
        "old-train.service is enabled (/root/venv/bin/python /data/dflash/train.py)"
    ]


# --- the site preflights -------------------------------------------------------------------------

KIB_PER_GIB = 1024 * 1024


@pytest.mark.parametrize("min_free", [1, 5])
def test_free_space_is_checked_against_the_builds_estimate_not_only_the_floor(min_free):
    assert min_free < BUILD_ESTIMATE_GIB
    short = {"live": {"root_free_kib": (BUILD_ESTIMATE_GIB - 1) * KIB_PER_GIB}}
    line = disk_problem(short, "n1", 200, min_free)
    assert line is not None and f"needs {BUILD_ESTIMATE_GIB} GiB" in line
    enough = {"live": {"root_free_kib": BUILD_ESTIMATE_GIB * KIB_PER_GIB}}
    assert disk_problem(enough, "n1", 200, min_free) is None


@pytest.mark.parametrize("lock", ["backup", "migrate", "snapshot", "create", "mounted"])
def test_a_container_locked_in_its_config_is_refused(lock):
    line = lock_problem({"config": {"lock": lock}}, "n1", 200)
    assert line is not None and line.startswith(f"n1: CT 200 is locked ({lock})")
    problems, _ = node_problems(
        settings(),
        node(
            containers={"200": {**running_ct(), "config": {**running_ct()["config"], "lock": lock}}}
        ),
        "n1",
        [200],
    )
    assert any(p.startswith(f"n1: CT 200 is locked ({lock})") for p in problems)


FM_UNIT = {
    "nvidia-fabricmanager.service": {
        "path": "/lib/systemd/system/nvidia-fabricmanager.service",
        "enabled": True,
        "active": "active",
    }
}


@pytest.mark.parametrize(
    "state, status, refused",
    [
        ("Completed", "Success", False),
        ("Completed", "Failure", True),  # registration finished, and failed
        ("In Progress", "N/A", True),
        ("Not Started", "N/A", True),
        ("N/A", "N/A", False),  # no fabric (a PCIe board)
    ],
)
def test_fabric_manager_states(state, status, refused):
    doc = {
        "fabric": [{"uuid": "GPU-1", "state": state, "status": status}],
        "units": FM_UNIT,
        "driver_version": "580.95.05",
        "fabricmanager_version": "580.95.05",
    }
    problems, _ = fabric_problems(doc, "n1")
    assert bool(problems) == refused, problems


# --- the toolchain's apt-get, run by a real /bin/sh with apt-get and dpkg-query faked -----------


@pytest.fixture
def fake_apt(tmp_path, monkeypatch):
    """apt-get whose `update` fails as with one source down and whose `install` records its
    arguments; dpkg-query that knows libpython3.11-stdlib 3.11.2-6."""
    calls = tmp_path / "calls"
    bindir = tmp_path / "bin"
    bindir.mkdir()
    tools = {
        "apt-get": (
            '#!/bin/sh\necho "$*" >> ' + str(calls) + "\n"
            'case "$*" in *update*) echo "E: Failed to fetch http://down.example/dists/x '
            '404"; exit 100;; esac\nexit 0\n'
        ),
        "dpkg-query": "#!/bin/sh\nprintf 3.11.2-6\n",
    }
    for name, text in tools.items():
        (bindir / name).write_text(text)
        (bindir / name).chmod((bindir / name).stat().st_mode | stat.S_IXUSR)
    monkeypatch.setenv("PATH", f"{bindir}{os.pathsep}{os.environ['PATH']}")
    return calls


@pytest.mark.parametrize(
    "pinned, dev", [(True, "libpython3.11-dev=3.11.2-6"), (False, "libpython3.11-dev")]
)
def test_the_toolchain_installs_when_one_apt_source_is_down(fake_apt, pinned, dev):
    # pinned to the installed stdlib only where a training runs on it; unpinned otherwise, so a
    # template older than its archive (which keeps only the newest version) still installs
    script = install_toolchain_script(200, ["gcc", "libpython3.11-dev"], pinned=pinned)
    done = subprocess.run(["/bin/sh", "-c", script], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    assert fake_apt.read_text().splitlines() == [
        "-q update",
        f"-q install -y --no-install-recommends gcc {dev}",
    ]

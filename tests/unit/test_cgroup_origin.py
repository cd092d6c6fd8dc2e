"""Issue 35 (mutmut on plan/cgroup_origin.py): which container a process is in and what started
it, from /proc/<pid>/cgroup text as cgroup v2 and hybrid v1 hosts write it."""

from __future__ import annotations

import pytest

from pvegpu.plan.cgroup_origin import HAND, container_path, started_by, started_how


def test_a_monitor_line_is_skipped_and_the_lines_after_it_still_read():
    text = "1:name=systemd:/lxc.monitor/200\n0::/lxc/200/ns/system.slice/t.service"
    assert container_path(text, 200) == "/ns/system.slice/t.service"
    # a nested container's monitor, even below CT 200's own cgroup, is no process of it
    assert container_path("0::/lxc/200/ns/lxc.monitor.300", 200) is None


def test_hybrid_hosts_take_the_longest_path_not_the_last_in_sort_order():
    text = "4:memory:/lxc/200/ns/z\n0::/lxc/200/ns/system.slice/t.service\n2:cpu:/lxc/200"
    assert container_path(text, 200) == "/ns/system.slice/t.service"


@pytest.mark.parametrize(
    ("text", "vmid", "path"),
    [
        ("0::/lxc/200", 200, ""),
        ("0::/lxc/2000/ns/init.scope", 200, None),
        ("0::/lxc/200/ns/init.scope", 20, None),
        ("0::/lxc.payload.200/init.scope", 200, "/init.scope"),
        ("0::/lxc.payload/200/init.scope", 200, "/init.scope"),
        ("  0::/lxc/200/ns/init.scope  ", 200, "/ns/init.scope"),
        ("0::/system.slice/pve-container@200.service", 200, None),
        (None, 200, None),
    ],
)
def test_container_path_of_each_layout(text, vmid, path):
    assert container_path(text, vmid) == path


@pytest.mark.parametrize(
    ("path", "by"),
    [
        ("/ns/system.slice/train.service", "train.service"),
        ("/ns/system.slice/train.service/extra.scope", "train.service"),
        ("/ns/system.slice/a.service/b.service", "b.service"),
        ("/ns/user.slice/user-0.slice/user@0.service/app.slice/x.service", "x.service"),
        ("/ns/user.slice/user-0.slice/user@0.service/init.scope", HAND),
        ("/ns/init.scope", HAND),
        ("", HAND),
        ("//", HAND),
        ("/service", HAND),
    ],
)
def test_started_by_is_the_innermost_service_or_by_hand(path, by):
    assert started_by(path) == by


def test_started_how_names_the_unit_or_says_by_hand():
    assert started_how("/ns/system.slice/train.service") == "under train.service"
    assert started_how("/ns/user.slice/user-0.slice/session-3.scope") == "started by hand"
    assert started_how("/ns/user.slice/user-0.slice/user@0.service") == "started by hand"


def test_a_unit_name_with_a_colon_and_a_cgroup_dir_with_a_blank_keep_their_whole_path():
    # systemd allows ":" in unit names; a cgroup made by hand may hold a blank
    text = "1:name=systemd:/lxc/200/ns/system.slice/train:v2.service"
    assert container_path(text, 200) == "/ns/system.slice/train:v2.service"
    assert container_path("0::" + text.split(":", 2)[2], 200) == (
        "/ns/system.slice/train:v2.service"
    )
    assert started_by(container_path(text, 200)) == "train:v2.service"
    assert container_path("0::/lxc/200/ns/my jobs/run.scope", 200) == "/ns/my jobs/run.scope"

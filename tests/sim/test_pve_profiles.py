"""The simulated node's Proxmox VE 8 and 9 profiles against the real tools' source
(proxmox/pve-manager bin/pveversion + PVE/API2/APT.pm; proxmox/pve-container src/PVE/API2/LXC.pm
create, src/PVE/LXC/Config.pm update_pct_config + vmconfig_hotplug_pending, 5.2.6 vs 6.0.18;
proxmox/dab-pve-appliances dab.conf for template names)."""

import pytest

from sim.fixtures import _factory

T8 = "local:vztmpl/debian-12-standard_12.7-1_amd64.tar.zst"
T9 = "local:vztmpl/debian-13-standard_13.1-2_amd64.tar.zst"


@pytest.fixture(scope="module")
def nodes(tmp_path_factory):
    make, finish = _factory(tmp_path_factory)
    try:
        yield {"pve8": make(gpus=2), "pve9": make(gpus=2, profile="pve9")}
    finally:
        finish()


def pct(node, *args):
    return node.run(["pct", *args])


def conf(node, vmid):
    return node.read(f"/etc/pve/lxc/{vmid}.conf")


def fresh_ct(node, vmid, template, *extra, start=True):
    pct(node, "destroy", str(vmid), "--force")
    r = pct(node, "create", str(vmid), template, "--rootfs", "local-lvm:8", *extra)
    assert r.returncode == 0, r.stderr
    if start:
        assert pct(node, "start", str(vmid)).returncode == 0


def test_pveversion_prints_what_pve_manager_prints(nodes):
    n9 = nodes["pve9"]
    assert (
        n9.run(["pveversion"]).stdout
        == "pve-manager/9.1.1/f4d3f125ffae50e9 (running kernel: 6.17.2-1-pve)\n"
    )
    lines = n9.run(["pveversion", "--verbose"]).stdout.splitlines()
    assert lines[:4] == [
        "proxmox-ve: 9.1.0 (running kernel: 6.17.2-1-pve)",
        "pve-manager: 9.1.1 (running version: 9.1.1/f4d3f125ffae50e9)",
        "proxmox-kernel-6.17.2-1-pve-signed: 6.17.2-1",
        "proxmox-kernel-6.17: 6.17.2-1",
    ]
    rest = [line.split(":")[0] for line in lines[4:]]
    assert rest == sorted(rest) and "pve-container: 6.0.18" in lines
    assert "pve-container: 5.2.6" in nodes["pve8"].run(["pveversion", "-v"]).stdout
    bad = n9.run(["pveversion", "--bogus"])
    assert (bad.returncode, bad.stdout) == (255, "")
    assert bad.stderr == "Unknown option: bogus\nUSAGE: pveversion [--verbose]\n"


def test_each_profile_has_its_debian_template_and_python(nodes):
    for name, template, debian, python in (
        ("pve8", T8, "12.", "3.11"),
        ("pve9", T9, "13.", "3.13"),
    ):
        node = nodes[name]
        assert node.run(["ls", "/var/lib/vz/template/cache"]).stdout.split() == [
            template.split("/")[-1]
        ]
        fresh_ct(node, 300, template)
        assert node.ct_run(300, ["cat", "/etc/debian_version"]).stdout.startswith(debian)
        got = node.ct_run(
            300, ["python3", "-c", "import sys; print(*sys.version_info[:2], sep='.')"]
        )
        assert got.stdout.strip() == python, name


def test_create_writes_unprivileged_only_when_true_and_defaults_it_on_9(nodes):
    for name, template, default in (("pve8", T8, None), ("pve9", T9, "1")):
        node = nodes[name]
        fresh_ct(node, 301, template, start=False)
        lines = conf(node, 301).splitlines()
        assert [x for x in lines if x.startswith("unprivileged")] == (
            [f"unprivileged: {default}"] if default else []
        ), name
        fresh_ct(node, 301, template, "--unprivileged", "0", start=False)
        assert "unprivileged" not in conf(node, 301), name
        fresh_ct(node, 301, template, "--unprivileged", "1", start=False)
        assert "unprivileged: 1" in conf(node, 301).splitlines(), name


def test_an_added_devn_is_hotplugged_on_9_and_pending_on_8(nodes):
    for name, template in (("pve8", T8), ("pve9", T9)):
        node = nodes[name]
        fresh_ct(node, 302, template, "--unprivileged", "0")
        assert pct(node, "set", "302", "--dev0", "/dev/nvidia0").returncode == 0
        seen = node.ct_run(302, ["test", "-c", "/dev/nvidia0"]).returncode == 0
        main = conf(node, 302).split("[pve:pending]")[0]
        if name == "pve9":
            assert seen and "dev0: /dev/nvidia0" in main.splitlines()
        else:
            assert not seen and "dev0" not in main
            assert pct(node, "reboot", "302").returncode == 0
            assert node.ct_run(302, ["test", "-c", "/dev/nvidia0"]).returncode == 0


def test_an_edited_or_removed_devn_waits_for_the_next_start_on_both(nodes):
    for name, template in (("pve8", T8), ("pve9", T9)):
        node = nodes[name]
        fresh_ct(node, 303, template, "--unprivileged", "0", "--dev0", "/dev/nvidia0")
        assert pct(node, "set", "303", "--dev0", "/dev/nvidia1").returncode == 0
        assert "[pve:pending]\ndev0: /dev/nvidia1" in conf(node, 303), name
        assert node.ct_run(303, ["test", "-e", "/dev/nvidia1"]).returncode == 1
        assert pct(node, "set", "303", "--revert", "dev0", "--delete", "dev0").returncode == 0
        assert "[pve:pending]\ndelete: dev0" in conf(node, 303), name
        assert node.ct_run(303, ["test", "-c", "/dev/nvidia0"]).returncode == 0


def test_running_ct_hotplug_rules_of_update_pct_config(nodes):
    node = nodes["pve9"]
    fresh_ct(node, 304, T9, "--unprivileged", "0")
    node.run(["mkdir", "-p", "/srv/a", "/srv/b"], check=True)
    assert (
        pct(
            node,
            "set",
            "304",
            "--mp0",
            "/srv/a,mp=/a",
            "--memory",
            "1024",
            "--nameserver",
            "127.0.0.1",
        ).returncode
        == 0
    )
    main, _, pending = conf(node, 304).partition("[pve:pending]")
    assert "mp0: /srv/a,mp=/a" in main and "memory: 1024" in main  # new mp, memory: at once
    assert "nameserver: 127.0.0.1" in pending  # not hot-pluggable
    assert pct(node, "set", "304", "--mp0", "/srv/b,mp=/b").returncode == 0
    assert "mp0: /srv/b,mp=/b" in conf(node, 304).partition("[pve:pending]")[2]  # edit: pending


def test_a_devn_that_is_no_device_is_refused_with_pve_containers_message(nodes):
    node = nodes["pve9"]
    fresh_ct(node, 305, T9, start=False)
    r = pct(node, "set", "305", "--dev0", "/dev/pts")
    assert (r.returncode, r.stderr) == (255, "/dev/pts is not a device\n")


def test_pve_guests_unit_is_pve_managers(nodes):
    # proxmox/pve-manager services/pve-guests.service (unchanged from 8.4.1 to 9.x)
    for node in nodes.values():
        lines = node.read("/lib/systemd/system/pve-guests.service").splitlines()
        for line in (
            "Type=oneshot",
            "RemainAfterExit=yes",
            "WantedBy=multi-user.target",
            "ExecStart=/usr/bin/pvesh --nooutput create /nodes/localhost/startall",
            "After=lxc.service",
            "TimeoutSec=infinity",
        ):
            assert line in lines


def test_a_failed_hotplug_writes_no_config_but_keeps_the_earlier_devices(nodes):
    """pve-container >= 6.0.4: vmconfig_hotplug_pending hot-plugs each added devN in key order
    and collects failures; update_vm then writes no config at all ("don't write to config if we
    get any errors", commit 11190ad) and exits 255, while devices hot-plugged before the failing
    one stay in the running container."""
    node = nodes["pve9"]
    fresh_ct(node, 306, T9, "--unprivileged", "0")
    node.fail_device_hotplug("/dev/nvidia1")
    try:
        before = conf(node, 306)
        r = pct(node, "set", "306", "--dev0", "/dev/nvidia0", "--dev1", "/dev/nvidia1")
        assert r.returncode == 255
        assert r.stderr.startswith(
            "400 Parameter verification failed.\ndev1: unable to hotplug dev1: move_mount failed: "
        )
        assert conf(node, 306) == before
        assert node.ct_run(306, ["test", "-c", "/dev/nvidia0"]).returncode == 0
        assert node.ct_run(306, ["test", "-e", "/dev/nvidia1"]).returncode == 1
        # one devN per call: the one that worked is written, the failing one alone fails
        assert pct(node, "set", "306", "--dev0", "/dev/nvidia0").returncode == 0
        assert pct(node, "set", "306", "--dev1", "/dev/nvidia1").returncode == 255
        assert "dev0: /dev/nvidia0" in conf(node, 306) and "dev1" not in conf(node, 306)
    finally:
        node.fail_device_hotplug()


def test_pve_8_1_writes_a_devn_it_does_not_check_and_fails_at_the_next_start(tmp_path_factory):
    """pve-container 5.0.7-5.0.9 (PVE 8.1) check a devN path only in update_lxc_config, after
    the config is written (fixed in 5.0.10 by commit 556ddd3): a stopped CT's `pct set` dies
    with the entry written; the start then fails on it."""
    make, finish = _factory(tmp_path_factory)
    try:
        node = make(gpus=1, pve_version="8.1.4")
        assert "pve-container: 5.0.8" in node.run(["pveversion", "-v"]).stdout
        fresh_ct(node, 307, T8, "--unprivileged", "0", start=False)
        r = pct(node, "set", "307", "--dev0", "/dev/nvidia9")
        assert (r.returncode, r.stderr) == (255, "Device /dev/nvidia9 does not exist\n")
        assert "dev0: /dev/nvidia9" in conf(node, 307).splitlines()
        start = pct(node, "start", "307")
        assert start.returncode == 255 and "Device /dev/nvidia9 does not exist" in start.stderr
    finally:
        finish()

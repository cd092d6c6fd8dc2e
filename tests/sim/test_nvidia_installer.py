"""The NVIDIA .run installer double and the container template it runs in (kmod or not, apt).

What the real installer does is in docs/real-tools.md, "nvidia-installer" (NVIDIA/nvidia-installer
590.48.01: nvidia-installer.c main(), misc.c find_system_utils/find_module_utils)."""

import pytest

TEMPLATE = "local:vztmpl/debian-12-standard_12.7-1_amd64.tar.zst"
DRIVER = "580.95.05"
RUN = f"/root/NVIDIA-Linux-x86_64-{DRIVER}.run"

MODPROBE_MISSING = (
    "\nERROR: Unable to find the module utility `modprobe`; please make sure you have the package "
    "'module-init-tools' or 'kmod' installed.  If you do have 'module-init-tools' or 'kmod' "
    "installed, then please check that `modprobe` is in your PATH.\n\n"
)


def ct(node, vmid=200):
    """A started container with the node's installer pushed to /root/x.run."""
    for args in (
        ["create", str(vmid), TEMPLATE, "--unprivileged", "0", "--rootfs", "local-lvm:4"],
        ["start", str(vmid)],
        ["push", str(vmid), RUN, "/root/x.run"],
    ):
        r = node.run(["pct", *args])
        assert r.returncode == 0, r.stderr
    return node


def install(node, *options, vmid=200):
    return node.run(["pct", "exec", str(vmid), "--", "sh", "/root/x.run", *options])


def installed(node, vmid=200) -> bool:
    libcuda = "/usr/lib/x86_64-linux-gnu/libcuda.so.1"
    return node.ct_run(vmid, ["test", "-e", libcuda]).returncode == 0


@pytest.mark.parametrize("option", ["--no-kernel-modules", "--no-kernel-module"])  # + its alias
def test_userspace_installs_where_every_utility_is_there(sim_node, option):
    node = ct(sim_node())
    r = install(node, "--silent", option)
    assert r.returncode == 0, r.stderr
    # the makeself stub's lines come even with --silent
    assert r.stdout.startswith("Verifying archive integrity... OK\nUncompressing NVIDIA")
    assert installed(node)


def test_aborts_without_kmod_even_with_no_kernel_modules(sim_node):
    node = ct(sim_node(template_kmod=False))
    r = install(node, "--silent", "--no-kernel-modules")
    assert (r.returncode, r.stderr) == (1, MODPROBE_MISSING)
    assert not installed(node)
    log = node.ct_run(200, ["cat", "/var/log/nvidia-installer.log"]).stdout
    assert "ERROR: Unable to find the module utility `modprobe`" in log


@pytest.mark.parametrize(
    "tool, package, remove",
    [
        # a file without an execute bit does not count (find_system_util: S_IXUSR|S_IXGRP|S_IXOTH)
        ("ldconfig", "glibc", "chmod a-x /sbin/ldconfig"),
        ("dmesg", "util-linux", "rm /usr/bin/dmesg"),
        ("rmmod", "module-init-tools' or 'kmod", "rm /sbin/rmmod"),
    ],
)
def test_aborts_on_the_first_missing_utility_in_its_order(sim_node, tool, package, remove):
    node = ct(sim_node())
    node.ct_run(200, ["sh", "-c", remove], check=True)
    r = install(node, "--silent", "--no-kernel-modules")
    kind = "module" if tool == "rmmod" else "system"
    quoted = f"'{package}'" if tool == "rmmod" else package
    assert r.returncode == 1
    assert r.stderr == (
        f"\nERROR: Unable to find the {kind} utility `{tool}`; please make sure you have the "
        f"package '{package}' installed.  If you do have {quoted} installed, then please check "
        f"that `{tool}` is in your PATH.\n\n"
    )
    assert not installed(node)


# --no-kernel-module-source only skips installing the module's source: the modules are still due
@pytest.mark.parametrize("options", [["--silent"], ["--silent", "--no-kernel-module-source"]])
def test_without_no_kernel_modules_it_refuses_in_a_container(sim_node, options):
    node = ct(sim_node())
    r = install(node, *options)
    assert r.returncode == 1
    assert "\nWARNING: An NVIDIA kernel module 'nvidia' appears to be already loaded" in r.stderr
    assert r.stderr.endswith(
        "\nERROR: Installation has failed.  Please see the file '/var/log/nvidia-installer.log' "
        "for details.  You may find suggestions on fixing installation problems in the README "
        "available on the Linux driver download page at www.nvidia.com.\n\n"
    )
    assert not installed(node)


def test_template_without_kmod_gets_it_from_the_loopback_mirror(sim_node, kmod_mirror):
    node = ct(sim_node(template_kmod=False, apt_mirror=kmod_mirror.url))
    run = lambda script: node.ct_run(200, ["sh", "-c", script])  # noqa: E731
    assert run("dpkg -s kmod").returncode == 1
    assert run("ls /sbin/modprobe /sbin/lsmod /bin/kmod 2>/dev/null").stdout == ""
    assert run("for t in grep tail dmesg ldconfig; do command -v $t; done").stdout.count("\n") == 4
    # a cleaned template: no lists, no cached .debs; apt names only the site's mirror
    assert run("ls /var/lib/apt/lists /var/cache/apt/archives").stdout.split() == [
        "/var/cache/apt/archives:",
        "partial",
        "/var/lib/apt/lists:",
        "partial",
    ]
    assert run("cat /etc/apt/sources.list; ls /etc/apt/sources.list.d").stdout == (
        kmod_mirror.source_line + "\n"
    )
    r = run(
        "DEBIAN_FRONTEND=noninteractive apt-get -q update && "
        "DEBIAN_FRONTEND=noninteractive apt-get -q install -y --no-install-recommends kmod"
    )
    assert r.returncode == 0, r.stdout + r.stderr
    assert kmod_mirror.downloads() == [kmod_mirror.debs[0].name]
    assert run("dpkg -s kmod | grep -x 'Status: install ok installed'").returncode == 0
    assert install(node, "--silent", "--no-kernel-modules").returncode == 0


def test_template_without_an_apt_source_cannot_install_anything(sim_node):
    node = ct(sim_node(template_kmod=False))
    assert node.ct_run(200, ["cat", "/etc/apt/sources.list"]).stdout == ""
    r = node.ct_run(200, ["sh", "-c", "apt-get -q update && apt-get -q install -y kmod"])
    assert r.returncode == 100
    assert "E: Unable to locate package kmod" in r.stderr


def test_refuses_unless_root(sim_node):
    node = ct(sim_node())
    r = node.ct_run(
        200,
        [
            "sh",
            "-c",
            "cp /root/x.run /tmp/x.run && setpriv --reuid 65534 --regid "
            "65534 --clear-groups sh /tmp/x.run --silent --no-kernel-modules",
        ],
    )
    assert r.returncode == 1
    assert r.stderr == (
        "nvidia-installer: Error opening log file '/var/log/nvidia-installer.log' for writing "
        "(Permission denied); disabling logging.\n"
        "\nERROR: nvidia-installer must be run as root\n\n"
    )

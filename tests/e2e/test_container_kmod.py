"""The container stage meets what NVIDIA's installer needs even with --no-kernel-modules: from a
template without kmod it installs kmod from the container's own apt sources (the site's Debian
mirror, on loopback), or stops with one line before the installer runs."""

from __future__ import annotations

import pytest

KMOD_LINE = (
    "CT 200 lacks kmod (modprobe, rmmod, lsmod, depmod), which the NVIDIA installer needs, and "
    "apt-get could not install it (E: Unable to locate package kmod): give CT 200 an apt source "
    "that has kmod (e.g. the site's Debian mirror) or install kmod in it, then deploy again"
)


def kmod_status(site) -> str:
    return site.ct("dpkg-query", "-W", "-f=${Status}", "kmod").stdout


def test_a_template_without_kmod_gets_it_from_the_mirror_then_nothing_changes(site, kmod_mirror):
    node = site.node
    node.configure(template_kmod=False, apt_mirror=kmod_mirror.url)  # for the CT created next
    first = site.deploy()
    assert first.rc == 0, first.output[-4000:]
    assert kmod_status(site) == "install ok installed"
    assert site.ct("readlink", "/sbin/modprobe").stdout.strip() == "/bin/kmod"
    assert kmod_mirror.downloads() == [kmod_mirror.debs[0].name]
    module = node.read("/proc/driver/nvidia/version").split()[7]
    assert site.ct("readlink", "/usr/lib/x86_64-linux-gnu/libcuda.so.1").stdout.strip() == (
        f"libcuda.so.{module}"
    )

    served = len(kmod_mirror.requests)
    before = node.tree_digest()
    second = site.deploy()
    assert second.rc == 0, second.output[-4000:]
    assert second.changed == 0, second.json
    assert len(kmod_mirror.requests) == served  # no apt run at all
    assert node.tree_digest() == before


@pytest.mark.parametrize("node_options", [{"template_kmod": False}])  # and no apt source
def test_kmod_that_cannot_be_installed_stops_before_the_installer_with_one_line(site):
    run = site.deploy()
    assert run.rc != 0
    assert run.output.count(KMOD_LINE) == 1, run.output[-4000:]
    assert "Traceback" not in run.output
    assert kmod_status(site) == ""
    # the installer never ran: no log, no userspace
    for path in ("/var/log/nvidia-installer.log", "/usr/lib/x86_64-linux-gnu/libcuda.so.1"):
        assert site.ct("test", "-e", path).returncode == 1

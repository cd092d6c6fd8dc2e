"""The whole lifecycle on both Proxmox VE profiles (issue 10, item 5): a deploy, a no-op
re-deploy, verify, a swap to cu128 and back, rebuild=venv and rebuild=container, then the
bad-input and unfit-node refusals, which change nothing. One node per profile, its GPU device
minors in reverse PCI order (as on real nodes, index != minor), steps in order, as few pyinfra
runs as the steps need."""

from __future__ import annotations

import pytest

from sim.__main__ import seed_training_code, site_data
from sim.index import PackageIndex
from sim.node import SimNode
from tests.e2e.conftest import Site

# PVE 9 containers run Debian 13's Python 3.13 (debian-13-standard); python_version follows the
# container's Python, so no run names it.
PROFILES = {"pve8": ("debian-12-standard", "3.11", []), "pve9": ("debian-13-standard", "3.13", [])}


@pytest.fixture(scope="module", params=sorted(PROFILES))
def lifecycle_site(request, tmp_path_factory, wheelhouse):
    from sim.fixtures import _check_host

    _check_host()
    profile = request.param
    index = PackageIndex(wheelhouse.torch_index(), wheelhouse.pypi())
    index.start()
    try:
        with SimNode(
            tmp_path_factory.mktemp(profile) / "node", profile=profile, minor_order="reverse"
        ) as node:
            seed_training_code(node)
            extra = [x for kv in PROFILES[profile][2] for x in ("--data", kv)]
            locks = tmp_path_factory.mktemp(f"{profile}-locks")
            yield (
                profile,
                Site(
                    node,
                    index,
                    [*site_data(index, locks), "--data", "training_requirements=[]", *extra],
                ),
            )
    finally:
        index.stop()


def torch_of(site) -> str:
    return site.ct(
        "/root/venv/bin/python", "-c", "import torch; print(torch.__version__)"
    ).stdout.strip()


def ok(run):
    assert run.rc == 0, run.output[-4000:]
    return run


def test_lifecycle(lifecycle_site):
    profile, site = lifecycle_site
    template, python, _ = PROFILES[profile]
    node = site.node

    ok(site.deploy())
    conf = node.read("/etc/pve/lxc/200.conf")
    assert "ostype: debian" in conf and "unprivileged" not in conf  # --unprivileged 0 on both
    assert node.pct_calls() and any(
        c["argv"][:2] == ["create", "200"] and template in c["argv"][2] for c in node.pct_calls()
    )
    assert (
        site.ct("python3", "-c", "import sys; print(*sys.version_info[:2], sep='.')").stdout.strip()
        == python
    )
    assert torch_of(site) == "2.11.0+cu130"

    assert ok(site.deploy()).changed == 0
    ok(site.pyinfra("verify.py"))

    ok(site.deploy("torch_variant=cu128"))
    assert torch_of(site) == "2.11.0+cu128"
    ok(site.deploy())
    assert torch_of(site) == "2.11.0+cu130"

    ok(site.deploy("rebuild=venv", "restart_training=true"))
    assert torch_of(site) == "2.11.0+cu130"
    ok(site.deploy("rebuild=container", "restart_training=true"))
    assert torch_of(site) == "2.11.0+cu130"
    assert ok(site.deploy()).changed == 0

    hotplug_or_refuse(profile, site)

    before = node.tree_digest()
    bad = site.deploy("torch_variant=cu129")
    assert bad.rc != 0 and "torch_variant='cu129' is not a known variant" in bad.output
    assert "Traceback" not in bad.output and node.tree_digest() == before

    node.configure(driver_version="570.86.10")  # a node whose driver is too old for cu130
    before = node.tree_digest()
    unfit = site.deploy()
    assert unfit.rc != 0, unfit.output[-3000:]
    assert "driver for cu130: expected >= 580.65.06 (CUDA 13.0); found 570.86.10" in unfit.output
    assert "Traceback" not in unfit.output and node.tree_digest() == before


def hotplug_or_refuse(profile, site):
    """A passthrough entry missing on a running container with the training unit active: PVE 9
    hot-plugs the added devN (no restart, nothing pending); PVE 8 can only apply it with a
    restart, which a running training blocks."""
    node = site.node
    conf = node.read("/etc/pve/lxc/200.conf")
    key = next(
        line.split(":")[0] for line in conf.splitlines() if line.endswith(": /dev/nvidia-uvm-tools")
    )
    for argv in (["stop", "200"], ["set", "200", "--delete", key], ["start", "200"]):
        assert node.run(["pct", *argv]).returncode == 0
    site.ct("systemctl", "start", "dflash-train.service")
    assert site.ct("systemctl", "is-active", "dflash-train.service").stdout.strip() == "active"
    node.clear_pct_log()
    run = site.deploy()
    if profile == "pve9":
        ok(run)
        calls = [c["argv"][:2] for c in node.pct_calls()]
        assert ["set", "200"] in calls and not any(
            c[0] in ("shutdown", "stop", "reboot") for c in calls
        )
        assert "[pve:pending]" not in node.read("/etc/pve/lxc/200.conf")
        assert site.ct("test", "-c", "/dev/nvidia-uvm-tools").returncode == 0
        failed_hotplug_means_restart(site)
    else:
        assert run.rc != 0
        assert (
            "CT 200 must restart to get its GPUs right (its GPU passthrough config changes"
            in run.output
            and "dflash-train.service is running in it" in run.output
        )
        ok(site.deploy("restart_training=true"))
        assert site.ct("test", "-c", "/dev/nvidia-uvm-tools").returncode == 0
    assert ok(site.deploy()).changed == 0


def failed_hotplug_means_restart(site):
    """PVE 9: one devN per `pct set` (a failed hot-plug in a multi-devN call writes no config
    while the earlier devices stay mounted), and a failed hot-plug is a restart the running
    training blocks, never counted as done; once the training is stopped, the restart passes
    the device through."""
    node = site.node
    conf = node.read("/etc/pve/lxc/200.conf")
    keys = [
        line.split(":")[0]
        for line in conf.splitlines()
        if line.endswith((": /dev/nvidia-uvm-tools", ": /dev/nvidia0"))
    ]
    for argv in (["stop", "200"], ["set", "200", "--delete", ",".join(keys)], ["start", "200"]):
        assert node.run(["pct", *argv]).returncode == 0
    site.ct("systemctl", "start", "dflash-train.service")
    node.fail_device_hotplug("/dev/nvidia-uvm-tools")
    try:
        node.clear_pct_log()
        blocked = site.deploy()
        assert blocked.rc != 0
        assert (
            "CT 200 must restart to get its GPUs right (hot-plug of /dev/nvidia-uvm-tools "
            in blocked.output
            and "dflash-train.service is running in it" in blocked.output
        )
        sets = [c["argv"] for c in node.pct_calls() if c["argv"][:1] == ["set"]]
        assert sets and all(sum(a.startswith("--dev") for a in argv) == 1 for argv in sets), sets
        assert not any(c["argv"][0] in ("shutdown", "stop") for c in node.pct_calls())
        assert site.ct("systemctl", "is-active", "dflash-train.service").stdout == "active\n"
        assert site.ct("test", "-e", "/dev/nvidia-uvm-tools").returncode == 1
        site.ct("systemctl", "stop", "dflash-train.service")
        ok(site.deploy())  # the hot-plug fails again: now the container restarts with it
        assert any(c["argv"][:2] == ["shutdown", "200"] for c in node.pct_calls())
        assert site.ct("test", "-c", "/dev/nvidia-uvm-tools").returncode == 0
        assert site.ct("test", "-c", "/dev/nvidia0").returncode == 0
    finally:
        node.fail_device_hotplug()

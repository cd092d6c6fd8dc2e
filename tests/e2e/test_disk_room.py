"""Room for what a deploy changes. The free-space check of the preflight asks for room only when
this run builds: a converged container whose selected build is already there is not refused for a
full disk (its no-op needs no room), while a swap to a variant not built yet is refused before any
change. And memory is never set below what the container uses."""

from __future__ import annotations

FULL = "min_free_gib=100000"  # more than any test machine has: the disk is "full"
LINE = "GiB free on its root disk, a deploy needs 100000 GiB (min_free_gib=100000;"


def test_a_full_disk_stops_only_a_run_that_builds(deployed):
    site = deployed
    noop = site.deploy(FULL)
    assert noop.rc == 0, noop.output[-3000:]
    assert LINE not in noop.output

    before = site.node.tree_digest()
    swap = site.deploy(FULL, "torch_variant=cu128")
    assert swap.rc != 0, swap.output[-3000:]
    assert "127.0.0.1: CT 200 has " in swap.output and LINE in swap.output, swap.output[-3000:]
    assert "Traceback" not in swap.output
    assert site.node.tree_digest() == before

    rebuild = site.deploy(FULL, "rebuild=venv")
    assert rebuild.rc != 0 and LINE in rebuild.output, rebuild.output[-3000:]


def test_memory_is_never_set_below_what_the_container_uses(deployed):
    """`pct set --memory` under the container's current use would have the kernel reclaim and
    OOM-kill in it (cgroup memory.max is written without a check): refused before any change,
    even with restart_training=true, naming both figures. The node reads the use from the
    container's cgroup (v2 memory.current, or v1 memory.usage_in_bytes on a hybrid node such as
    this test machine)."""
    site = deployed
    used = site.node.run(["cat", "/sys/fs/cgroup/memory/lxc/200/memory.usage_in_bytes"])
    v2 = site.node.run(["cat", "/sys/fs/cgroup/lxc/200/memory.current"])
    text = (v2.stdout if v2.returncode == 0 else used.stdout).strip()
    assert text.isdigit(), (used.stderr, v2.stderr)
    assert int(text) > 16 * 1024 * 1024  # a booted container with systemd uses more than 16 MiB
    before = site.node.tree_digest()
    run = site.deploy("ct_memory_mib=16", "restart_training=true")
    assert run.rc != 0, run.output[-3000:]
    line = next((ln for ln in run.output.splitlines() if "MiB of memory now" in ln), "")
    assert "CT 200 uses " in line and "ct_memory_mib=16 would" in line, run.output[-3000:]
    assert "set ct_memory_mib >= " in line
    assert "Traceback" not in run.output
    assert site.node.tree_digest() == before
    config = site.node.run(["pct", "config", "200"]).stdout
    assert "memory: 16\n" not in config

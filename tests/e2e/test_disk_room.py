"""The free-space check of the preflight asks for room only when this run builds: a converged
container whose selected build is already there is not refused for a full disk (its no-op needs no
room), while a swap to a variant not built yet is refused before any change."""

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

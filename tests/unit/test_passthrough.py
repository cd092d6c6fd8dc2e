from pvegpu.passthrough import (
    dev_set_args,
    raw_lines_match,
    raw_lxc_lines,
    rewrite_config,
    wanted_devices,
)

NODE = {f"/dev/nvidia{i}": {"major": 195, "minor": i} for i in range(8)}
NODE.update({
    "/dev/nvidiactl": {"major": 195, "minor": 255},
    "/dev/nvidia-modeset": {"major": 195, "minor": 254},
    "/dev/nvidia-uvm": {"major": 508, "minor": 0},
    "/dev/nvidia-uvm-tools": {"major": 508, "minor": 1},
    "/dev/nvidia-caps/nvidia-cap1": {"major": 511, "minor": 1},
})
MAJORS = {"mem": 1, "drm": 226, "nvidia": 195, "nvidia-uvm": 508, "nvidia-caps": 511}


def test_wanted_devices_orders_gpus_numerically_and_skips_extras_unless_asked():
    nodes = dict(NODE, **{"/dev/nvidia10": {"major": 195, "minor": 10}})
    paths = wanted_devices(nodes, ())
    assert paths[:3] == ["/dev/nvidia0", "/dev/nvidia1", "/dev/nvidia2"]
    assert paths[8] == "/dev/nvidia10"
    assert "/dev/nvidia-modeset" not in paths
    assert "/dev/nvidia-caps/nvidia-cap1" in wanted_devices(NODE, ("nvidia-caps",))


def test_dev_entries_are_idempotent_and_keep_foreign_devices():
    paths = wanted_devices(NODE, ())
    config = {"dev0": "/dev/dri/renderD128,gid=104"}
    args = dev_set_args(config, paths)
    assert args[:2] == ["--dev1", "/dev/nvidia0"]
    applied = dict(config)
    it = iter(args)
    for flag in it:
        applied[flag[2:]] = next(it)
    assert dev_set_args(applied, paths) == []


def test_raw_lines_use_majors_from_the_node_and_replace_stale_ones():
    paths = wanted_devices(NODE, ())
    lines = raw_lxc_lines(paths, NODE, MAJORS)
    assert ("lxc.cgroup2.devices.allow", "c 508:* rwm") in lines
    text = "arch: amd64\nlxc.cgroup2.devices.allow: c 226:* rwm\n"
    new = rewrite_config(text, lines, MAJORS, True)
    assert "lxc.cgroup2.devices.allow: c 226:* rwm" in new  # drm stays
    # uvm moves to major 509: the 508 line is stale and goes, nothing else is touched.
    majors2 = dict(MAJORS, **{"nvidia-uvm": 509})
    node2 = dict(NODE, **{"/dev/nvidia-uvm": {"major": 509, "minor": 0},
                          "/dev/nvidia-uvm-tools": {"major": 509, "minor": 1}})
    lines2 = raw_lxc_lines(paths, node2, majors2)
    parsed = [tuple(l.split(": ", 1)) for l in new.splitlines() if l.startswith("lxc.")]
    assert raw_lines_match(parsed, lines, MAJORS)
    assert not raw_lines_match(parsed, lines2, majors2)
    newer = rewrite_config(new, lines2, majors2, True)
    assert "c 508:* rwm" not in newer and "c 509:* rwm" in newer
    assert newer.startswith("arch: amd64\n")


def test_rewrite_keeps_snapshot_sections_verbatim():
    text = "arch: amd64\ndev0: /dev/nvidia0\n\n[snap1]\narch: amd64\nlxc.mount.entry: /dev/nvidia0 x\n"
    new = rewrite_config(text, [("lxc.mount.entry", "/dev/nvidia0 dev/nvidia0 none bind,optional,create=file")], MAJORS, True)
    assert "dev0: /dev/nvidia0\n\n[snap1]" not in new
    assert new.endswith("[snap1]\narch: amd64\nlxc.mount.entry: /dev/nvidia0 x\n")

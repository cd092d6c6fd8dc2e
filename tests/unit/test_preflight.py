"""Preflight lines: every node problem found before anything changes, one line each (fact, value
found, fix); the cu128 compatibility band only warns."""

import pytest

from pvegpu.settings import Settings, defaults
from pvegpu.startup.preflight import node_problems
from pvegpu.verification import verify

NODE = {f"/dev/nvidia{i}": {"major": 195, "minor": i} for i in range(8)}
NODE.update(
    {
        "/dev/nvidiactl": {"major": 195, "minor": 255},
        "/dev/nvidia-uvm": {"major": 509, "minor": 0},
        "/dev/nvidia-uvm-tools": {"major": 509, "minor": 1},
    }
)
TEMPLATE = "debian-12-standard_12.7-1_amd64.tar.zst"


def settings(**over):
    return Settings.from_data({**defaults(), **over})


def node(**over):
    doc = {
        "pve_version": "8.4.1",
        "driver_version": "580.95.05",
        "driver_version_smi": "580.95.05",
        "gpus": [{"index": i, "minor": i} for i in range(8)],
        "gpu_error": [],
        "devices": dict(NODE),
        "majors": {"nvidia": 195, "nvidia-uvm": 509, "nvidia-caps": 511},
        "tools": {
            "nvidia-modprobe": "/usr/bin/nvidia-modprobe",
            "nvidia-persistenced": "/usr/bin/nvidia-persistenced",
        },
        "units": {},
        "templates": [TEMPLATE],
        "installer": "/root/NVIDIA-Linux-x86_64-580.95.05.run",
        "containers": {},
        "compute_apps": [],
    }
    doc.update(over)
    return doc


def running_ct(uvm_major_in_ct=509, unit="active", libcuda="580.95.05"):
    config = {
        f"dev{i}": p
        for i, p in enumerate(
            [f"/dev/nvidia{i}" for i in range(8)]
            + ["/dev/nvidiactl", "/dev/nvidia-uvm", "/dev/nvidia-uvm-tools"]
        )
    }
    config["unprivileged"] = "0"
    config["tags"] = "pvegpu"  # made by pvegpu
    devices = dict(NODE)
    devices["/dev/nvidia-uvm"] = {"major": uvm_major_in_ct, "minor": 0}
    devices["/dev/nvidia-uvm-tools"] = {"major": uvm_major_in_ct, "minor": 1}
    return {
        "exists": True,
        "status": "running",
        "config": config,
        "raw_lxc": [],
        "text": "",
        "pending": {},
        "pending_delete": [],
        "live": {
            "devices": devices,
            "unit_active": unit,
            "driver_version": "580.95.05",
            "libs": {"libcuda.so.1": libcuda, "libnvidia-ml.so.1": libcuda},
            "nvidia_smi": True,
            "units": [],
        },
        "processes": [],
    }


def test_a_fit_node_passes_silently():
    assert node_problems(settings(), node(containers={"200": running_ct()}), "n1", [200]) == (
        [],
        [],
    )


@pytest.mark.parametrize(
    "over, line",
    [
        (
            {"driver_version": None, "gpus": None},
            "n1: node driver: expected an NVIDIA driver >= 580.65.06 loaded on n1; found none "
            "(/proc/driver/nvidia/version missing); fix: install the NVIDIA driver >= 580.65.06 on "
            "the node and reboot",
        ),
        (
            {"driver_version": "570.86.10", "driver_version_smi": "570.86.10"},
            "n1: driver for cu130: expected >= 580.65.06 (CUDA 13.0); found 570.86.10 on node n1; "
            "fix: upgrade the node's NVIDIA driver to >= 580.65.06 (then deploy.py matches the "
            "container), or set torch_variant to a build the driver supports",
        ),
        (
            {"gpus": [{"index": i, "minor": i} for i in range(7)]},
            "n1: node GPU count: expected 8 (expected_gpu_count); found 7 listed by nvidia-smi on "
            "n1; fix: check the GPUs (nvidia-smi -L on the node) or set expected_gpu_count",
        ),
        (
            {"gpus": None, "gpu_error": ["nvidia-smi failed (exit 9)"]},
            "n1: node GPUs: expected nvidia-smi on n1 lists the GPUs; found nvidia-smi failed "
            "(exit 9); fix: fix the node's driver install (nvidia-smi must work on the node)",
        ),
        (
            {"driver_version_smi": "580.105.08"},
            "n1: the node's NVIDIA userspace is 580.105.08 but its kernel module is 580.95.05: "
            "reboot the node after the driver upgrade (or reinstall the matching driver)",
        ),
        (
            {"majors": {"nvidia": 195}},
            "n1: the nvidia-uvm module is not loaded (no nvidia-uvm in /proc/devices): run "
            "`modprobe nvidia-uvm` on the node (CUDA cannot start without it)",
        ),
        (
            {"tools": {"nvidia-persistenced": "/usr/bin/nvidia-persistenced"}},
            "n1: nvidia-modprobe is not installed: install the driver's nvidia-modprobe (the .run "
            "driver puts it in /usr/bin; Debian: package nvidia-modprobe)",
        ),
    ],
)
def test_each_unfit_fact_is_one_line_with_value_and_fix(over, line):
    problems, _ = node_problems(settings(), node(**over), "n1")
    assert problems == [line]


@pytest.mark.parametrize(
    "over",
    [
        {"driver_version": None, "gpus": None},
        {"driver_version": "570.86.10", "driver_version_smi": "570.86.10"},
        {"gpus": [{"index": i, "minor": i} for i in range(9)]},
        {"gpus": None, "gpu_error": ["nvidia-smi failed (exit 9)"]},
    ],
)
def test_deploy_and_verify_word_node_problems_alike(over):
    """The preflight's driver and GPU-count lines are verification's, prefixed with the node."""
    facts = node(**over)
    problems, _ = node_problems(settings(), facts, "n1")
    verdict = verify(settings(), facts, {}, where="CT 200 on n1", vmid=200, node_name="n1")
    assert problems == ["n1: " + verdict.lines()[0]]


def test_cu128_minimum_and_its_reduced_features_band():
    s = settings(torch_variant="cu128")
    assert node_problems(s, node(driver_version="570.26", driver_version_smi="570.26"), "n1") == (
        [],
        [],
    )
    problems, warnings = node_problems(
        s, node(driver_version="550.54.15", driver_version_smi="550.54.15"), "n1"
    )
    assert problems == []
    assert warnings == [
        "n1: driver 550.54.15 runs cu128 only in CUDA minor-version compatibility mode "
        "(reduced features); >= 570.26 recommended"
    ]
    assert (
        node_problems(s, node(driver_version="525.60.13", driver_version_smi="525.60.13"), "n1")[0]
        == []
    )
    problems, _ = node_problems(
        s, node(driver_version="525.60.12", driver_version_smi="525.60.12"), "n1"
    )
    assert problems[0].startswith(
        "n1: driver for cu128: expected >= 570.26 (CUDA 12.8); found 525.60.12 on node n1"
    )


def test_devn_mode_forced_on_an_old_pve_container():
    old = node(pve_version="8.0.4", pve_container="5.0.4")
    problems, _ = node_problems(settings(passthrough_mode="dev"), old, "n1")
    assert problems == [
        "n1: passthrough_mode=dev needs pve-container >= 5.0.7 (devN entries), the "
        "node has pve-container 5.0.4: upgrade pve-container or set "
        "passthrough_mode=lxc"
    ]
    unknown = node(pve_version="8.2.2")
    problems, _ = node_problems(settings(passthrough_mode="dev"), unknown, "n1")
    assert problems == [
        "n1: passthrough_mode=dev needs pve-container >= 5.0.7 (devN entries), the "
        "node has no known pve-container (pve-manager 8.2.2): upgrade pve-container "
        "or set passthrough_mode=lxc"
    ]
    assert node_problems(settings(passthrough_mode="lxc"), old, "n1") == ([], [])


def test_devn_mode_forced_on_pve_8_1_with_its_pve_container_is_accepted():
    on_8_1 = node(pve_version="8.1.4", pve_container="5.0.8")
    assert node_problems(settings(passthrough_mode="dev"), on_8_1, "n1") == ([], [])


def test_stale_uvm_major_while_training_runs_needs_restart_training():
    state = node(containers={"200": running_ct(uvm_major_in_ct=508)})
    problems, _ = node_problems(settings(), state, "n1", [200])
    assert problems == [
        "n1: CT 200 must restart to get its GPUs right (/dev/nvidia-uvm is 508:0 in the container, "
        "509:0 on the node; /dev/nvidia-uvm-tools is 508:1 in the container, 509:1 on the node), "
        "but dflash-train.service is running in it: stop the training first, or pass --data "
        "restart_training=true to restart it anyway"
    ]
    assert node_problems(settings(restart_training=True), state, "n1", [200])[0] == []
    idle = node(containers={"200": running_ct(uvm_major_in_ct=508, unit="inactive")})
    assert node_problems(settings(), idle, "n1", [200])[0] == []  # the deploy repairs it


def test_container_stage_blockers_are_found_before_anything_changes():
    state = node(templates=[], installer=None, containers={"200": {"exists": False}})
    problems, _ = node_problems(settings(), state, "n1", [200])
    assert problems == [
        "n1: CT 200 is missing and its template "
        "local:vztmpl/debian-12-standard_12.12-1_amd64.tar.zst is not on the node: download it "
        "with `pveam download local debian-12-standard_12.12-1_amd64.tar.zst` or set ct_template",
        "n1: CT 200 needs NVIDIA userspace 580.95.05 (has none (new container)), but "
        "NVIDIA-Linux-x86_64-580.95.05.run is not in /root on the node: copy the installer of the "
        "node's driver there (or set nvidia_installer_dir)",
    ]
    old_libs = node(installer=None, containers={"200": running_ct(libcuda="570.86.10")})
    problems, _ = node_problems(settings(), old_libs, "n1", [200])
    assert problems == [
        "n1: CT 200 needs NVIDIA userspace 580.95.05 (has 570.86.10), but "
        "NVIDIA-Linux-x86_64-580.95.05.run is not in /root on the node: copy the "
        "installer of the node's driver there (or set nvidia_installer_dir)"
    ]


def test_unprivileged_mismatch_only_warns():
    ct = running_ct()
    ct["config"]["unprivileged"] = "1"
    problems, warnings = node_problems(settings(), node(containers={"200": ct}), "n1", [200])
    assert problems == [] and warnings == [
        "n1: CT 200 is unprivileged but ct_unprivileged is False: only rebuild=container changes it"
    ]


def test_rebuild_container_checks_what_the_re_creation_needs():
    state = node(templates=[], containers={"200": running_ct(uvm_major_in_ct=508)})
    problems, _ = node_problems(settings(rebuild="container"), state, "n1", [200])
    assert len(problems) == 1 and problems[0].startswith(
        "n1: CT 200 is re-created (rebuild=container) and its template"
    )


# --- issue 21: a real site's preflight (pvegpu.startup.site_preflight) ------------------------
FM = "nvidia-fabricmanager.service"


def fabric(state, status="N/A"):
    return [{"uuid": f"GPU-{i}", "state": state, "status": status} for i in range(8)]


def test_a_fabric_needs_fabric_manager_enabled_active_and_every_gpu_registered():
    s = settings()
    fm_unit = {"path": f"/lib/systemd/system/{FM}", "enabled": True, "active": "active"}
    assert node_problems(s, node(fabric=fabric("N/A", "N/A")), "n1")[0] == []
    done = node(fabric=fabric("Completed", "Success"), units={FM: fm_unit})
    assert node_problems(s, done, "n1")[0] == []
    (line,) = node_problems(s, node(fabric=fabric("Not Started")), "n1")[0]
    assert "nvidia-fabricmanager.service is not installed" in line
    stopped = node(fabric=fabric("Not Started"), units={FM: {**fm_unit, "active": "inactive"}})
    (line,) = node_problems(s, stopped, "n1")[0]
    assert "nvidia-fabricmanager.service is inactive, enabled: `systemctl enable --now" in line
    disabled = node(
        fabric=fabric("Completed", "Success"), units={FM: {**fm_unit, "enabled": False}}
    )
    (line,) = node_problems(s, disabled, "n1")[0]
    assert "is active, not enabled" in line
    joining = node(fabric=fabric("In Progress"), units={FM: fm_unit})
    (line,) = node_problems(s, joining, "n1")[0]
    assert line.startswith(
        "n1: 8 GPU(s) have not joined the NVSwitch fabric (GPU-0: state In Progress, status N/A)"
    )
    # Completed with an error status: the registration failed, no wait will help
    failed = node(fabric=fabric("Completed", "Insufficient Resources"), units={FM: fm_unit})
    (line,) = node_problems(s, failed, "n1")[0]
    assert line == (
        "n1: 8 GPU(s) failed to register with the NVSwitch fabric (GPU-0: state Completed, "
        "status Insufficient Resources): CUDA cannot use them; see `journalctl -u "
        "nvidia-fabricmanager`, fix the cause, then reboot the node"
    )
    # the answers of a GPU without a fabric, as real nodes print them: nothing to refuse
    for none in ("Not Supported", "[N/A]", "[Not Supported]"):
        assert node_problems(s, node(fabric=fabric(none, "Success")), "n1") == ([], [])


def test_a_new_container_needs_its_storages_and_the_space_of_a_build():
    ok = {
        "rootdir": {"local-lvm": {"type": "lvmthin", "status": "active", "avail_kib": 2**31}},
        "vztmpl": {"local": {"type": "dir", "status": "active", "avail_kib": 2**31}},
    }
    assert node_problems(settings(), node(storages=ok), "n1", [200])[0] == []
    (line,) = node_problems(settings(ct_rootfs="local-zfs:128"), node(storages=ok), "n1", [200])[0]
    assert "storage 'local-zfs' (ct_rootfs='local-zfs:128'), which does not exist" in line
    (line,) = node_problems(settings(ct_rootfs="local-lvm:8"), node(storages=ok), "n1", [200])[0]
    assert "ct_rootfs='local-lvm:8' gives CT 200 a 8 GiB root disk, a deploy needs 20 GiB" in line
    big = settings(min_free_gib=4096, ct_rootfs="local-lvm:5000")
    (line,) = node_problems(big, node(storages=ok), "n1", [200])[0]
    assert "storage 'local-lvm' (ct_rootfs) has 2048.0 GiB available, CT 200 needs 4096 GiB" in line
    (line,) = node_problems(
        settings(ct_template="nfs:vztmpl/" + TEMPLATE), node(storages=ok), "n1", [200]
    )[0]
    assert "is on storage 'nfs', which does not exist or holds no templates (vztmpl)" in line
    # not read (the container exists): nothing to say
    assert node_problems(settings(), node(storages={}), "n1", [200])[0] == []


def test_a_locked_container_or_a_full_root_disk_is_refused():
    ct = running_ct()
    ct["config"]["lock"] = "migrate"
    (line,) = node_problems(settings(), node(containers={"200": ct}), "n1", [200])[0]
    assert line == (
        "n1: CT 200 is locked (migrate): pct refuses changes while a migration runs; "
        "wait for it to end (or, if none runs, `pct unlock 200`) and run again"
    )
    ct = running_ct()
    ct["live"]["root_free_kib"] = 19 * 1024 * 1024
    (line,) = node_problems(settings(), node(containers={"200": ct}), "n1", [200])[0]
    assert line.startswith("n1: CT 200 has 19.0 GiB free on its root disk, a deploy needs 20 GiB")
    ct["live"]["root_free_kib"] = 20 * 1024 * 1024
    assert node_problems(settings(), node(containers={"200": ct}), "n1", [200])[0] == []


def test_a_bare_size_ct_rootfs_is_checked_on_the_storage_pct_would_use():
    """pct create takes a bare size as a new volume on --storage, default 'local' (pve-container
    API2/LXC.pm create_vm), which holds no container directories on a fresh install."""
    ok = {
        "rootdir": {"local-lvm": {"type": "lvmthin", "status": "active", "avail_kib": 2**31}},
        "vztmpl": {"local": {"type": "dir", "status": "active", "avail_kib": 2**31}},
    }
    (line,) = node_problems(settings(ct_rootfs="128"), node(storages=ok), "n1", [200])[0]
    assert "ct_rootfs='128' (a size alone: pct puts it on storage 'local')" in line
    assert "set ct_rootfs, e.g. ct_rootfs=local-lvm:128" in line
    small = node_problems(settings(ct_rootfs="8"), node(storages=ok), "n1", [200])[0]
    assert any(
        "gives CT 200 a 8 GiB root disk" in x and "ct_rootfs=local:128" not in x for x in small
    ), small
    local = {**ok, "rootdir": {"local": {"type": "dir", "status": "active", "avail_kib": 2**31}}}
    assert node_problems(settings(ct_rootfs="128"), node(storages=local), "n1", [200])[0] == []


def test_fabric_manager_on_pre_hopper_boards_at_the_drivers_version_and_elsewhere():
    """Pre-Hopper NVSwitch boards print N/A for fabric.state: the nvswitch module's devices
    say so; Fabric Manager must be the driver's exact version; GPUs all registered without a
    local unit (Fabric Manager elsewhere) are a warning, not a refusal."""
    s = settings()
    fm_unit = {"path": f"/lib/systemd/system/{FM}", "enabled": True, "active": "active"}
    a100 = node(fabric=fabric("N/A", "N/A"), nvswitches=["0000:05:00.0", "0000:06:00.0"])
    (line,) = node_problems(s, a100, "n1")[0]
    assert line.startswith("n1: the node has 2 NVSwitch device(s) (/proc/driver/nvidia-nvswitch)")
    assert "nvidia-fabricmanager.service is not installed" in line
    assert node_problems(s, {**a100, "units": {FM: fm_unit}}, "n1")[0] == []
    done = fabric("Completed", "Success")
    other = node(fabric=done, units={FM: fm_unit}, fabricmanager_version="580.82.07")
    (line,) = node_problems(s, other, "n1")[0]
    assert line.startswith("n1: Fabric Manager 580.82.07 is not the NVIDIA driver 580.95.05:")
    same = node(fabric=done, units={FM: fm_unit}, fabricmanager_version="580.95.05")
    assert node_problems(s, same, "n1")[0] == []
    problems, warnings = node_problems(s, node(fabric=done), "n1")
    assert problems == []
    assert any("every GPU registered, but no nvidia-fabricmanager.service" in w for w in warnings)

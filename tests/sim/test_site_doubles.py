"""The doubles a real site's preflight reads, against the real tools' source: `pvesm status`
(proxmox/pve-storage src/PVE/CLI/pvesm.pm print_status, API2/Storage/Status.pm index,
PVE/Storage.pm storage_info), pct's lock and rootdir checks (proxmox/pve-guest-common
src/PVE/AbstractConfig.pm check_lock; proxmox/pve-container src/PVE/API2/LXC.pm create,
API2/LXC/Config.pm update_vm, API2/LXC/Status.pm vm_start/vm_stop) and nvidia-smi's fabric
fields (NVML nvmlGpuFabricState_t)."""

import pytest

from sim.fixtures import _factory

T8 = "local:vztmpl/debian-12-standard_12.7-1_amd64.tar.zst"
ZFS = [
    {
        "name": "local",
        "type": "dir",
        "content": ["iso", "vztmpl", "backup"],
        "total_kib": 1000,
        "used_kib": 250,
        "avail_kib": 750,
        "enabled": True,
        "active": True,
    },
    {
        "name": "local-zfs",
        "type": "zfspool",
        "content": ["rootdir", "images"],
        "total_kib": 4000,
        "used_kib": 1000,
        "avail_kib": 3000,
        "enabled": True,
        "active": True,
    },
    {
        "name": "nfs-iso",
        "type": "nfs",
        "content": ["iso"],
        "total_kib": 0,
        "used_kib": 0,
        "avail_kib": 0,
        "enabled": False,
        "active": False,
    },
]


@pytest.fixture(scope="module")
def node(tmp_path_factory):
    make, finish = _factory(tmp_path_factory)
    try:
        yield make(gpus=2, ct_init="exec")
    finally:
        finish()


def test_pvesm_status_prints_print_status_s_table(node):
    node.configure(storages=ZFS)
    try:
        out = node.run(["pvesm", "status"]).stdout.splitlines()
        # print_status: "%-${maxlen}s %10s %10s %15s %15s %15s %8s", maxlen = longest ID + 1
        head = "%-10s %10s %10s %15s %15s %15s %8s"
        row = "%-10s %10s %10s %15d %15d %15d % 7.2f%%"
        assert out[0] == head % (
            "Name",
            "Type",
            "Status",
            "Total (KiB)",
            "Used (KiB)",
            "Available (KiB)",
            "%",
        )
        assert out[0].startswith("Name" + " " * 13 + "Type")
        assert out[1] == row % ("local", "dir", "active", 1000, 250, 750, 25.0)
        assert out[2] == row % ("local-zfs", "zfspool", "active", 4000, 1000, 3000, 25.0)
        assert out[1].endswith("750   25.00%")
        assert out[3].split() == ["nfs-iso", "nfs", "disabled", "0", "0", "0", "N/A"]
        rootdir = node.run(["pvesm", "status", "--content", "rootdir"]).stdout.splitlines()
        assert [line.split()[0] for line in rootdir[1:]] == ["local-zfs"]
        # --content: enabled storages holding any of the listed types only
        iso = node.run(["pvesm", "status", "--content", "iso,vztmpl"]).stdout.splitlines()
        assert [line.split()[0] for line in iso[1:]] == ["local"]
        # API2/Storage/Status.pm index: raise_param_exc({ storage => "No such storage." }) for
        # a storage storage_info did not list (unknown, or without the --content asked for)
        no_such = "400 Parameter verification failed.\nstorage: No such storage.\n"
        bad = node.run(["pvesm", "status", "--storage", "local-lvm"])
        assert (bad.returncode, bad.stderr.startswith(no_such)) == (255, True), bad.stderr
        assert "pvesm status  [OPTIONS]" in bad.stderr
        other = node.run(["pvesm", "status", "--storage", "local", "--content", "rootdir"])
        assert (other.returncode, other.stderr.startswith(no_such)) == (255, True), other.stderr
    finally:
        node.configure(storages=None)


def test_pct_create_needs_an_existing_storage_for_container_directories(node):
    node.configure(storages=ZFS)
    try:
        missing = node.run(["pct", "create", "301", T8, "--rootfs", "local-lvm:8"])
        assert (missing.returncode, missing.stderr) == (255, "storage 'local-lvm' does not exist\n")
        wrong = node.run(["pct", "create", "301", T8, "--rootfs", "local:8"])
        assert wrong.returncode == 255
        assert "storage: storage 'local' does not support container directories" in wrong.stderr
        # a bare size is a new volume on --storage, whose default is 'local' (create_vm)
        bare = node.run(["pct", "create", "301", T8, "--rootfs", "8"])
        assert bare.returncode == 255
        assert "storage: storage 'local' does not support container directories" in bare.stderr
        bare_iso = node.run(["pct", "create", "301", T8, "--rootfs", "0.5", "--storage", "local"])
        assert "storage 'local' does not support container directories" in bare_iso.stderr
        assert node.run(["test", "-e", "/etc/pve/lxc/301.conf"]).returncode == 1
    finally:
        node.configure(storages=None)


def test_pct_refuses_changes_to_a_locked_container_like_check_lock(node):
    assert node.run(["pct", "create", "302", T8, "--rootfs", "local-lvm:8"]).returncode == 0
    path = "/etc/pve/lxc/302.conf"
    node.run(["sh", "-c", f"echo 'lock: backup' >> {path}"], check=True)
    for argv in (["set", "302", "--memory", "1024"], ["start", "302"], ["destroy", "302"]):
        r = node.run(["pct", *argv])
        assert (r.returncode, r.stderr) == (255, "CT is locked (backup)\n"), argv
    assert "memory: 1024" not in node.read(path)
    # vm_start: --skiplock passes (root only), and a 'mounted' lock does not block a start
    assert node.run(["pct", "start", "302", "--skiplock"]).returncode == 0
    assert node.run(["pct", "stop", "302", "--skiplock"]).returncode == 0
    assert node.run(["pct", "unlock", "302"]).returncode == 0
    assert node.run(["pct", "destroy", "302"]).returncode == 0


def test_nvidia_smi_prints_the_fabric_as_configured(node):
    query = ["nvidia-smi", "--query-gpu=index,fabric.state,fabric.status", "--format=csv,noheader"]
    # no NVSwitch fabric: a bare N/A (the real captures of a GeForce and an L40S), not the
    # [N/A] nvidia-smi prints for a value it cannot give
    assert node.run(query).stdout == "0, N/A, N/A\n1, N/A, N/A\n"
    node.configure(fabric_state="In Progress", fabric_status="N/A")
    try:
        assert node.run(query).stdout == "0, In Progress, N/A\n1, In Progress, N/A\n"
    finally:
        node.configure(fabric_state=None, fabric_status=None)


def test_nvidia_smi_gives_every_fabric_answer_real_nodes_give(node):
    """Real nodes print more than N/A and the three registration states: Not Supported (a
    single-GPU H100/H200, some GB200 boards), [N/A] (a value the driver cannot give), Completed
    with an NVML error as its status (a failed registration), and a driver older than the
    fabric.* fields rejects them like any unknown field (exit 2, on stdout)."""
    query = ["nvidia-smi", "--query-gpu=fabric.state,fabric.status", "--format=csv,noheader"]
    answers = [
        ("Not Supported", "Success"),
        ("[N/A]", "[N/A]"),
        ("Completed", "Insufficient Resources"),
    ]
    try:
        for state, status in answers:
            node.configure(fabric_state=state, fabric_status=status)
            assert node.run(query).stdout == f"{state}, {status}\n" * 2
        node.configure(fabric_state=None, fabric_status=None, fabric_fields=False)
        old = node.run(query)
        assert (old.returncode, old.stdout, old.stderr) == (
            2,
            'Field "fabric.state" is not a valid field to query.\n\n',
            "",
        )
        help_text = node.run(["nvidia-smi", "--help-query-gpu"]).stdout
        assert '"fabric.state"' not in help_text and '"uuid"' in help_text
        uuids = ["nvidia-smi", "--query-gpu=uuid", "--format=csv,noheader"]
        assert node.run(uuids).stdout.count("GPU-") == 2  # the driver's other fields still answer
    finally:
        node.configure(fabric_state=None, fabric_status=None, fabric_fields=True)
    # a state the real tool never prints is refused, not simulated
    with pytest.raises(ValueError, match="nvidia-smi never prints it"):
        node.configure(fabric_state="Done")
    assert node.run(query).stdout == "N/A, N/A\n" * 2

"""The JSON documents the composite facts return (what their probes print), as TypedDicts.

Each is ``total=False``: an empty document is the facts' default (the host could not be asked),
so readers use ``.get``. The probes (``pvegpu/probes/``) build these shapes; the facts
(``pvegpu/facts/``) parse and return them.

>>> doc: NodeStateDoc = {"driver_version": "580.95.05", "gpus": None}
>>> doc.get("containers", {})
{}
"""

from __future__ import annotations

from typing import Any, TypedDict


class GpuRow(TypedDict, total=False):
    """One GPU as the node sees it (nvidia-smi row joined with the kernel module's minor)."""

    index: int
    name: str
    uuid: str
    memory_total_mib: int | None
    pci_bus_id: str
    minor: int | None


class ComputeApp(TypedDict, total=False):
    """One compute process nvidia-smi lists on the node, with its argv and cgroup."""

    pid: int
    name: str
    gpu_uuid: str
    used_mib: int | None
    cmdline: str
    argv: list[str]
    cgroup: str


class DeviceNumber(TypedDict):
    """A character device's numbers (stat())."""

    major: int
    minor: int


class UnitEntry(TypedDict, total=False):
    """A systemd unit on the node: where its file is, whether it is enabled and active."""

    path: str | None
    paths: list[str]
    enabled: str | None
    active: str | None


class ContainerLive(TypedDict, total=False):
    """A running container's own view (``ct_detail="full"``)."""

    driver_version: str | None
    libs: dict[str, Any]
    nvidia_smi: bool
    devices: dict[str, DeviceNumber]
    unit_active: str | None
    missing_tools: list[str]
    other_units: dict[str, Any]
    root_free_kib: int | None  # free space on the container's root disk (df -Pk /)


class ContainerEntry(TypedDict, total=False):
    """One container in the node document (``containers["200"]``)."""

    exists: bool
    status: str | None
    config: dict[str, str]
    raw_lxc: list[str]
    text: str
    pending: dict[str, str]
    pending_delete: list[str]
    live: ContainerLive | None
    libcuda: Any
    # the container reads folded into the view's exec (pvegpu.run.ct_reads): rc, stdout lines
    reads: list[dict[str, Any]]
    # running only: its processes running the training script (pid, argv, cgroup, pgid) and the
    # bytes its cgroup uses (pvegpu.plan.running_training)
    processes: list[dict[str, Any]]
    memory_current: int | None
    memory_cgroup: str | None  # "v2" or "v1": the hierarchy memory_current was read from


class NodeStateDoc(TypedDict, total=False):
    """:class:`pvegpu.facts.proxmox.NodeState`: everything the node stages compare against."""

    pve_version: str | None
    pve_container: str | None
    driver_version: str | None
    driver_version_smi: str | None
    gpus: list[GpuRow] | None
    gpu_error: list[str] | None
    compute_apps: list[ComputeApp]
    devices: dict[str, DeviceNumber]
    majors: dict[str, int]
    containers: dict[str, ContainerEntry]
    installer: str | None
    data_dir_exists: bool
    #: {data_dir_node: {"parent_exists": bool, "on_root_fs": bool | None}} (probe arg data_dirs)
    data_dir_places: dict[str, dict[str, bool | None]]
    boot_files: dict[str, str | None]
    units: dict[str, UnitEntry]
    tools: dict[str, str | None]
    templates: list[str]
    path_kinds: dict[str, str]  # training paths under the data dir: "file", "directory", "missing"
    # site preflight (pvegpu.startup.site_preflight): each GPU's fabric registration
    # ({uuid, state, status}), `pvesm status --content <c>` per content type ({storage: {type,
    # status, avail_kib}}, None when pvesm failed; only when a container is to be created). A node
    # without python3 answers {"python3_missing": true} instead (NodeState's shell guard).
    fabric: list[dict[str, str]]
    nvswitches: list[str]  # /proc/driver/nvidia-nvswitch/devices/ entries (PCI addresses)
    fabricmanager_version: str | None  # `nv-fabricmanager --version`, read on a fabric only
    storages: dict[str, dict[str, dict[str, Any]] | None]
    # nvidia-persistenced: daemons outside systemd, and whether the unit at our path is ours
    persistenced: dict[str, Any]


class ContainerStateDoc(TypedDict, total=False):
    """:class:`pvegpu.facts.python_env.ContainerState`: uv, the venvs, the live link, the unit."""

    uv_version: str | None
    venvs: dict[str, Any]
    venv_link: str | None
    venv_real: str | None
    venv_path_is_dir: bool
    python: dict[str, Any] | None
    uv_cache_same_fs: bool | None
    resolved_locks: list[str]
    unit_digest: str | None
    unit_active: str | None
    unit_enabled: str | None
    other_units: dict[str, Any]
    unit_started: str | None
    cache_dir_exists: bool | None
    baseline_exists: bool | None
    compile_cache_dirs: dict[str, bool] | None


class DriverVersions(TypedDict):
    """The driver version each witness in a container reports (None where it is absent)."""

    libcuda: str | None
    libnvidia_ml: str | None
    smi: str | None
    module: str | None


class ContainerVerificationDoc(TypedDict, total=False):
    """:class:`pvegpu.facts.verification.ContainerVerification`: the probe's answer plus the
    parsed views (``gpus``, ``gpu_error``, ``driver``) that ``shape`` adds."""

    venv: str
    venv_real: str | None
    python: str
    present: bool
    module_text: list[str]
    libs: dict[str, Any]
    smi: dict[str, Any]
    torch: dict[str, Any] | None
    compile: dict[str, Any] | None
    toolchain: dict[str, Any] | None
    packages: dict[str, str] | None
    pip_check: dict[str, Any] | None
    marker: dict[str, Any] | None
    unit: dict[str, Any] | None
    gpus: list[dict[str, Any]] | None
    gpu_error: str | None
    driver: DriverVersions

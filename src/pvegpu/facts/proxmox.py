"""Node facts: Proxmox, NVIDIA driver, GPUs, device nodes and majors, boot units, container
configs."""

from __future__ import annotations

import json
from typing import cast

from ..documents import NodeStateDoc
from ..plan.installer_tools import INSTALLER_TOOLS
from .probe import ProbeFact, parse_probe_output

#: The node probe runs under the node's python3: without one the shell would answer "python3: not
#: found" (exit 127), read as a failed fact; this prints a document saying so instead.
NO_PYTHON3 = (
    "command -v python3 >/dev/null 2>&1 || { echo '{\"python3_missing\": true}'; exit 0; }; "
)


class NodeState(ProbeFact):
    """Everything the node stages compare against, in one command (one JSON document).

    .. code:: python

        state = host.get_fact(NodeState, vmids=[200], installer_dir="/root",
                              data_dir="/tank/dflash", boot_files=[], units=[],
                              ct_detail="full", unit_name="dflash-train.service")
        state["driver_version"], state["majors"]["nvidia-uvm"], state["containers"]["200"]["status"]

    - ``pve_version`` (pve-manager, from `pveversion -v`), ``pve_container``;
    - ``driver_version`` (the kernel module, /proc/driver/nvidia/version) and
      ``driver_version_smi`` (the userspace nvidia-smi reports);
    - ``gpus``: index, name, uuid, memory_total_mib, pci_bus_id (`nvidia-smi --query-gpu ...
      --format=csv`) and minor, the N of /dev/nvidiaN (``Device Minor`` in the kernel module's
      /proc/driver/nvidia/gpus/<bus>/information, joined by parsed PCI bus id; None when the
      module lists no such GPU; never assumed equal to index); ``gpu_error`` when nvidia-smi fails;
    - ``devices``: every /dev/nvidia* and /dev/nvidia-caps/* node with its major:minor (stat());
    - ``majors``: every character major by driver name, from /proc/devices (the uvm and caps
      majors are dynamic: never hard-coded);
    - ``boot_files`` (sha256 per path), ``units`` (path(s), enabled, active), ``tools``;
    - ``containers[<vmid>]``: exists, config (main section), raw_lxc, pending, pending_delete, text,
      and by ``ct_detail``: status ("status"), plus ``live`` ("full": the container's own view —
      driver_version from its /proc/driver/nvidia/version, libs, nvidia_smi, devices, unit_active,
      missing_tools: the utilities NVIDIA's installer needs that it would not find there);
    - ``path_kinds``: "file", "directory" or "missing" per path of ``paths`` (the training
      code's paths on the node, checked by the preflight in the same read);
    - ``data_dir_places``: for each of ``data_dirs`` (every data_dir_node of the node's hosts),
      whether its parent exists and whether it (or that parent) is on the root filesystem;
    - ``containers[<vmid>]["processes"]`` ("full", running only): every process of the
      container (node pid, ppid, pgid, session, state, start time, its pid in the container,
      argv, cwd, cgroup; None with ``processes_error`` when the scan failed), and
      ``memory_current`` (bytes its cgroup uses, with ``memory_cgroup`` "v2" or "v1");
      ``live["build_present"]``: ``build_dir`` (the selected venv build) exists in it;
    - ``fabric`` (each GPU's NVSwitch fabric state and status), ``nvswitches`` (the NVSwitch
      devices /proc/driver/nvidia-nvswitch lists), ``fabricmanager_version`` (on a fabric only),
      ``storages`` (`pvesm status
      --content <c>` for each of ``storage_contents`` when a container is missing or
      ``recreate``), ``python3_missing`` (the node has no python3: nothing else was read);
    - ``persistenced``: ``outside_pids`` (nvidia-persistenced daemons not run by its unit) and
      ``unit_ours`` (the unit file at ``persistenced_unit`` carries pvegpu's marker; None: none).
    - ``containers[<vmid>]["change"]`` ("full", a change gated on this read, sent on stdin with
      the reads: :mod:`pvegpu.run.gated`): whether the check on this read let it run, and its
      exit status and output;
    - ``containers[<vmid>]["reads"]`` ("full", and "reads": the reads alone, in one ``pct exec``
      without the view, the status that exec's answer): with ``reads_on_stdin``, the reads
      ({vmid: [container shell command, ...]}, ``reads_stdin(reads)`` as the fact's ``_stdin``)
      run in the same ``pct exec`` after the view, each one's ``rc`` and ``stdout`` lines
      (:mod:`pvegpu.run.ct_reads`). They travel on stdin, never in the command's text: the
      command is one argument of at most 128 KiB (Linux's MAX_ARG_STRLEN) however many
      containers fold their reads into it.
    """

    probe = "node_state"

    def command(
        self,
        vmids=(),
        installer_dir="/root",
        data_dir="/",
        data_dirs=(),
        boot_files=(),
        units=(),
        ct_detail="full",
        unit_name=None,
        paths=(),
        storage_contents=(),
        recreate=False,
        persistenced_unit=None,
        training_script=None,
        build_dir=None,
        reads_on_stdin=False,
    ):
        return NO_PYTHON3 + self.command_for(
            vmids=list(vmids),
            installer_dir=installer_dir,
            data_dir=data_dir,
            data_dirs=list(data_dirs),
            boot_files=list(boot_files),
            units=list(units),
            ct_detail=ct_detail,
            unit_name=unit_name,
            installer_tools=list(INSTALLER_TOOLS),
            paths=list(paths),
            storage_contents=list(storage_contents),
            recreate=bool(recreate),
            persistenced_unit=persistenced_unit,
            training_script=training_script,
            build_dir=build_dir,
            # the folded reads travel on stdin (reads_stdin): no argument's 128 KiB limit
            reads_on_stdin=bool(reads_on_stdin),
        )

    def process(self, output) -> NodeStateDoc:
        return cast(NodeStateDoc, parse_probe_output(self.probe, list(output)))


def reads_stdin(reads, act: dict | None = None) -> str:
    """The stdin of a ``NodeState`` read with folded ``reads``: one JSON line; with ``act`` (a
    change gated on this read, :mod:`pvegpu.run.gated`) both, under "reads" and "act".

    >>> reads_stdin({200: ["cat /x"]})
    '{"200": ["cat /x"]}'
    >>> reads_stdin(None, {"changes": {}})
    '{"reads": {}, "act": {"changes": {}}}'
    """
    folded = {str(k): list(v) for k, v in (reads or {}).items()}
    return json.dumps({"reads": folded, "act": act} if act else folded)

"""The torch runtime fact: what torch in a venv really sees (versions, CUDA, devices, memory)."""

from __future__ import annotations

from .probe import ProbeFact, probe_source


class TorchRuntime(ProbeFact):
    """torch version, CUDA version and availability, devices with memory, arch list, cuDNN, NCCL.

    .. code:: python

        rt = host.get_fact(TorchRuntime, python="/root/venv/bin/python")
        rt["version"], rt["cuda"], rt["available"], rt["device_count"]
        # ('2.11.0+cu130', '13.0', True, 8)
        rt["devices"][0]
        # {'index': 0, 'name': 'NVIDIA H200', 'uuid': '5a1e0000-...', 'total_mib': 143771,
        #  'free_mib': 143156, 'capability': '9.0', 'sm_count': 132}

    torch runs in a subprocess of the probe (``probes/torch_inner.py``): an import failure or a
    CUDA init error is data (``import_error`` / ``init_error``), never a failed fact.
    """

    probe = "torch_runtime"

    def command(self, python):
        return self.command_for(python=python, inner=probe_source("torch_inner"))

"""torch.cuda double: answers from what the process can see (see torch/_sim.py)."""

from __future__ import annotations

import threading
import warnings

from .. import _sim
from . import nccl

_initialized = False
_local = threading.local()


def _warn(state) -> None:
    if state.error and not state.silent:
        warnings.warn(_sim.warning_text(state), UserWarning, stacklevel=3)


def is_available() -> bool:
    state = _sim.probe()
    _warn(state)
    return not state.error and len(state.devices) > 0


def device_count() -> int:
    """NVML's count first (torch/cuda/__init__.py: ``_device_count_nvml()``, which counts GPUs
    CUDA may not have), cudaGetDeviceCount only when NVML cannot say."""
    from .. import _C

    nvml = _sim.nvml_count()
    if nvml >= 0:
        return nvml
    _warn(_sim.probe())
    return _C._cuda_getDeviceCount()


def is_initialized() -> bool:
    return _initialized


def _lazy_init():
    global _initialized
    state = _sim.probe()
    if state.error:
        raise RuntimeError(state.error)
    _initialized = True
    return state


def init() -> None:
    _lazy_init()


def current_device() -> int:
    _lazy_init()
    return getattr(_local, "device", 0)


def set_device(device) -> None:
    index = _device_index(device)
    if index >= 0:
        _lazy_init()
        if index != getattr(_local, "device", 0):
            # since CUDA 12.0 cudaSetDevice initialises the device's primary context; torch calls
            # it only for another device than the current one (c10::cuda::SetDevice)
            _sim.open_context(_gpu(index))
        _local.device = index


def _device_index(device, optional=True) -> int:
    if device is None:
        return getattr(_local, "device", 0)
    if isinstance(device, int):
        return device
    if isinstance(device, str):
        from .._tensor import device as _dev

        device = _dev(device)
    index = getattr(device, "index", None)
    return getattr(_local, "device", 0) if index is None else index


def _gpu(device):
    state = _lazy_init()
    index = _device_index(device)
    if index < 0 or index >= len(state.devices):
        raise AssertionError("Invalid device id")
    return state.devices[index]


class _CUuuid(str):
    """torch prints a device UUID without nvidia-smi's ``GPU-`` prefix."""


class _CudaDeviceProperties:
    def __init__(self, gpu: dict):
        self.name = str(gpu.get("name", "NVIDIA Graphics Device"))
        self.major, self.minor = _sim.capability(gpu)
        self.total_memory = int(gpu.get("memory_total_mib", gpu.get("memory_mib", 0))) * _sim.MIB
        self.multi_processor_count = _sim.sm_count(gpu)
        uuid = str(gpu.get("uuid", ""))
        self.uuid = _CUuuid(uuid[4:] if uuid.startswith("GPU-") else uuid)
        bus = str(gpu.get("pci_bus_id", "00000000:00:00.0"))
        try:
            domain, bus_no, devfn = bus.split(":")
            self.pci_domain_id = int(domain, 16)
            self.pci_bus_id = int(bus_no, 16)
            self.pci_device_id = int(devfn.split(".")[0], 16)
        except ValueError:
            self.pci_domain_id = self.pci_bus_id = self.pci_device_id = 0
        self.L2_cache_size = 60 * _sim.MIB if self.major >= 9 else 40 * _sim.MIB
        self.is_integrated = 0
        self.is_multi_gpu_board = 0
        self.warp_size = 32
        self.max_threads_per_multi_processor = 2048
        self.regs_per_multiprocessor = 65536

    def __repr__(self):
        return (
            f"_CudaDeviceProperties(name='{self.name}', major={self.major}, minor={self.minor}, "
            f"total_memory={self.total_memory // _sim.MIB}MB, "
            f"multi_processor_count={self.multi_processor_count}, uuid={self.uuid}, "
            f"pci_bus_id={self.pci_bus_id}, pci_device_id={self.pci_device_id}, "
            f"pci_domain_id={self.pci_domain_id}, L2_cache_size={self.L2_cache_size // _sim.MIB}MB)"
        )


def get_device_properties(device=None) -> _CudaDeviceProperties:
    """torch's check is against device_count() (NVML's); then at::cuda::getDeviceProperties
    asserts the ordinal is one CUDA has."""
    from .. import _C

    state = _lazy_init()
    index = _device_index(device)
    if index < 0 or index >= device_count():
        raise AssertionError("Invalid device id")
    if index >= len(state.devices):
        raise _C.device_assert(index)
    return _CudaDeviceProperties(state.devices[index])


def get_device_name(device=None) -> str:
    return get_device_properties(device).name


def get_device_capability(device=None) -> tuple[int, int]:
    props = get_device_properties(device)
    return props.major, props.minor


def mem_get_info(device=None) -> tuple[int, int]:
    gpu = _gpu(device)
    _sim.open_context(gpu)  # cudaMemGetInfo needs a context on the device
    total = int(gpu.get("memory_total_mib", gpu.get("memory_mib", 0))) * _sim.MIB
    used = _sim.used_mib(gpu) * _sim.MIB
    return max(total - used, 0), total


def get_arch_list() -> list[str]:
    if not is_available():
        return []
    return list(_sim.VARIANT["arch_list"])


def synchronize(device=None) -> None:
    _sim.open_context(_gpu(device))  # cudaDeviceSynchronize works in the device's context


def empty_cache() -> None:
    return None


def memory_allocated(device=None) -> int:
    return 0


def max_memory_allocated(device=None) -> int:
    return 0


def memory_reserved(device=None) -> int:
    return 0


# ruff: noqa: F401 (re-exports, as in real torch)

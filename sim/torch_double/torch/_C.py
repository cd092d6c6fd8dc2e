"""torch._C double: the CUDA entry points torch.cuda builds on (torch/csrc/cuda/Module.cpp)."""

from __future__ import annotations

from . import _sim

_ASSERT = (
    '{check} INTERNAL ASSERT FAILED at "/pytorch/aten/src/ATen/cuda/CUDAContext.cpp":50, '
    "please report a bug to PyTorch. device={device}, num_gpus={num}"
)


def _cuda_getDeviceCount() -> int:
    """cudaGetDeviceCount(): the devices CUDA enumerates here; 0 when CUDA cannot start
    (c10/cuda/CUDAFunctions.cpp device_count_impl; torch warns, see torch.cuda)."""
    state = _sim.probe()
    return 0 if state.error else len(state.devices)


def _cuda_hasPrimaryContext(device_index: int) -> bool:
    """Whether the device's primary context is active in this process
    (at::cuda::detail::hasPrimaryContext: cuDevicePrimaryCtxGetState)."""
    devices = _sim.probe().devices
    if not 0 <= device_index < len(devices):
        raise RuntimeError(
            f"hasPrimaryContext expects a valid device index, but got device_index={device_index}"
        )
    return _sim.has_context(devices[device_index])


def device_assert(device: int) -> RuntimeError:
    """at::cuda::getDeviceProperties's AT_ASSERT for an ordinal CUDA does not have."""
    num = _cuda_getDeviceCount()
    return RuntimeError(
        _ASSERT.format(check="device >= 0 && device < num_gpus", device=device, num=num)
    )

"""A fake tensor: shape, dtype and device only (no data). Enough for the compile check."""

from __future__ import annotations

import builtins


class dtype:
    def __init__(self, name: str, itemsize: int, is_floating_point: builtins.bool):
        self.name = name
        self.itemsize = itemsize
        self.is_floating_point = is_floating_point

    def __repr__(self):
        return "torch." + self.name


float32 = float = dtype("float32", 4, True)
float16 = half = dtype("float16", 2, True)
bfloat16 = dtype("bfloat16", 2, True)
int64 = long = dtype("int64", 8, False)
int32 = dtype("int32", 4, False)
bool = dtype("bool", 1, False)


class device:
    def __init__(self, type, index=None):
        if isinstance(type, device):
            type, index = type.type, type.index
        elif isinstance(type, int):
            type, index = "cuda", type
        elif ":" in type:
            type, _, idx = type.partition(":")
            index = int(idx)
        if type not in ("cpu", "cuda", "meta"):
            raise RuntimeError(
                "Expected one of cpu, cuda, meta device type at start of device string: " + type
            )
        self.type = type
        self.index = index

    def __str__(self):
        return self.type if self.index is None else f"{self.type}:{self.index}"

    def __repr__(self):
        if self.index is None:
            return f"device(type='{self.type}')"
        return f"device(type='{self.type}', index={self.index})"

    def __eq__(self, other):
        if isinstance(other, str):
            other = device(other)
        return isinstance(other, device) and (self.type, self.index) == (other.type, other.index)

    def __hash__(self):
        return hash((self.type, self.index))


class Size(tuple):
    def __repr__(self):
        return f"torch.Size({list(self)})"

    def numel(self):
        n = 1
        for d in self:
            n *= d
        return n


def _placed(dev) -> device:
    dev = device(dev if dev is not None else "cpu")
    if dev.type == "cuda":
        from . import cuda

        cuda._lazy_init()
        index = cuda.current_device() if dev.index is None else dev.index
        if index >= cuda.device_count():
            raise RuntimeError(
                "CUDA error: invalid device ordinal\nCUDA kernel errors might be asynchronously "
                "reported at some other API call, so the stacktrace below might be incorrect."
            )
        dev = device("cuda", index)
        _sim_context(cuda, index)
    return dev


class Tensor:
    def __init__(self, shape, device="cpu", dtype=float32, requires_grad=False):
        self.shape = Size(int(s) for s in shape)
        self.device = device if isinstance(device, globals()["device"]) else _placed(device)
        self.dtype = dtype
        self.requires_grad = requires_grad

    # shape and placement
    def size(self, dim=None):
        return self.shape if dim is None else self.shape[dim]

    def dim(self):
        return len(self.shape)

    @property
    def ndim(self):
        return len(self.shape)

    def numel(self):
        return self.shape.numel()

    @property
    def is_cuda(self):
        return self.device.type == "cuda"

    def to(self, *args, **kwargs):
        dev, dt = kwargs.get("device", self.device), kwargs.get("dtype", self.dtype)
        for a in args:
            if isinstance(a, dtype):
                dt = a
            elif isinstance(a, (str, device, int)):
                dev = a
        placed = _placed(dev) if not isinstance(dev, device) or dev != self.device else dev
        return Tensor(self.shape, placed, dt, self.requires_grad)

    def cuda(self, device=None):
        return self.to(device if device is not None else "cuda")

    def cpu(self):
        return self.to("cpu")

    def float(self):
        return self.to(float32)

    def half(self):
        return self.to(float16)

    def bfloat16(self):
        return self.to(bfloat16)

    def detach(self):
        return self

    def contiguous(self):
        return self

    def view(self, *shape):
        return self._like(shape[0] if len(shape) == 1 and isinstance(shape[0], tuple) else shape)

    reshape = view

    def transpose(self, a, b):
        s = list(self.shape)
        s[a], s[b] = s[b], s[a]
        return self._like(s)

    def _like(self, shape):
        return Tensor(shape, self.device, self.dtype, self.requires_grad)

    # reductions and arithmetic (shape-preserving; values are not modelled)
    def sum(self, *a, **k):
        return self._like(())

    mean = sum

    def item(self):
        return 0.0

    def backward(self, *a, **k):
        return None

    def _binary(self, other):
        return self._like(self.shape)

    __add__ = __radd__ = __sub__ = __rsub__ = __mul__ = __rmul__ = __truediv__ = _binary
    __matmul__ = _binary

    def __repr__(self):
        extra = "" if self.device.type == "cpu" else f", device='{self.device}'"
        return f"tensor(<fake {tuple(self.shape)}>{extra}, dtype={self.dtype!r})"


def _shape(size):
    if len(size) == 1 and isinstance(size[0], (tuple, list)):
        return tuple(size[0])
    return size


def _factory(*size, device=None, dtype=None, requires_grad=False, **_):
    return Tensor(_shape(size), _placed(device), dtype or float32, requires_grad)


randn = rand = zeros = ones = empty = _factory


def is_tensor(obj):
    return isinstance(obj, Tensor)


def _sim_context(cuda, index: int) -> None:
    """An allocation on a CUDA device needs this process's context there (see torch/_sim.py)."""
    from . import _sim

    _sim.open_context(cuda._gpu(index))

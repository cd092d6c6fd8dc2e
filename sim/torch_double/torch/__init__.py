"""torch double (pvegpu simulation): a pure-python stand-in for the parts of torch that pvegpu's
verification reads. Every CUDA answer is computed from what this process can really see (device
nodes, libcuda, /proc/driver/nvidia); see torch/_sim.py. Never published; built by sim/wheels.py.
"""

from . import _C, _build, _dynamo, backends, compiler, cuda, fx, nn, version
from ._dynamo import compile
from ._tensor import (
    Size,
    Tensor,
    bfloat16,
    bool,
    device,
    dtype,
    empty,
    float,
    float16,
    float32,
    half,
    int32,
    int64,
    is_tensor,
    long,
    ones,
    rand,
    randn,
    zeros,
)
from .version import __version__


def manual_seed(seed):
    return None


class no_grad:
    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return False

    def __call__(self, fn):
        return fn


inference_mode = no_grad

# ruff: noqa: F401 (re-exports, as in real torch)

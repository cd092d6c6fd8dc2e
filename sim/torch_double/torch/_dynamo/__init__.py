"""torch.compile double.

The first call of a compiled function "traces" it: the process-global FX-tracing flag
(torch.fx._symbolic_trace._is_fx_tracing_flag) is set for ``trace_seconds`` (default 0.2 s), then
a cache entry is written under ``$TORCHINDUCTOR_CACHE_DIR`` (default
``<tmp>/torchinductor_<user>``), as inductor's FX graph cache does.

Race (the cu128 build, or ``{"compile_race": true}`` in <nvidia>/sim/torch.json): entering any
compiled function while another thread holds the flag raises, as real dynamo does
(torch/_dynamo/eval_frame.py):
``RuntimeError: Detected that you are using FX to symbolically trace a dynamo-optimized
function. This is not supported at the moment.``
The cu130 build serialises compiles behind one lock, so no thread ever sees another's flag.
"""

from __future__ import annotations

import functools
import getpass
import hashlib
import json
import os
import tempfile
import threading
import time

from .. import _build, _sim, _triton
from ..fx import _symbolic_trace as _fx
from . import exc

MSG_FX_RACE = (
    "Detected that you are using FX to symbolically trace a dynamo-optimized function. "
    "This is not supported at the moment."
)
DEFAULT_TRACE_SECONDS = 0.2

_serial_lock = threading.RLock()
_local = threading.local()
sim_stats = {"traces": 0, "cache_hits": 0, "cache_misses": 0, "race_errors": 0}
# Set while some thread traces (for tests that want to start a second thread inside the window).
sim_tracing = threading.Event()


def _race_enabled() -> bool:
    return bool(_sim.torch_config().get("compile_race", _sim.VARIANT["compile_race"]))


def _trace_seconds() -> float:
    return float(_sim.torch_config().get("trace_seconds", DEFAULT_TRACE_SECONDS))


def cache_dir() -> str:
    configured = os.environ.get("TORCHINDUCTOR_CACHE_DIR")
    if configured:
        return configured
    try:
        user = getpass.getuser()
    except Exception:
        user = str(os.getuid())
    return os.path.join(tempfile.gettempdir(), "torchinductor_" + user)


def is_compiling() -> bool:
    return getattr(_local, "compiling", 0) > 0


def reset() -> None:
    return None


def _write_cache(fn) -> None:
    code = getattr(fn, "__code__", None)
    ident = "|".join(
        [
            _build.VERSION,
            _build.GIT_VERSION,
            getattr(fn, "__module__", "") or "",
            getattr(fn, "__qualname__", repr(type(fn))),
            code.co_code.hex() if code is not None else "",
        ]
    )
    key = hashlib.sha256(ident.encode()).hexdigest()
    entry = os.path.join(cache_dir(), "fxgraph", key[:2], key, "entry.json")
    if os.path.exists(entry):
        sim_stats["cache_hits"] += 1
        return
    sim_stats["cache_misses"] += 1
    os.makedirs(os.path.dirname(entry), exist_ok=True)
    tmp = entry + f".tmp{os.getpid()}.{threading.get_ident()}"
    with open(tmp, "w") as f:
        json.dump(
            {
                "torch": _build.VERSION,
                "cuda": _build.CUDA,
                "git_version": _build.GIT_VERSION,
                "function": getattr(fn, "__qualname__", ""),
            },
            f,
        )
    os.replace(tmp, entry)


def _inductor():
    """The backend function dynamo names in its errors (``backend='inductor'``)."""


_inductor.__name__ = "inductor"


def _inductor_cuda_backend() -> None:
    """inductor's first CUDA kernel starts Triton's driver, which builds its C helper with the
    system's compiler and Python headers (see torch._triton); a failure there is the backend's."""
    try:
        _triton.cuda_utils()
    except Exception as e:
        raise exc.BackendCompilerFailed(_inductor, e) from e


def _signature(args, kwargs) -> str:
    """The kernels' signature as dynamo guards it: each tensor argument's shape and dtype."""
    parts = []
    for a in list(args) + list(kwargs.values()):
        if hasattr(a, "shape") and hasattr(a, "dtype"):
            parts.append(f"{tuple(a.shape)}:{a.dtype}")
    return ",".join(parts)


def _inductor_launcher(signature: str) -> None:
    """A new signature compiles new kernels, and Triton a launcher for each (see torch._triton),
    at run time; a failure there is the backend's, as the first compile's."""
    try:
        _triton.launcher(signature)
    except Exception as e:
        raise exc.BackendCompilerFailed(_inductor, e) from e


class _Optimized:
    def __init__(self, fn, options):
        self._orig_mod = fn
        self._options = options
        self._compiled = False
        self._signatures: set = set()
        functools.update_wrapper(self, fn, updated=())

    def __get__(self, obj, objtype=None):
        return self if obj is None else functools.partial(self, obj)

    def _trace(self) -> None:
        sim_stats["traces"] += 1
        sim_tracing.set()
        try:
            _inductor_cuda_backend()
            time.sleep(_trace_seconds())
            _write_cache(self._orig_mod)
        finally:
            sim_tracing.clear()
        self._compiled = True

    def __call__(self, *args, **kwargs):
        if _race_enabled():
            tracing_here = False
            with _fx._flag_lock:
                if _fx._is_fx_tracing_flag:
                    sim_stats["race_errors"] += 1
                    raise RuntimeError(MSG_FX_RACE)
                if not self._compiled:
                    _fx._is_fx_tracing_flag = True
                    tracing_here = True
            if tracing_here:
                try:
                    self._trace()
                finally:
                    with _fx._flag_lock:
                        _fx._is_fx_tracing_flag = False
        else:
            with _serial_lock:
                if not self._compiled:
                    _fx._is_fx_tracing_flag = True
                    try:
                        self._trace()
                    finally:
                        _fx._is_fx_tracing_flag = False
        signature = _signature(args, kwargs)
        if signature not in self._signatures:
            _inductor_launcher(signature)
            self._signatures.add(signature)
        _local.compiling = getattr(_local, "compiling", 0) + 1
        try:
            return self._orig_mod(*args, **kwargs)
        finally:
            _local.compiling -= 1


def compile(
    model=None,
    *,
    fullgraph=False,
    dynamic=None,
    backend="inductor",
    mode=None,
    options=None,
    disable=False,
):
    options = {"fullgraph": fullgraph, "dynamic": dynamic, "backend": backend, "mode": mode}
    if model is None:
        return lambda fn: compile(fn, **{k: v for k, v in options.items()}, disable=disable)
    if disable:
        return model
    return _Optimized(model, options)

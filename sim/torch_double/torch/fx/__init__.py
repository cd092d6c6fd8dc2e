from . import _symbolic_trace
from ._symbolic_trace import is_fx_tracing

# ruff: noqa: F401 (re-exports, as in real torch)

from .api import SignalException, SubprocessContext

# ruff: noqa: F401 (re-exports, as in real torch)

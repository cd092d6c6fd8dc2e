from . import cudnn

# ruff: noqa: F401 (re-exports, as in real torch)

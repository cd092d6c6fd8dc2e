from . import attention

# ruff: noqa: F401 (re-exports, as in real torch)

"""torch._dynamo.exc, the part the double raises (torch/_dynamo/exc.py)."""

from __future__ import annotations


class TorchDynamoException(RuntimeError):
    pass


class BackendCompilerFailed(TorchDynamoException):
    """What dynamo raises when the backend (inductor) failed to compile a graph."""

    def __init__(self, backend_fn, inner_exception) -> None:
        self.backend_name = getattr(backend_fn, "__name__", "?")
        self.inner_exception = inner_exception
        cause = f"{type(inner_exception).__name__}: {inner_exception}"
        msg = f"backend={self.backend_name!r} raised:\n{cause}"
        super().__init__(msg)

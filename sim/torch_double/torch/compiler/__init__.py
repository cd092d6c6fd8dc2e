from .._dynamo import reset


def is_compiling():
    from .. import _dynamo

    return _dynamo.is_compiling()


# ruff: noqa: F401 (re-exports, as in real torch)

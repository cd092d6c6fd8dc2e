from .. import _sim


def version():
    return tuple(_sim.VARIANT["nccl"])


def is_available(tensors=None):
    return True

from ... import _sim

enabled = True
benchmark = False
deterministic = False
allow_tf32 = True


def version():
    return _sim.VARIANT["cudnn"]


def is_available():
    return True

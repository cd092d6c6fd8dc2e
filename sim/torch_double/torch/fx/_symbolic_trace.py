"""The module-global FX tracing flag. As in real torch it is process-wide, not per thread: that is
what makes concurrent compiles from several threads race (see torch/_dynamo)."""

import threading

_is_fx_tracing_flag = False
_flag_lock = threading.Lock()  # the double's own: makes check-and-set atomic, so the race is exact


def is_fx_tracing():
    return _is_fx_tracing_flag

"""Whether mutmut (bench/mutation.py) has instrumented pvegpu's sources in this copy: a test
that sends a probe or netrules.py inline on one command line then sends mutmut's trampolines
too, past Linux's 128 KiB limit for one argument, and measures mutmut's size, not ours."""

from __future__ import annotations

from importlib import resources


def instrumented_by_mutmut() -> bool:
    sources = [resources.files("pvegpu").joinpath(n) for n in ("guard.py", "netrules.py")]
    sources += [f for f in resources.files("pvegpu.probes").iterdir() if f.name.endswith(".py")]
    return any("mutmut" in f.read_text() for f in sources)

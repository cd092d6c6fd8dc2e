"""torch.compile's toolchain: Triton builds a small C extension at its first CUDA kernel
(triton/runtime/build.py: ``$CC``, else gcc, else clang on PATH, and ``-I`` the venv's Python
headers), and a launcher for every new kernel signature while the training runs, so the
container needs a C compiler and ``Python.h`` for as long as it trains, whatever
``verify_level`` is: the training compiles flex_attention. Triton before 3.6 links those
launchers with ``-lcuda``, which needs the ``libcuda.so`` link beside ``libcuda.so.1``.

>>> toolchain_text({"cc": "/usr/bin/gcc", "cc_version": "12.2.0",
...                 "python_include": "/usr/include/python3.11", "python_h": True})
'gcc 12.2.0, Python.h in /usr/include/python3.11'
"""

from __future__ import annotations

import os
import re

from ..plan.toolchain import TOOLCHAIN_INSTALL
from .inputs import Inputs
from .verdict import Problem, Verdict


def toolchain_text(tc: dict) -> str:
    """The toolchain fact in words (what the report's header shows)."""
    cc = os.path.basename(tc["cc"]) if tc.get("cc") else "no C compiler"
    version = f" {tc['cc_version']}" if tc.get("cc") and tc.get("cc_version") else ""
    include = tc.get("python_include") or "?"
    headers = f"Python.h in {include}" if tc.get("python_h") else f"no Python.h in {include}"
    return f"{cc}{version}, {headers}"


#: Triton links its launchers with ``-l:libcuda.so.1`` from triton-lang/triton pull 8668 (merged
#: November 2025, in 3.6, the Triton of torch 2.11); with ``-lcuda`` before, which the linker
#: resolves to ``libcuda.so`` only.
SONAME_LINK_FROM = (3, 6)


def needs_libcuda_link(ct: dict) -> bool:
    """Whether the venv's Triton links with ``-lcuda`` and the container lacks ``libcuda.so``.

    >>> libs = {"libcuda.so.1": "libcuda.so.580.95.05", "libcuda.so": None}
    >>> needs_libcuda_link({"libs": libs, "packages": {"triton": {"version": "3.5.1"}}})
    True
    >>> needs_libcuda_link({"libs": libs, "packages": {"triton": {"version": "3.6.0"}}})
    False
    """
    libs = ct.get("libs") or {}
    found = (ct.get("packages") or {}).get("triton") or {}
    parts = re.findall(r"\d+", str(found.get("version") or ""))[:2]
    old = bool(parts) and tuple(int(p) for p in parts) < SONAME_LINK_FROM
    return old and bool(libs.get("libcuda.so.1")) and not libs.get("libcuda.so")


def check_toolchain(v: Verdict, f: Inputs) -> None:
    """The venv's container has a C compiler and its Python's headers (unread: no check), and
    the libcuda.so link where its Triton links with -lcuda."""
    ct = f.ct or {}
    tc = ct.get("toolchain")
    if ct.get("present") and needs_libcuda_link(ct):
        v.problems.append(
            Problem(
                "torch.compile toolchain",
                "libcuda.so beside libcuda.so.1: this Triton links each kernel launcher it "
                "compiles with -lcuda",
                "no /usr/lib/x86_64-linux-gnu/libcuda.so",
                f"`ln -s libcuda.so.1 /usr/lib/x86_64-linux-gnu/libcuda.so` in CT {f.vmid} (the "
                "driver's .run installer makes this link)",
            )
        )
    if not ct.get("present") or not isinstance(tc, dict):
        return
    if tc.get("cc") and tc.get("python_h"):
        return
    waits = [w for w in f.waiting if w.startswith(f"CT {f.vmid}: {TOOLCHAIN_INSTALL}")]
    if waits:
        # the install waits for the training running on this python (this run said so): the
        # build is fine, the container gets its toolchain once that training is gone
        v.warnings.append(f"{toolchain_text(tc)}: {waits[0]}")
        return
    v.problems.append(
        Problem(
            "torch.compile toolchain",
            "a C compiler (gcc or clang) and Python.h of the venv's Python, which Triton "
            "builds its C helper and each new kernel's launcher with, while the training runs",
            toolchain_text(tc),
            f"run deploy.py (it installs gcc and the Python headers from CT {f.vmid}'s apt "
            "sources)",
        )
    )

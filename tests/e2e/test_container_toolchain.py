"""torch.compile's toolchain (issue 21, item 1): Triton builds a small C extension at its first
CUDA kernel with gcc (or clang, or $CC) against the venv's Python headers
(triton/runtime/build.py), and Proxmox's debian-12-standard has neither. The torch double does
the same for real in the container (sim/torch_double/torch/_triton.py): a container without them
fails verify_level=compile; the deploy installs gcc and libpython3.11-dev from the container's
own apt sources (the site's mirror, on loopback), or stops with one line."""

from __future__ import annotations

import pytest

NO_COMPILER = "RuntimeError: Failed to find C compiler. Please specify via CC environment variable."


def installed(site, package: str) -> str:
    return site.ct("dpkg-query", "-W", "-f=${Status}", package).stdout


def test_a_template_without_a_compiler_gets_one_and_compiles(site, toolchain_mirror):
    node = site.node
    node.configure(template_toolchain=False, apt_mirror=toolchain_mirror.url)  # CT made next
    first = site.deploy("verify_level=compile")
    assert first.rc == 0, first.output[-4000:]
    assert "CT 200 lacks a C compiler (gcc or clang) and python3.11's headers" in first.output
    assert installed(site, "gcc") == installed(site, "libpython3.11-dev") == "install ok installed"
    assert "concurrent torch.compile ok" in first.output, first.output[-4000:]
    assert "gcc 12.2.0, Python.h in /usr/include/python3.11" in first.output

    served = len(toolchain_mirror.requests)
    again = site.deploy("verify_level=compile")
    assert again.rc == 0 and again.changed == 0, again.output[-4000:]
    assert len(toolchain_mirror.requests) == served  # no apt run at all

    # Without a compiler (what a deploy before this change left): verify_level=compile fails,
    # as Triton does, with the toolchain named; the next deploy puts it back.
    assert site.ct("dpkg", "-r", "gcc").returncode == 0
    bare = site.pyinfra("verify.py", "verify_level=compile")
    assert bare.rc != 0
    assert (
        "torch.compile toolchain: expected a C compiler (gcc or clang) and Python.h" in bare.output
        and "found no C compiler, Python.h in /usr/include/python3.11" in bare.output
    ), bare.output[-4000:]
    assert NO_COMPILER in bare.output
    fixed = site.deploy("verify_level=compile")
    assert fixed.rc == 0, fixed.output[-4000:]
    assert installed(site, "gcc") == "install ok installed"


@pytest.mark.parametrize("node_options", [{"template_toolchain": False}])  # and no apt source
def test_a_toolchain_that_cannot_be_installed_stops_with_one_line(site):
    run = site.deploy()
    assert run.rc != 0
    line = (
        "CT 200 lacks gcc and libpython3.11-dev, which torch.compile (Triton) needs to build "
        "its C helper, and apt-get could not install them (E: Unable to locate package gcc)"
    )
    assert run.output.count(line) == 1, run.output[-4000:]
    assert "Traceback" not in run.output
    assert installed(site, "gcc") == ""

"""torch.compile's toolchain: Triton builds a small C extension at its first
CUDA kernel with gcc (or clang, or $CC) against the venv's Python headers
(triton/runtime/build.py), and Proxmox's debian-12-standard has neither. The torch double does
the same for real in the container (sim/torch_double/torch/_triton.py): a container without them
fails verify_level=compile; the deploy installs gcc and libpython3.11-dev from the container's
own apt sources (the site's mirror, on loopback), or stops with one line. As Debian's archive,
the mirror has only the newest python3.11, one update ahead of the template's: the install is
unpinned where nothing runs, and waits for a training that runs on the older one."""

from __future__ import annotations

import pytest

from sim.debarchive import aged_status, python_packages
from sim.rootfs import ensure_tree
from tests.e2e.conftest import systemd_site
from tests.e2e.test_adopt import wait_for

UNIT = "dflash-train.service"
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
    # the template's python3.11 was one update behind the mirror, which has only the newer one:
    # nothing ran on it, so it moved to the archive's version with its headers
    archive = python_packages((ensure_tree("bookworm") / "var/lib/dpkg/status").read_text())
    assert dpkg_version(site, "python3.11") == archive["libpython3.11-stdlib"]
    assert "concurrent torch.compile ok" in first.output, first.output[-4000:]
    assert "gcc 12.2.0, Python.h in /usr/include/python3.11" in first.output

    # the training now runs and holds its GPUs: a compile check beside it needs consent, so the
    # deploys from here verify as a converged node's do
    served = len(toolchain_mirror.requests)
    again = site.deploy()
    assert again.rc == 0 and again.changed == 0, again.output[-4000:]
    assert len(toolchain_mirror.requests) == served  # no apt run at all

    # Without a compiler (what a deploy before this change left): verify_level=compile fails,
    # as Triton does, with the toolchain named; the next deploy puts it back.
    assert site.ct("dpkg", "-r", "gcc").returncode == 0
    assert site.ct("systemctl", "stop", "dflash-train.service").returncode == 0  # its GPUs free
    bare = site.pyinfra("verify.py", "verify_level=compile")
    assert bare.rc != 0
    assert (
        "torch.compile toolchain: expected a C compiler (gcc or clang) and Python.h" in bare.output
        and "found no C compiler, Python.h in /usr/include/python3.11" in bare.output
    ), bare.output[-4000:]
    assert NO_COMPILER in bare.output
    fixed = site.deploy()
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


def dpkg_version(site, package: str) -> str:
    return site.ct("dpkg-query", "-W", "-f=${Version}", package).stdout


def python_one_update_behind(site) -> None:
    """CT 200's python3.11 recorded one update older than its archive's, its headers gone: what
    a container made from a template before the archive's last python3.11 update has."""
    assert site.ct("dpkg", "-r", "libpython3-dev", "libpython3.11-dev").returncode == 0
    status = site.ct("cat", "/var/lib/dpkg/status").stdout
    site.node.ct_run(
        200, ["sh", "-c", "cat > /var/lib/dpkg/status"], input=aged_status(status), check=True
    )


def unit_trainer(site) -> int:
    out = site.ct("systemctl", "show", "-p", "MainPID", "--value", UNIT).stdout.strip()
    return int(out or 0)


def test_a_training_keeps_its_python_while_the_archive_has_only_a_newer_one(
    wheelhouse, tmp_path, toolchain_mirror
):
    archive = python_packages((ensure_tree("bookworm") / "var/lib/dpkg/status").read_text())
    newer = archive["libpython3.11-stdlib"]
    options = {"template_toolchain": False, "apt_mirror": toolchain_mirror.url}
    with systemd_site(wheelhouse, tmp_path, **options) as site:
        # a new container: its python older than the archive's; nothing runs on it yet, so
        # the toolchain comes unpinned and python3.11 moves to the archive's version with it
        first = site.deploy()
        assert first.rc == 0, first.output[-4000:]
        assert dpkg_version(site, "libpython3.11-stdlib") == newer
        assert dpkg_version(site, "python3.11") == newer
        trainer = wait_for("the unit's trainer", lambda: unit_trainer(site))

        python_one_update_behind(site)
        older = dpkg_version(site, "libpython3.11-stdlib")
        assert older != newer
        served = len(toolchain_mirror.requests)
        run = site.deploy()
        assert run.rc == 0, run.output[-4000:]
        change = (
            "CT 200: apt-get install libpython3.11-dev (CT 200's apt sources have no "
            "libpython3.11-dev of its installed python3.11: a newer one would upgrade "
            "python3.11 under the training) waits for"
        )
        assert change in run.output, run.output[-4000:]
        assert "Traceback" not in run.output and "was not found" not in run.output
        # the archive was read (the pin is not there), nothing installed: same python, same pid
        assert len(toolchain_mirror.requests) > served
        assert dpkg_version(site, "libpython3.11-stdlib") == older
        assert dpkg_version(site, "libpython3.11-dev") == ""
        assert unit_trainer(site) == trainer

"""What a running container needs besides its venv: the NVIDIA userspace matching the node's
kernel module (from the node's own .run installer) and the C toolchain torch.compile's Triton
builds with. Both read the container's own view from the node read (``proxmox.node_state``).
"""

from __future__ import annotations

import shlex
from typing import Any

from pyinfra import host
from pyinfra.api import StringCommand, operation

from ..facts.toolchain import ToolchainArchive
from ..plan.installer_tools import (
    install_kmod_script,
    missing_installer_line,
    missing_tools_line,
    plan_tools,
)
from ..plan.running_training import others
from ..plan.toolchain import (
    dev_package,
    install_toolchain_script,
    pinned_in_archive,
    toolchain_lacks,
    toolchain_packages,
    toolchain_wait_change,
)
from ..settings import GpuSettings, RunPolicy
from .preview import show
from .progress import Progress, with_progress
from .proxmox import node_state
from .training_gate import running_here, wait_for
from .util import failure, note

#: a running container whose own view could not be read (see :func:`seen_view`)
UNREAD: dict = {"unread": True}


def seen_view(vmid: int) -> tuple[dict, dict, dict | None]:
    """(the node's read, CT ``vmid``'s, its own view): None when it does not exist or is
    stopped (nothing to compare), ``UNREAD`` when it may run but its view could not be read (a
    `pct exec` that failed or ran out of time, e.g. right after its start) even when read once
    more: what the view would show is not known, so the caller fails closed."""
    state, ct = node_state(vmid, "full")
    if not ct.get("exists") or ct.get("live") or ct.get("status") == "stopped":
        return state, ct, ct.get("live") or None
    state, ct = node_state(vmid, "full", fresh=True)
    if not ct.get("exists") or ct.get("live") or ct.get("status") == "stopped":
        return state, ct, ct.get("live") or None
    return state, ct, UNREAD


def unread_view_line(vmid: int, what: str) -> str:
    """The refusal of a change whose check needs CT ``vmid``'s own view, which did not answer.

    >>> unread_view_line(200, "its NVIDIA userspace")[:60]
    'CT 200 may be running, but its own view could not be read tw'
    """
    return (
        f"CT {vmid} may be running, but its own view could not be read twice (its `pct exec` "
        f"failed or ran out of time): {what} cannot be checked; check `pct exec {vmid} -- true` "
        "on the node, then deploy again"
    )


@operation()
def compile_toolchain(vmid: int, policy: RunPolicy | None = None):
    """Give the container what torch.compile's Triton compiles with: a C compiler and the
    headers of the Python its venvs are made from, from the container's own apt sources.

    .. code:: python

        proxmox.compile_toolchain(name="CT 200's C compiler and Python headers", vmid=200)

    Triton builds a small C extension at its first CUDA kernel (triton/runtime/build.py: ``$CC``,
    else gcc, else clang, with ``-I`` the Python headers); Proxmox's standard templates have
    neither, so a training that compiles flex_attention crash-loops without them.
    """
    _state, ct, live = seen_view(vmid)
    if live is None:
        return  # not created yet (preview) or not running
    if live is UNREAD:
        yield from failure(unread_view_line(vmid, "its C compiler and Python headers"))
        return
    toolchain: Any = live.get("toolchain")  # as the view read it (None: not read)
    packages = toolchain_packages(toolchain)
    if not packages:
        return
    # unpinned, libpython3.X-dev upgrades python3.X to the archive's version: only where no
    # training runs on it (a state that cannot be read counts as one); pinned where one runs,
    # and Debian's archive keeps only the newest version, so the pin may not be there
    trainers = running_here(host, vmid)
    if trainers and not pinned_version_there(vmid, packages):
        consent = bool(policy and policy.restart_training) and not any(t.ours for t in trainers)
        wait_for(host, vmid, toolchain_wait_change(vmid, packages), trainers, consent)
        return
    line = (
        f"CT {vmid} lacks {toolchain_lacks(toolchain)}, which torch.compile (Triton) needs: "
        f"installing {' '.join(packages)} from the container's apt sources"
    )
    show(f"installs (apt) in CT {vmid}: {' '.join(packages)}", [line])
    yield note(line)
    script = install_toolchain_script(vmid, packages, pinned=bool(trainers))
    yield StringCommand(f"pct exec {vmid} -- sh -c {shlex.quote(script)}")


def pinned_version_there(vmid: int, packages: list[str]) -> bool:
    """Whether CT ``vmid``'s apt sources have ``libpython3.X-dev`` at its installed python's
    version (True when ``packages`` holds no libpython3.X-dev: gcc alone changes no python)."""
    dev = dev_package(packages)
    if dev is None:
        return True
    found = host.get_fact(ToolchainArchive, vmid=vmid, dev=dev, _ignore_errors=True)
    return pinned_in_archive(found)


@operation()
def driver_userspace(
    vmid: int, gpus: GpuSettings, progress_interval_s: int = 10, policy: RunPolicy | None = None
):
    """Install exactly the kernel module's version as NVIDIA userspace in the container, with
    the node's installer from ``gpus.installer_dir`` (nvidia_installer_dir), saying every
    ``progress_interval_s`` how long the installer has run.

    .. code:: python

        proxmox.driver_userspace(name="CT 200's NVIDIA userspace", vmid=200, gpus=s.gpus,
                                 progress_interval_s=s.policy.progress_interval_s)

    The target is the version the container itself sees in /proc/driver/nvidia/version (the
    node's module). libcuda, libnvidia-ml and nvidia-smi must match it to the patch level, or CUDA
    fails ("Driver/library version mismatch" / CUDA error 999). A mismatch is reported as a fact,
    then repaired with the same NVIDIA .run installer as the node's, with ``--no-kernel-modules``,
    after checking the utilities that installer needs (kmod's are installed with apt).
    """
    state, ct, live = seen_view(vmid)
    if live is None:
        return  # not created yet (preview) or not running: nothing to compare
    if live is UNREAD:
        yield from failure(unread_view_line(vmid, "its NVIDIA userspace"))
        return
    target = live.get("driver_version") or state.get("driver_version")
    if not target:
        return
    wrong = userspace_mismatch(live, target)
    if not wrong:
        return
    # under any training pvegpu did not start (deferred past the takeover with consent), and
    # under pvegpu's own unit while it holds a GPU (its libcuda would change under it); a unit
    # of ours that holds none cannot be using CUDA through libraries that do not match the
    # node's module (e.g. it came up at the boot of this very restart)
    trainers = running_here(host, vmid)
    consent = bool(policy and policy.restart_training)
    ours = [t for t in trainers if t.ours and t.gpus]
    blockers = others(trainers) or ([] if consent else ours)
    if blockers:
        change = f"the NVIDIA userspace reinstall ({', '.join(wrong)})"
        wait_for(host, vmid, change, blockers, consent)
        return
    installer = state.get("installer") if state.get("driver_version") == target else None
    if not installer:
        has = ", ".join(wrong)
        yield from failure(missing_installer_line(vmid, target, has, gpus.installer_dir))
        return
    # nvidia-installer aborts without these, even with --no-kernel-modules: check them first
    # (read by the same container probe), install kmod's when only those are missing.
    action, missing = plan_tools(live.get("missing_tools"))
    show(
        f"installs NVIDIA userspace {target} in CT {vmid} (now: {', '.join(wrong)})",
        ["kmod (apt), which the NVIDIA installer needs"] if action == "install_kmod" else [],
    )
    if action == "fail":
        yield from failure(missing_tools_line(vmid, missing))
        return
    if action == "install_kmod":
        yield note(
            f"CT {vmid} lacks {', '.join(missing)} (kmod), which the NVIDIA installer "
            f"needs: installing kmod from the container's apt sources"
        )
        yield StringCommand(
            f"pct exec {vmid} -- sh -c {shlex.quote(install_kmod_script(vmid, missing))}"
        )
    yield note(f"CT {vmid}: kernel module {target}, userspace {', '.join(wrong)}: reinstalling")
    yield with_progress(
        installer_command(vmid, installer),
        Progress(f"CT {vmid}: installing NVIDIA userspace {target}", progress_interval_s),
    )


def userspace_mismatch(live: dict, target: str) -> list[str]:
    """What of the container's NVIDIA userspace (its own view, ``live``) is not ``target``.

    >>> userspace_mismatch({"libs": {"libcuda.so.1": "580.95.05"}, "nvidia_smi": True},
    ...                    "580.95.05")
    ['libnvidia-ml missing']
    """
    libs = live.get("libs", {})
    found = {"libcuda": libs.get("libcuda.so.1"), "libnvidia-ml": libs.get("libnvidia-ml.so.1")}
    wrong = [f"{name} {ver or 'missing'}" for name, ver in found.items() if ver != target]
    if not live.get("nvidia_smi"):
        wrong.append("nvidia-smi missing")
    return wrong


def installer_command(vmid: int, installer: str) -> StringCommand:
    """Copy the node's ``installer`` (.run) into the container and run it for the userspace
    only, deleting the copy afterwards."""
    target_path = f"/root/{installer.rsplit('/', 1)[-1]}"
    script = (
        f"test -s {target_path} && sh {target_path} --silent --no-kernel-modules; rc=$?; "
        f"rm -f {target_path}; exit $rc"
    )
    # pct push exits 0 even when the copy fails inside the container: the script checks it.
    return StringCommand(
        f"pct push {vmid} {shlex.quote(installer)} {shlex.quote(target_path)} && "
        f"pct exec {vmid} -- sh -c {shlex.quote(script)}"
    )

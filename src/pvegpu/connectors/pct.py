"""The ``@pct`` connector: run operations inside a Proxmox LXC container over SSH to its node.

Hosts are named ``@pct/<node address>/<vmid>``. Every command travels over one SSH connection
to the node (the node host's own when the inventory has it: pvegpu.connectors.shared_ssh) and
enters the container with ``pct exec``; files stream through ``pct exec ... cat`` instead of
``pct push``/``pct pull``, because those exit 0 even when the copy fails inside the container
(pve-container, src/PVE/CLI/pct.pm: the copy runs in a forked child whose status is ignored) and
push does not create parent directories.

Example inventory entry::

    training_cts = [("@pct/10.1.2.6/200", {"ssh_user": "root", "ssh_key": "~/.ssh/id_ed25519"})]

The container need not exist at connect time: the same run may create it.
"""

from __future__ import annotations

import re
import shlex
import threading
from typing import TYPE_CHECKING

from pyinfra.api import QuoteString, StringCommand
from pyinfra.api.exceptions import InventoryError
from pyinfra.api.util import get_file_io
from pyinfra.connectors.base import BaseConnector
from pyinfra.connectors.ssh import SSHConnector
from pyinfra.connectors.util import (
    CommandOutput,
    OutputLine,
    extract_control_arguments,
    make_unix_command_for_host,
)

from .shared_ssh import announce_node, connect_shared, keep_alive

if TYPE_CHECKING:
    from pyinfra.api.host import Host
    from pyinfra.api.state import State

# `pct exec` keeps the caller's environment by default and forces PATH to
# /sbin:/bin:/usr/sbin:/usr/bin, so /usr/local/bin tools vanish and the controller's LANG etc.
# leak in. `env -i` gives every command the same clean environment on every PVE version
# (older pct has no --keep-env option).
CONTAINER_ENV = (
    "PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
    "HOME=/root",
    "LANG=C.UTF-8",
)

SSH_DATA_KEYS = (
    "ssh_port",
    "ssh_user",
    "ssh_password",
    "ssh_key",
    "ssh_key_password",
    "ssh_known_hosts_file",
    "ssh_strict_host_key_checking",
    "ssh_config_file",
    "ssh_allow_agent",
    "ssh_look_for_keys",
    "ssh_connect_retries",
)

#: The data a ``@pct/<node>/<vmid>`` name gives its host besides ``ssh_hostname``.
PCT_DATA_KEYS = ("pct_node", "pct_vmid")

# Errors printed by pct itself (exit 255), as opposed to the command run inside.
# pct exec on a stopped CT says "container '200' not running!" (PVE::LXC::Config check_running).
PCT_NOT_RUNNING = re.compile(r"container '(\d+)' not running|CT (\d+) not running")
PCT_NO_CONFIG = re.compile(r"Configuration file '.*?/lxc/(\d+)\.conf' does not exist")


def parse_pct_name(name: str) -> tuple[str, int]:
    """Split ``<node>/<vmid>`` into its parts.

    >>> parse_pct_name("10.1.2.6/200")
    ('10.1.2.6', 200)
    """
    node, sep, vmid = name.rpartition("/")
    if not sep or not node or not vmid.isdigit() or not 100 <= int(vmid) <= 999999999:
        raise InventoryError(
            f"invalid @pct host {name!r}: use @pct/<node address>/<vmid>, e.g. @pct/10.1.2.6/200"
        )
    return node, int(vmid)


def pct_exec_argv(vmid: int, command: str) -> list[str]:
    """The node-side argv that runs a shell command inside a container.

    >>> pct_exec_argv(200, "echo hi")[:4]
    ['pct', 'exec', '200', '--']
    """
    return ["pct", "exec", str(vmid), "--", "env", "-i", *CONTAINER_ENV, "sh", "-c", command]


def put_command(path: str) -> str:
    """The container shell command writing stdin to ``path``: beside the target, then renamed, so
    a reader never sees half a file. Every name is one shell word, whatever it holds.

    >>> print(put_command("/tmp/a b"))
    cat > '/tmp/a b.pvegpu-tmp' && mv -f -- '/tmp/a b.pvegpu-tmp' '/tmp/a b'
    """
    tmp = shlex.quote(f"{path}.pvegpu-tmp")
    return f"cat > {tmp} && mv -f -- {tmp} {shlex.quote(path)}"


def get_command(path: str) -> str:
    """The container shell command printing ``path`` (``--``: a name may start with a dash).

    >>> get_command("-n x")
    "cat -- '-n x'"
    """
    return f"cat -- {shlex.quote(path)}"


def explain_pct_error(node: str, vmid: int, stderr: str) -> str | None:
    """Turn pct's own failure into one line naming node, vmid and the fix (None if not pct's).

    >>> explain_pct_error("n1", 200, "container '200' not running!")
    'container 200 on node n1 is not running: start it with `pct start 200` or run deploy.py'
    """
    if PCT_NOT_RUNNING.search(stderr):
        return (
            f"container {vmid} on node {node} is not running: "
            f"start it with `pct start {vmid}` or run deploy.py"
        )
    if PCT_NO_CONFIG.search(stderr):
        return (
            f"container {vmid} does not exist on node {node}: "
            "create it by running deploy.py (or check CT_ID / the fleet file)"
        )
    return None


class PctConnector(BaseConnector):
    """Run commands in a Proxmox LXC container through ``pct exec`` on its node, over SSH.

    .. code:: shell

        pyinfra @pct/10.1.2.6/200 exec -- nvidia-smi -L
    """

    handles_execution = True

    ssh: SSHConnector

    def __init__(self, state: State, host: Host):
        inherit_node_ssh_data(state, host)
        super().__init__(state, host)
        self.ssh = SSHConnector(state, host)
        self.node = host.data.pct_node
        self.vmid = int(host.data.pct_vmid)
        #: whether the SSH connection is the node host's (pvegpu.connectors.shared_ssh)
        self.shares_node = False
        announce_node(state, self.node)

    @staticmethod
    def make_names_data(name: str):
        node, vmid = parse_pct_name(name)
        yield (
            f"@pct/{node}/{vmid}",
            {"ssh_hostname": node, "pct_node": node, "pct_vmid": vmid},
            ["@pct"],
        )

    def connect(self) -> None:
        # Only the node must answer: the container may not exist yet. One handshake per node:
        # the node host's connection when the inventory has it, else one of our own.
        self.shares_node = connect_shared(self.state, self.host, self.ssh)
        if not self.shares_node:
            self.ssh.connect()
            keep_alive(self.ssh.client, self.host.data)

    def disconnect(self) -> None:
        if self.shares_node:
            self.ssh.client = None  # the node host's: it is not ours to close
            return
        self.ssh.disconnect()

    def run_shell_command(
        self,
        command,
        print_output: bool = False,
        print_input: bool = False,
        **arguments,
    ):
        control = extract_control_arguments(arguments)  # type: ignore[arg-type]
        inner = make_unix_command_for_host(self.state, self.host, command, **arguments)
        node_command = StringCommand(
            *(QuoteString(part) for part in pct_exec_argv(self.vmid, "")[:-1]),
            QuoteString(inner),
        )
        status, output = self.ssh.run_shell_command(
            node_command, print_output=print_output, print_input=print_input, **control
        )
        if not status:
            if not self.state.is_executing and explain_pct_error(
                self.node, self.vmid, output.stderr
            ):
                # Preview (pyinfra without -y): the container is created or started later in this
                # run, so read it as empty: facts return their defaults and the operations show
                # what they will do, instead of the host failing before anything ran.
                return True, CommandOutput([])
            output = self._clarify(output)
        return status, output

    def _clarify(self, output: CommandOutput) -> CommandOutput:
        line = explain_pct_error(self.node, self.vmid, output.stderr)
        if line is None:
            return output
        return CommandOutput([*output.combined_lines, OutputLine("stderr", line)])

    def _exec_bytes(self, command: str, stdin: bytes | None = None) -> tuple[int, bytes, bytes]:
        """Run one command in the container over the node's SSH transport, bytes in and out."""
        assert self.ssh.client is not None, "not connected"
        channel = self.ssh.client.get_transport().open_session()  # type: ignore[union-attr]
        try:
            channel.exec_command(shlex.join(pct_exec_argv(self.vmid, command)))
            stderr: list[bytes] = []
            # Drain stderr on its own thread so a chatty command cannot stall on a full window.
            reader = threading.Thread(
                target=lambda: stderr.append(channel.makefile_stderr("rb").read()), daemon=True
            )
            reader.start()
            if stdin:
                channel.sendall(stdin)
            channel.shutdown_write()
            stdout = channel.makefile("rb").read()
            reader.join()
            return channel.recv_exit_status(), stdout, b"".join(stderr)
        finally:
            channel.close()

    def put_file(
        self,
        filename_or_io,
        remote_filename,
        remote_temp_filename=None,
        print_output: bool = False,
        print_input: bool = False,
        **arguments,
    ) -> bool:
        """Stream a file into the container byte for byte (no staging file on the node)."""
        with get_file_io(filename_or_io) as file_io:
            data = file_io.read()
        if isinstance(data, str):
            data = data.encode()
        code, _, stderr = self._exec_bytes(put_command(remote_filename), stdin=data)
        if code != 0:
            message = stderr.decode(errors="replace").strip()
            raise OSError(
                explain_pct_error(self.node, self.vmid, message)
                or f"upload to {remote_filename} in CT {self.vmid} on {self.node} failed: {message}"
            )
        return True

    def get_file(
        self,
        remote_filename,
        filename_or_io,
        remote_temp_filename=None,
        print_output: bool = False,
        print_input: bool = False,
        **arguments,
    ) -> bool:
        """Stream a file out of the container byte for byte."""
        code, data, stderr = self._exec_bytes(get_command(remote_filename))
        if code != 0:
            message = stderr.decode(errors="replace").strip()
            raise OSError(
                explain_pct_error(self.node, self.vmid, message)
                or f"download of {remote_filename} from CT {self.vmid} on {self.node} failed: "
                f"{message}"
            )
        with get_file_io(filename_or_io, "wb") as file_io:
            file_io.write(data)
        return True


def inherit_node_ssh_data(state: State, host: Host) -> None:
    """Give a container host the ssh_* data of its node host where it has none of its own.

    The inventory may describe the node once (port, key, known_hosts); the container reaches the
    node over the same SSH, so it reuses that data rather than repeating it.
    """
    node_name = host.host_data.get("pct_node")
    inventory = getattr(state, "inventory", None)
    if not node_name or inventory is None:
        return
    node_host = inventory.get_host(node_name, None) if hasattr(inventory, "get_host") else None
    if node_host is None or node_host is host:
        return
    for key in SSH_DATA_KEYS:
        if host.data.get(key) is None and node_host.data.get(key) is not None:
            host.host_data[key] = node_host.data.get(key)


__all__ = [
    "PCT_DATA_KEYS",
    "PctConnector",
    "parse_pct_name",
    "pct_exec_argv",
    "put_command",
    "get_command",
    "explain_pct_error",
]

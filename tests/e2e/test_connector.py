"""The @pct connector over real SSH (Debian's sshd on loopback) and the pct double."""

from __future__ import annotations

import hashlib
import io
import os

import pytest
from pyinfra.api import Config, Inventory, QuoteString, State, StringCommand
from pyinfra.api.connect import connect_all

from sim.fixtures import shared_sim_node  # noqa: F401
from tests.tricky_strings import TRICKY


@pytest.fixture(scope="module")
def node(shared_sim_node):  # noqa: F811  (pytest passes the fixture imported above)
    n = shared_sim_node
    create = n.run(
        [
            "pct",
            "create",
            "200",
            "local:vztmpl/debian-12-standard_12.7-1_amd64.tar.zst",
            "--hostname",
            "t",
            "--unprivileged",
            "0",
            "--rootfs",
            "local-lvm:4",
        ]
    )
    assert create.returncode == 0, create.stderr
    assert n.run(["pct", "start", "200"]).returncode == 0
    return n


def connect(node, *names):
    data = {
        "ssh_port": node.port,
        "ssh_user": "root",
        "ssh_key": node.key_path,
        "ssh_known_hosts_file": node.known_hosts_path,
    }
    inventory = Inventory(([(name, dict(data)) for name in names], {}))
    state = State(inventory, Config())
    connect_all(state)
    return state, [inventory.get_host(name) for name in names]


@pytest.fixture(scope="module")
def ct(node):
    state, (host,) = connect(node, "@pct/127.0.0.1/200")
    yield host
    host.disconnect()


def run(host, command, **kw):
    return host.run_shell_command(command, **kw)


@pytest.mark.parametrize("text", TRICKY)
def test_tricky_strings_round_trip(ct, text):
    ok, out = run(ct, StringCommand("printf", "%s", QuoteString(text)))
    assert ok
    assert out.stdout == text


def test_commands_run_inside_the_container_with_a_clean_environment(ct, node):
    ok, out = run(ct, StringCommand('hostname; echo "$PATH"; test -e /usr/sbin/pct || echo no-pct'))
    assert ok
    assert out.stdout_lines == [
        "t",
        "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
        "no-pct",
    ]


def test_exit_codes_stdout_and_stderr_pass_through(ct):
    ok, out = run(ct, StringCommand("echo out; echo err >&2; exit 3"))
    assert not ok
    assert out.stdout_lines == ["out"] and out.stderr_lines == ["err"]
    ok, _ = run(ct, StringCommand("exit 42"), _success_exit_codes=[42])
    assert ok
    ok, out = run(ct, StringCommand("no-such-binary-xyz"))
    assert not ok and "not found" in out.stderr


def test_control_arguments_work_as_with_ssh(ct):
    ok, out = run(ct, StringCommand('echo "$FOO"; pwd'), _env={"FOO": "a 'b' $c"}, _chdir="/etc")
    assert ok and out.stdout_lines == ["a 'b' $c", "/etc"]
    assert run(ct, StringCommand("id -u trainer >/dev/null 2>&1 || useradd -m -s /bin/sh trainer"))[
        0
    ]
    ok, out = run(ct, StringCommand("id -un"), _su_user="trainer")
    assert ok and out.stdout == "trainer"


def test_binary_files_up_and_down_byte_for_byte_without_staging_files(ct, node):
    data = bytes(range(256)) * 4096 + os.urandom(100_000)
    before_node_tmp = node.run(["ls", "-A", "/tmp"]).stdout
    assert ct.put_file(io.BytesIO(data), "/root/blob.bin")
    same = run(ct, StringCommand("sha256sum /root/blob.bin"))[1].stdout.split()[0]
    assert same == hashlib.sha256(data).hexdigest()
    back = io.BytesIO()
    assert ct.get_file("/root/blob.bin", back)
    assert back.getvalue() == data
    assert node.run(["ls", "-A", "/tmp"]).stdout == before_node_tmp
    ok, out = run(ct, StringCommand("ls -A /root"))
    assert "blob.bin.pvegpu-tmp" not in out.stdout


def test_upload_to_a_missing_directory_fails_loudly(ct):
    # pct push would exit 0 here; the connector must not.
    with pytest.raises(IOError, match="upload to /no/such/dir/x in CT 200 on 127.0.0.1 failed"):
        ct.put_file(io.BytesIO(b"x"), "/no/such/dir/x")
    with pytest.raises(IOError, match="download of /no/such/file from CT 200"):
        ct.get_file("/no/such/file", io.BytesIO())


def test_stopped_and_missing_containers_give_one_clear_line(node):
    # connect() must not need the container: the same run may create it.
    state, (missing,) = connect(node, "@pct/127.0.0.1/201")
    state.is_executing = True
    ok, out = run(missing, StringCommand("true"))
    assert not ok
    assert out.stderr_lines[-1].startswith("container 201 does not exist on node 127.0.0.1")

    assert node.run(["pct", "stop", "200"]).returncode == 0
    try:
        state, (stopped,) = connect(node, "@pct/127.0.0.1/200")
        state.is_executing = True
        ok, out = run(stopped, StringCommand("true"))
        assert not ok
        assert out.stderr_lines[-1] == (
            "container 200 on node 127.0.0.1 is not running: start it with `pct start 200` or run "
            "deploy.py"
        )
    finally:
        assert node.run(["pct", "start", "200"]).returncode == 0


def test_ssh_data_given_with_cli_data_applies_to_node_and_container(node):
    import subprocess
    import sys
    from pathlib import Path

    root = Path(__file__).resolve().parents[2]
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PVE_", "CT_ID"))}
    env["PVE_HOST"] = "127.0.0.1"  # port, key and known_hosts come only from --data
    p = subprocess.run(
        [
            sys.executable,
            "-m",
            "pyinfra",
            "inventory.py",
            "exec",
            "--data",
            f"ssh_port={node.port}",
            "--data",
            f"ssh_key={node.key_path}",
            "--data",
            f"ssh_known_hosts_file={node.known_hosts_path}",
            "--data",
            "ssh_strict_host_key_checking=yes",
            "-y",
            "--",
            "hostname",
        ],
        cwd=root,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
        stdin=subprocess.DEVNULL,
    )
    out = p.stdout + p.stderr
    assert p.returncode == 0, out
    assert "[127.0.0.1]          pve1" in out
    assert "[@pct/127.0.0.1/200] t" in out


def test_put_file_to_a_hostile_name_creates_exactly_that_file_and_runs_nothing(ct, node):
    assert run(
        ct, StringCommand("rm -rf /tmp/putbox /tmp/INJ /root/INJ /INJ && mkdir /tmp/putbox")
    )[0]
    # The row: the name's directory part ("/tmp/x$(touch /tmp") does not exist, so the
    # upload fails loudly, and the $(...) never runs.
    with pytest.raises(IOError, match="upload to"):
        ct.put_file(io.BytesIO(b"payload"), "/tmp/x$(touch /tmp/INJ)y")
    name = "x$(touch INJ)y`touch INJ`;touch INJ"
    assert ct.put_file(io.BytesIO(b"payload"), f"/tmp/putbox/{name}")
    found = node.ct_run(200, ["sh", "-c", "ls -A /tmp/putbox; ls /tmp/INJ /root/INJ /INJ 2>&1"])
    assert found.stdout.splitlines()[0] == name
    assert "INJ:" not in found.stdout.replace(name, "") and found.stdout.count("No such file") == 3
    assert node.ct_run(200, ["cat", f"/tmp/putbox/{name}"]).stdout == "payload"


@pytest.mark.parametrize("name", TRICKY)
def test_put_file_and_get_file_round_trip_unusual_names(ct, node, name):
    assert run(ct, StringCommand("rm -rf /tmp/putbox && mkdir /tmp/putbox"))[0]
    data = name.encode() + bytes(range(256))
    assert ct.put_file(io.BytesIO(data), f"/tmp/putbox/{name}")
    listing = node.ct_run(200, ["python3", "-c", "import os; print(os.listdir('/tmp/putbox'))"])
    assert listing.stdout.strip() == repr([name])
    back = io.BytesIO()
    assert ct.get_file(f"/tmp/putbox/{name}", back)
    assert back.getvalue() == data


def count_handshakes(monkeypatch) -> list:
    """Every SSH handshake pyinfra's connector starts (its SSHClient.connect), by address."""
    from pyinfra.connectors.sshuserclient import SSHClient

    handshakes: list = []
    real = SSHClient.connect

    def counting(self, hostname, *args, **kwargs):
        handshakes.append(hostname)
        return real(self, hostname, *args, **kwargs)

    monkeypatch.setattr(SSHClient, "connect", counting)
    return handshakes


@pytest.mark.parametrize("order", ["node first", "container first"])
def test_container_host_shares_its_node_hosts_ssh_connection(node, monkeypatch, order):
    handshakes = count_handshakes(monkeypatch)
    names = ["127.0.0.1", "@pct/127.0.0.1/200"]
    state, hosts = connect(node, *(names if order == "node first" else names[::-1]))
    node_host, ct_host = sorted(hosts, key=lambda h: h.name.startswith("@pct"))
    assert handshakes == ["127.0.0.1"]
    assert node_host.connected and ct_host.connected
    assert ct_host.connector.ssh.client is node_host.connector.client
    assert run(ct_host, StringCommand("hostname"))[1].stdout == "t"
    back = io.BytesIO()
    assert ct_host.put_file(io.BytesIO(b"shared"), "/tmp/shared") and ct_host.get_file(
        "/tmp/shared", back
    )
    assert back.getvalue() == b"shared"
    # the container host's disconnect leaves the node's connection (not its own) open
    ct_host.disconnect()
    assert node_host.connector.client.get_transport().is_active()
    assert run(node_host, StringCommand("hostname"))[1].stdout == "pve1"


def test_container_host_with_other_ssh_data_connects_on_its_own(node, monkeypatch, tmp_path):
    handshakes = count_handshakes(monkeypatch)
    copy = tmp_path / "known_hosts"
    with open(node.known_hosts_path) as f:
        copy.write_text(f.read())
    data = {
        "ssh_port": node.port,
        "ssh_user": "root",
        "ssh_key": node.key_path,
        "ssh_known_hosts_file": node.known_hosts_path,
    }
    inventory = Inventory(
        (
            [
                ("127.0.0.1", dict(data)),
                ("@pct/127.0.0.1/200", {**data, "ssh_known_hosts_file": str(copy)}),
            ],
            {},
        )
    )
    state = State(inventory, Config())
    connect_all(state)
    ct_host = inventory.get_host("@pct/127.0.0.1/200")
    assert handshakes == ["127.0.0.1", "127.0.0.1"]
    assert ct_host.connector.ssh.client is not inventory.get_host("127.0.0.1").connector.client
    assert run(ct_host, StringCommand("hostname"))[1].stdout == "t"


def test_container_host_alone_makes_its_own_one_connection(node, monkeypatch):
    handshakes = count_handshakes(monkeypatch)
    state, (ct_host,) = connect(node, "@pct/127.0.0.1/200")
    assert handshakes == ["127.0.0.1"] and not ct_host.connector.shares_node
    assert run(ct_host, StringCommand("hostname"))[1].stdout == "t"


def test_at_most_six_container_hosts_share_one_node_connection(node, monkeypatch):
    # sshd's MaxSessions (10 by default, as the sim's) caps channels per connection: the node
    # keeps up to 3 open itself, so a seventh container host connects on its own.
    from pvegpu.connectors.shared_ssh import MAX_SHARERS

    handshakes = count_handshakes(monkeypatch)
    names = ["127.0.0.1", *(f"@pct/127.0.0.1/{vmid}" for vmid in range(300, 300 + MAX_SHARERS + 1))]
    state, hosts = connect(node, *names)
    assert all(h.connected for h in hosts)
    assert handshakes == ["127.0.0.1", "127.0.0.1"]
    assert [h.connector.shares_node for h in hosts[1:]].count(True) == MAX_SHARERS == 6


def test_a_node_that_refuses_fails_both_hosts_with_one_handshake(node, monkeypatch, tmp_path):
    # The container host fails with the node's own error (a wrong pinned key here), not a retry.
    handshakes = count_handshakes(monkeypatch)
    wrong = tmp_path / "known_hosts"
    wrong.write_text("")
    data = {
        "ssh_port": node.port,
        "ssh_user": "root",
        "ssh_key": node.key_path,
        "ssh_known_hosts_file": str(wrong),
        "ssh_strict_host_key_checking": "yes",
    }
    inventory = Inventory(([("127.0.0.1", dict(data)), ("@pct/127.0.0.1/200", dict(data))], {}))
    State(inventory, Config())  # binds the inventory's hosts to a state: connect() needs one
    errors = []
    for host in inventory:
        host.connect(show_errors=False, raise_exceptions=False)
        errors.append(host.connected)
    assert errors == [False, False]
    assert handshakes == ["127.0.0.1"]

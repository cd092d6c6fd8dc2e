"""The simulated Proxmox node: lifecycle, ssh, pct grammar and exit codes, passthrough, NVIDIA
doubles."""

import os
import subprocess
import time

import pytest

from sim.node import SimNode, _mntns_holders

TEMPLATE = "local:vztmpl/debian-12-standard_12.7-1_amd64.tar.zst"


def pct(node, *args, input=None):
    return node.run(["pct", *args], input=input)


def make_ct(node, vmid, *extra, start=True):
    r = pct(
        node,
        "create",
        str(vmid),
        TEMPLATE,
        "--hostname",
        f"ct{vmid}",
        "--unprivileged",
        "0",
        "--rootfs",
        "local-lvm:8",
        *extra,
    )
    assert r.returncode == 0, r.stderr
    if start:
        r = pct(node, "start", str(vmid))
        assert r.returncode == 0, r.stderr


def _exited(pid) -> bool:
    """The process has exited. The node's init was unshare's child; once unshare is gone, the
    host's init reaps it, so for a moment it may still show as a zombie (state Z)."""
    for _ in range(200):  # bounded wait for the reaper, not a timing assertion
        try:
            with open(f"/proc/{pid}/stat") as f:
                if f.read().rsplit(")", 1)[1].split()[0] in ("Z", "X"):
                    return True
        except (OSError, IndexError):
            return True
        time.sleep(0.05)
    return False


def _cmdline(pid) -> str:
    """A process's command line, or "" once it has exited (the list of holders is a snapshot)."""
    try:
        with open(f"/proc/{pid}/cmdline") as f:
            return f.read()
    except OSError:
        return ""


def _started_s(pid: int) -> float | None:
    """When ``pid`` started, in seconds since boot (None once it has exited)."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return int(f.read().rsplit(")", 1)[1].split()[19]) / os.sysconf("SC_CLK_TCK")
    except (OSError, IndexError, ValueError):
        return None


def _uptime_s() -> float:
    with open("/proc/uptime") as f:
        return float(f.read().split()[0])


def _gone(node_pid, mntns, state, stopped_at: float):
    """Nothing of the node is left. A holder of ``mntns`` started after ``stopped_at`` (uptime
    when the node was told to stop) is another test's: the kernel reuses a freed namespace's
    inode number, and other xdist workers create namespaces all the time."""
    assert _exited(node_pid)
    ours = [p for p in _mntns_holders(mntns) if (_started_s(p) or float("inf")) < stopped_at]
    assert ours == []
    assert not state.exists()
    with open("/proc/self/mountinfo") as f:
        assert str(state) not in f.read()


# ----------------------------------------------------------------------------- lifecycle


def test_start_stop_leaves_nothing_behind(tmp_path):
    node = SimNode(tmp_path / "n")
    node.start()
    pid, mntns, port = node.pid, node._mntns, node.port
    sshd = [p for p in _mntns_holders(mntns) if "sshd" in _cmdline(p)]
    assert sshd
    stopped_at = _uptime_s()
    node.stop()
    node.stop()  # idempotent
    _gone(pid, mntns, tmp_path / "n", stopped_at)
    for p in sshd:
        assert _exited(p)
    with pytest.raises(OSError):
        import socket

        socket.create_connection(("127.0.0.1", port), timeout=1).close()


def test_body_raising_still_cleans_up(tmp_path):
    with pytest.raises(RuntimeError, match="boom"), SimNode(tmp_path / "n") as node:
        pid, mntns = node.pid, node._mntns
        node.run(
            ["sh", "-c", "sleep 300 >/dev/null 2>&1 &"]
        )  # a stray process inside the node dies with it
        stopped_at = _uptime_s()
        raise RuntimeError("boom")
    _gone(pid, mntns, tmp_path / "n", stopped_at)


def test_ssh_login_with_the_throwaway_key_only(shared_sim_node, tmp_path):
    node = shared_sim_node
    r = subprocess.run(
        node.ssh_argv("hostname; id -u; pveversion"), capture_output=True, text=True, timeout=30
    )
    assert r.returncode == 0, r.stderr
    assert r.stdout.splitlines()[:2] == ["pve1", "0"]
    assert r.stdout.splitlines()[2].startswith("pve-manager/8.4.1/")
    env = node.inventory_env()
    assert (
        env["PVE_HOST"] == "127.0.0.1"
        and env["PVE_SSH_PORT"] == str(node.port)
        and env["CT_ID"] == "200"
    )
    subprocess.run(
        ["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(tmp_path / "other")], check=True
    )
    argv = node.ssh_argv("true")
    argv[argv.index("-i") + 1] = str(tmp_path / "other")
    assert subprocess.run(argv, capture_output=True, timeout=30).returncode == 255


def test_writes_stay_in_the_overlay(shared_sim_node):
    node = shared_sim_node
    node.run(
        ["sh", "-c", "echo x > /etc/pve-sim-canary && echo y > /usr/bin/pve-sim-canary"], check=True
    )
    assert not os.path.exists("/etc/pve-sim-canary") and not os.path.exists(
        "/usr/bin/pve-sim-canary"
    )
    assert (node.upper / "etc/pve-sim-canary").read_text() == "x\n"
    node.run(["rm", "/etc/pve-sim-canary", "/usr/bin/pve-sim-canary"], check=True)


def test_the_tank_pool_is_a_filesystem_of_its_own(shared_sim_node):
    """A ZFS pool mounts at /tank with its own device, as the node's root filesystem has another
    (what the data dir's preflight tells apart); its files count in the node's tree digest."""
    node = shared_sim_node
    devices = node.run(["stat", "-c", "%d", "/", "/tank"], check=True).stdout.split()
    assert devices[0] != devices[1]
    node.run(["sh", "-c", "mkdir -p /tank/x && echo y > /tank/x/f"], check=True)
    try:
        assert "node/tank/x/f" in node.tree_digest()
        assert not (node.upper / "tank/x").exists()  # not on the node's root filesystem
    finally:
        node.run(["rm", "-r", "/tank/x"], check=True)


def test_a_node_without_the_pool_has_no_tank(sim_node):
    node = sim_node(pools=())
    assert node.run(["test", "-e", "/tank"]).returncode == 1


# ----------------------------------------------------------------------------- pct grammar


@pytest.fixture(scope="module")
def ct200(shared_sim_node):
    node = shared_sim_node
    node.run(["mkdir", "-p", "/tank/dflash"], check=True)
    node.run(["sh", "-c", "echo keep > /tank/dflash/ckpt"], check=True)
    make_ct(node, 200, "--mp0", "/tank/dflash,mp=/data,backup=0")
    return node


def test_exec_grammar_and_exit_codes(ct200):
    node = ct200
    r = pct(node, "exec", "200", "--", "sh", "-c", "echo out; echo err >&2; exit 3")
    assert (r.returncode, r.stdout, r.stderr) == (3, "out\n", "err\n")
    r = pct(node, "exec", "200", "ls", "-la")  # no `--`: pct parses -la as its own option
    assert r.returncode == 255
    assert "Unknown option: la" in r.stderr and "400 unable to parse option" in r.stderr
    assert "pct exec <vmid> [<extra-args>] [OPTIONS]" in r.stderr
    assert pct(node, "exec", "200", "true").returncode == 0
    r = pct(node, "exec", "200", "--", "no-such-binary")
    assert r.returncode == 127 and 'Failed to exec "no-such-binary"' in r.stderr
    assert pct(node, "exec", "200", "--", "sh", "-c", "kill -9 $$").returncode == 137
    r = pct(node, "exec", "200")
    assert r.returncode == 255 and r.stderr.startswith("missing command")
    r = pct(node, "exec", "999", "--", "true")
    assert (r.returncode, r.stderr) == (
        255,
        "Configuration file 'nodes/pve1/lxc/999.conf' does not exist\n",
    )
    r = pct(node, "exec", "200", "--", "cat", input="via stdin\n")
    assert r.stdout == "via stdin\n"
    # no shell: metacharacters reach the command verbatim
    assert pct(node, "exec", "200", "--", "echo", "$HOME;", "|").stdout == "$HOME; |\n"


def test_exec_environment(ct200):
    node = ct200
    env = {"PVE_SIM_PROBE": "leaks"}
    r = node.run(
        ["pct", "exec", "200", "--", "sh", "-c", "echo $PATH $PVE_SIM_PROBE $container"], env=env
    )
    assert r.stdout == "/sbin:/bin:/usr/sbin:/usr/bin leaks lxc\n"
    r = node.run(
        ["pct", "exec", "200", "--keep-env", "0", "--", "sh", "-c", "echo $PATH $PVE_SIM_PROBE."],
        env=env,
    )
    assert r.stdout == "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin .\n"
    r = pct(
        node,
        "exec",
        "200",
        "--",
        "sh",
        "-c",
        "hostname; command -v uv nvidia-smi; test -e /root/.pyenv; echo $?",
    )
    assert r.stdout == "ct200\n1\n"


def test_name_lookups_stay_on_loopback(ct200):
    """The node's resolver is loopback and the container's resolv.conf is the node's, as
    pve-container's set_dns writes it: no lookup by the code under test leaves this machine."""
    node = ct200
    assert node.run(["cat", "/etc/resolv.conf"]).stdout == "nameserver 127.0.0.1\n"
    r = pct(node, "exec", "200", "--", "cat", "/etc/resolv.conf")
    assert r.returncode == 0 and r.stdout == "nameserver 127.0.0.1\n", (r.stdout, r.stderr)


def test_push_pull_byte_for_byte(ct200):
    node = ct200
    data = bytes(range(256)) * 64
    node.run(["sh", "-c", "cat > /tmp/blob"], input=data, check=True)
    r = pct(node, "push", "200", "/tmp/blob", "/root/blob", "--perms", "600")
    assert (r.returncode, r.stderr) == (0, "")
    assert node.ct_run(200, ["stat", "-c", "%a", "/root/blob"]).stdout == "600\n"
    assert node.ct_run(200, ["cat", "/root/blob"], input=b"").stdout == data
    assert pct(node, "pull", "200", "/root/blob", "/tmp/blob2").returncode == 0
    assert node.run(["cmp", "/tmp/blob", "/tmp/blob2"]).returncode == 0
    # failures inside the container are reported but pct exits 0, like the real one
    r = pct(node, "push", "200", "/tmp/blob", "/no/such/dir/blob")
    assert (
        r.returncode == 0
        and "failed to create file: /no/such/dir/blob: No such file or directory" in r.stderr
    )
    r = pct(node, "pull", "200", "/no/such/file", "/tmp/x")
    assert r.returncode == 0 and "failed to open /no/such/file" in r.stderr


@pytest.fixture(scope="module")
def exec_ct200(tmp_path_factory):
    """CT 200 as ct200 makes it, on a node in the opt-in exec model (no init in containers)."""
    with SimNode(tmp_path_factory.mktemp("pve-sim") / "node", ct_init="exec") as node:
        node.run(["mkdir", "-p", "/tank/dflash"], check=True)
        node.run(["sh", "-c", "echo keep > /tank/dflash/ckpt"], check=True)
        make_ct(node, 200, "--mp0", "/tank/dflash,mp=/data,backup=0")
        yield node


@pytest.mark.parametrize("semantics", ["grammar", "environment", "push_pull"])
def test_exec_model_keeps_pct_semantics(exec_ct200, semantics):
    """The exec model keeps pct's semantics too (the tests above, against the default)."""
    {
        "grammar": test_exec_grammar_and_exit_codes,
        "environment": test_exec_environment,
        "push_pull": test_push_pull_byte_for_byte,
    }[semantics](exec_ct200)


def test_exec_model_has_no_init_so_no_systemctl_works(exec_ct200):
    """No systemctl double in any container: the tree's own fails as in a container whose PID 1
    is not systemd."""
    r = exec_ct200.ct_run(200, ["systemctl", "is-active", "dflash-train.service"])
    assert r.returncode != 0 and "not been booted with systemd" in r.stdout + r.stderr, r


def test_status_config_set(ct200):
    node = ct200
    assert pct(node, "status", "200").stdout == "status: running\n"
    r = pct(node, "status", "abc")
    assert r.returncode == 255 and r.stderr.startswith("400 Parameter verification failed.\nvmid: ")
    cfg = pct(node, "config", "200").stdout
    assert "hostname: ct200\n" in cfg and "mp0: /tank/dflash,mp=/data,backup=0\n" in cfg
    assert cfg.splitlines() == sorted(cfg.splitlines())
    r = pct(node, "set", "200", "--lxc.cgroup2.devices.allow", "c 195:* rwm")
    assert r.returncode == 255 and "Unknown option: lxc.cgroup2.devices.allow" in r.stderr
    r = pct(node, "set", "200", "--dev9", "/dev/nvidia99")
    assert r.returncode == 255 and "/dev/nvidia99" in r.stderr
    assert pct(node, "set", "200", "--cores", "4", "--onboot", "1").returncode == 0
    assert "cores: 4\n" in pct(node, "config", "200", "--current").stdout
    # a device on a running CT is pending until the next start
    assert pct(node, "set", "200", "--dev5", "/dev/nvidia5").returncode == 0
    assert "dev5: /dev/nvidia5" in pct(node, "config", "200").stdout
    assert "dev5" not in pct(node, "config", "200", "--current").stdout
    assert pct(node, "set", "200", "--delete", "dev5").returncode == 0
    assert "dev5" not in pct(node, "config", "200").stdout
    assert pct(node, "start", "200").stderr == "CT 200 already running\n"
    assert pct(node, "start", "200").returncode == 255


def test_stop_start_destroy_and_bind_mounts(ct200):
    node = ct200
    assert node.ct_run(200, ["cat", "/data/ckpt"]).stdout == "keep\n"
    make_ct(node, 201, "--mp0", "/tank/dflash,mp=/data")
    assert pct(node, "stop", "201").returncode == 0
    r = pct(node, "stop", "201")
    assert (r.returncode, r.stderr) == (255, "CT 201 not running\n")
    r = pct(node, "exec", "201", "--", "true")
    assert (r.returncode, r.stderr) == (255, "container '201' not running!\n")
    r = pct(node, "push", "201", "/etc/hostname", "/root/x")
    assert (r.returncode, r.stderr) == (255, "can only push files to a running CT\n")
    r = pct(node, "snapshot", "201", "before")
    assert (r.returncode, r.stderr) == (255, "snapshot feature is not available\n")
    assert pct(node, "set", "201", "--protection", "1").returncode == 0
    r = pct(node, "destroy", "201")
    assert r.returncode == 255 and "protection mode enabled" in r.stderr
    assert pct(node, "set", "201", "--protection", "0").returncode == 0
    assert pct(node, "start", "201").returncode == 0
    r = pct(node, "destroy", "201")
    assert r.returncode == 255 and "running" in r.stderr
    assert pct(node, "stop", "201").returncode == 0
    assert pct(node, "destroy", "201", "--purge").returncode == 0
    assert pct(node, "status", "201").returncode == 255
    assert node.run(["cat", "/tank/dflash/ckpt"]).stdout == "keep\n"  # never touched
    assert not node.ct_upper(201).exists()


def test_create_errors(ct200):
    node = ct200
    r = pct(node, "create", "200", TEMPLATE)
    assert (r.returncode, r.stderr) == (255, "CT 200 already exists on node 'pve1'\n")
    r = pct(node, "create", "202", "local:vztmpl/nope.tar.zst")
    assert r.returncode == 255 and "does not exist" in r.stderr
    r = pct(node, "create", "202")
    assert r.returncode == 255 and "400 not enough arguments" in r.stderr


def test_pct_log(ct200):
    node = ct200
    node.clear_pct_log()
    pct(node, "status", "200")
    node.ct_run(200, ["true"])
    node.run(["pct", "status", "200"], env={"PVE_SIM_NOLOG": "1"})
    calls = node.pct_calls()
    assert [c["argv"] for c in calls] == [["status", "200"]] and calls[0]["exit"] == 0


def test_read_only_commands_change_nothing(ct200):
    node = ct200
    before = node.tree_digest()
    for args in (
        ["config", "200"],
        ["status", "200"],
        ["list"],
        ["exec", "200", "--", "cat", "/etc/hostname"],
        ["pull", "200", "/etc/hostname", "/tmp/h"],
    ):
        assert pct(node, *args).returncode == 0
    node.run(["nvidia-smi"], check=True)
    node.ct_run(200, ["ls", "/data"], check=True)
    assert node.tree_digest() == before
    node.ct_run(200, ["touch", "/root/changed"], check=True)
    after = node.tree_digest()
    assert set(after) - set(before) == {"ct/200/root/changed"}


# ----------------------------------------------------------------------------- devices


def test_container_sees_only_passed_devices(sim_node):
    node = sim_node(gpus=4)
    make_ct(node, 200, start=False)
    for i, dev in enumerate(("/dev/nvidia1", "/dev/nvidiactl", "/dev/nvidia-uvm")):
        assert pct(node, "set", "200", f"--dev{i}", dev).returncode == 0
    assert pct(node, "start", "200").returncode == 0
    ls = node.ct_run(200, ["sh", "-c", "ls /dev | grep nvidia"]).stdout.split()
    assert ls == ["nvidia-uvm", "nvidia1", "nvidiactl"]
    # raw lxc mode: a bind entry whose major the cgroup rules do not allow stays hidden
    node.run(
        [
            "sh",
            "-c",
            "cat >> /etc/pve/lxc/200.conf <<'EOF'\n"
            "lxc.cgroup2.devices.allow: c 195:* rwm\n"
            "lxc.cgroup2.devices.allow: c 507:* rwm\n"
            "lxc.mount.entry: /dev/nvidia2 dev/nvidia2 none bind,optional,create=file\n"
            "lxc.mount.entry: /dev/nvidia-uvm-tools dev/nvidia-uvm-tools none "
            "bind,optional,create=file\nEOF",
        ],
        check=True,
    )
    assert pct(node, "stop", "200").returncode == 0 and pct(node, "start", "200").returncode == 0
    ls = node.ct_run(200, ["sh", "-c", "ls /dev | grep nvidia"]).stdout.split()
    assert ls == ["nvidia-uvm", "nvidia1", "nvidia2", "nvidiactl"]
    cfg = pct(node, "config", "200").stdout.splitlines()
    assert cfg[-1].startswith("lxc.mount.entry: /dev/nvidia-uvm-tools")
    smi = node.ct_run(200, ["nvidia-smi", "-L"])
    assert smi.returncode == 127  # no NVIDIA userspace in a fresh container


def test_missing_uvm_node_blocks_start_until_modprobe(sim_node):
    node = sim_node(uvm_nodes_at_boot=False)
    assert node.run(["test", "-e", "/dev/nvidia-uvm"]).returncode == 1
    make_ct(node, 200, start=False)
    r = pct(node, "set", "200", "--dev0", "/dev/nvidia-uvm")
    assert r.returncode == 255
    node.run(["nvidia-modprobe", "-u", "-c", "0"], check=True)
    assert node.run(["stat", "-c", "%t:%T", "/dev/nvidia-uvm"]).stdout == "1fc:0\n"  # 508:0
    assert pct(node, "set", "200", "--dev0", "/dev/nvidia-uvm").returncode == 0
    node.run(["rm", "/dev/nvidia-uvm"], check=True)
    r = pct(node, "start", "200")
    assert r.returncode == 255 and "startup for container '200' failed" in r.stderr


def test_configure_updates_live_views(sim_node):
    node = sim_node(gpus=2)
    make_ct(
        node, 200, "--dev0", "/dev/nvidia0", "--dev1", "/dev/nvidiactl", "--dev2", "/dev/nvidia-uvm"
    )
    node.configure(uvm_major=509, gpus=3)
    assert "509 nvidia-uvm\n" in node.read("/proc/devices")
    assert "509 nvidia-uvm\n" in node.ct_run(200, ["cat", "/proc/devices"]).stdout
    assert node.run(["stat", "-c", "%t", "/dev/nvidia-uvm"]).stdout == "1fd\n"
    assert node.run(["test", "-e", "/dev/nvidia2"]).returncode == 0
    node.configure(driver_version="580.105.08")
    assert (
        "Kernel Module  580.105.08 "
        in node.ct_run(200, ["cat", "/proc/driver/nvidia/version"]).stdout
    )
    assert node.run(["ls", "/root"]).stdout == "NVIDIA-Linux-x86_64-580.105.08.run\n"
    node.configure(driver_loaded=False)
    r = node.run(["nvidia-smi"])
    assert r.returncode == 9 and "couldn't communicate with the NVIDIA driver" in r.stdout
    assert "nvidia" not in node.read("/proc/devices")


# ----------------------------------------------------------------------------- NVIDIA doubles


def test_nvidia_smi_formats_and_processes(shared_sim_node):
    node = shared_sim_node
    r = node.run(
        [
            "nvidia-smi",
            "--query-gpu=index,name,memory.total,driver_version,compute_cap,count",
            "--format=csv",
        ]
    )
    lines = r.stdout.splitlines()
    assert lines[0] == "index, name, memory.total [MiB], driver_version, compute_cap, count"
    assert lines[1] == "0, NVIDIA H200, 143771 MiB, 580.95.05, 9.0, 8" and len(lines) == 9
    r = node.run(
        ["nvidia-smi", "--query-gpu=index,memory.used", "--format=csv,noheader,nounits", "-i", "3"]
    )
    assert r.stdout == "3, 0\n"
    r = node.run(["nvidia-smi", "--query-gpu=bogus", "--format=csv"])
    assert r.returncode == 2 and 'Field "bogus" is not a valid field to query.' in r.stdout
    assert node.run(["nvidia-smi", "-L"]).stdout.startswith("GPU 0: NVIDIA H200 (UUID: GPU-")
    pid = node.spawn_gpu_process(3, ["/root/venv/bin/python", "-m", "train", "--gpus", "3"], 1234)
    assert (
        node.read(f"/proc/{pid}/cmdline")
        == "\0".join(["/root/venv/bin/python", "-m", "train", "--gpus", "3"]) + "\0"
    )
    r = node.run(
        [
            "nvidia-smi",
            "--query-compute-apps=pid,process_name,used_memory,gpu_bus_id",
            "--format=csv,noheader",
        ]
    )
    assert r.stdout == f"{pid}, /root/venv/bin/python, 1234 MiB, 00000000:5D:00.0\n"
    r = node.run(
        ["nvidia-smi", "--query-gpu=memory.used", "--format=csv,noheader,nounits", "-i", "3"]
    )
    assert r.stdout == "1234\n"
    node.kill_gpu_process(pid)
    assert (
        node.run(["nvidia-smi", "--query-compute-apps=pid", "--format=csv,noheader"]).stdout == ""
    )


def test_driver_userspace_in_container(sim_node):
    node = sim_node(gpus=2)
    make_ct(node, 200, "--dev0", "/dev/nvidia1", "--dev1", "/dev/nvidiactl")
    run = "/root/NVIDIA-Linux-x86_64-580.95.05.run"
    assert pct(node, "push", "200", run, run).returncode == 0
    r = node.ct_run(200, ["sh", run, "--silent"])
    assert r.returncode == 1 and "kernel module" in r.stderr
    assert node.ct_run(200, ["sh", run, "--silent", "--no-kernel-modules"]).returncode == 0
    r = node.ct_run(
        200, ["nvidia-smi", "--query-gpu=index,pci.bus_id,driver_version", "--format=csv,noheader"]
    )
    assert r.stdout == "1, 00000000:2A:00.0, 580.95.05\n"  # only the passed GPU
    assert (
        node.ct_run(200, ["readlink", "/usr/lib/x86_64-linux-gnu/libcuda.so.1"]).stdout
        == "libcuda.so.580.95.05\n"
    )
    node.configure(driver_version="580.105.08")
    r = node.ct_run(200, ["nvidia-smi"])
    assert r.returncode == 18 and "Driver/library version mismatch" in r.stdout
    assert node.run(["nvidia-smi", "-L"]).returncode == 0  # node userspace follows its driver


def test_devn_follows_the_nodes_pve_container(sim_node):
    """devN came with pve-container 5.0.7 (PVE 8.1 ships 5.0.8); before, Getopt::Long does not
    know `--dev0` and pve-common's get_options fails with `400 unable to parse option`."""
    node = sim_node(pve_version="8.0.4", gpus=1)
    assert "pve-container: 5.0.4" in node.run(["pveversion", "-v"]).stdout.splitlines()
    make_ct(node, 200, start=False)
    r = pct(node, "set", "200", "--dev0", "/dev/nvidia0")
    assert r.returncode == 255
    assert r.stderr.startswith("Unknown option: dev0\n400 unable to parse option\npct set <vmid>")
    assert "dev0" not in node.read("/etc/pve/lxc/200.conf")
    node.configure(pve_version="8.1.4", pve_container="5.0.8")
    assert node.run(["pveversion"]).stdout.startswith("pve-manager/8.1.4/")
    assert "pve-container: 5.0.8" in node.run(["pveversion", "-v"]).stdout.splitlines()
    assert pct(node, "set", "200", "--dev0", "/dev/nvidia0").returncode == 0
    assert "dev0: /dev/nvidia0" in node.read("/etc/pve/lxc/200.conf").splitlines()
    node.configure(pve_container="5.0.6")
    assert "Unknown option: dev1" in pct(node, "set", "200", "--dev1", "/dev/nvidia0").stderr


def test_systemctl_double_on_the_node_records_calls(shared_sim_node):
    """The node (no systemd as its PID 1 here) has the systemctl double; containers have none."""
    node = shared_sim_node
    unit = (
        "[Unit]\nDescription=t\n[Service]\nExecStart=/bin/true\n[Install]\n"
        "WantedBy=multi-user.target\n"
    )
    node.run(["sh", "-c", "cat > /etc/systemd/system/train.service"], input=unit, check=True)
    r = node.run(["systemctl", "is-active", "train"])
    assert (r.returncode, r.stdout) == (3, "inactive\n")
    assert node.run(["systemctl", "enable", "--now", "train.service"]).returncode == 0
    r = node.run(["systemctl", "show", "-p", "ActiveState,UnitFileState", "train"])
    assert r.stdout == "ActiveState=active\nUnitFileState=enabled\n"
    r = node.run(["systemctl", "start", "nope"])
    assert (r.returncode, r.stderr) == (
        5,
        "Failed to start nope.service: Unit nope.service not found.\n",
    )
    calls = [c["argv"] for c in node.systemctl_calls()]
    assert calls[-3:] == [
        ["enable", "--now", "train.service"],
        ["show", "-p", "ActiveState,UnitFileState", "train"],
        ["start", "nope"],
    ]

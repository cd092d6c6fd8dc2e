"""nvidia-modprobe double: the grammar of NVIDIA's nvidia-modprobe.c (main()): `-c N` makes
/dev/nvidiaN (255: nvidiactl); with `-u` every `-c N` is a uvm base minor instead; `-u` alone makes
no device file."""


def numbers(node, path):
    r = node.run(["stat", "-c", "%t:%T", path])
    return None if r.returncode else tuple(int(x, 16) for x in r.stdout.strip().split(":"))


def test_uvm_and_gpu_minors_follow_the_real_grammar(sim_node):
    node = sim_node(uvm_nodes_at_boot=False, uvm_major=509)
    assert node.run(["nvidia-modprobe", "-u"]).returncode == 0
    assert numbers(node, "/dev/nvidia-uvm") is None  # loads the module, creates nothing

    node.run(["rm", "/dev/nvidia3", "/dev/nvidiactl"], check=True)
    assert node.run(["nvidia-modprobe", "-u", "-c", "0"]).returncode == 0
    assert numbers(node, "/dev/nvidia-uvm") == (509, 0)
    assert numbers(node, "/dev/nvidia-uvm-tools") == (509, 1)
    assert numbers(node, "/dev/nvidia3") is None and numbers(node, "/dev/nvidiactl") is None

    assert node.run(["nvidia-modprobe", "-c", "3", "-c", "255"]).returncode == 0
    assert numbers(node, "/dev/nvidia3") == (195, 3)
    assert numbers(node, "/dev/nvidiactl") == (195, 255)
    # nvidia_mknod() makes a node for any minor 0..254, a GPU behind it or not; C strtol base 0
    assert node.run(["nvidia-modprobe", "-c", "0x8", "-c", "011"]).returncode == 0
    assert numbers(node, "/dev/nvidia8") == (195, 8) and numbers(node, "/dev/nvidia9") == (195, 9)
    assert node.run(["readlink", "/dev/char/195:8"]).stdout == "../nvidia8\n"
    # no name outside 0..255: the first failing step ends the run (-m is not reached)
    node.run(["rm", "-f", "/dev/nvidia-modeset"], check=True)
    assert node.run(["nvidia-modprobe", "-c", "256", "-m"]).returncode == 1
    assert numbers(node, "/dev/nvidia-modeset") is None
    r = node.run(["nvidia-modprobe", "-c", "x"])
    assert r.returncode == 1 and r.stdout == ""
    assert '"x" is not a valid argument for option "-c".' in r.stderr
    assert "ERROR: Invalid commandline, please run `" in r.stderr
    r = node.run(["nvidia-modprobe", "--bogus"])
    assert r.returncode == 1 and 'unrecognized option: "--bogus"' in r.stderr


def test_node_has_what_a_driver_install_and_pve_bring(shared_sim_node):
    node = shared_sim_node
    assert node.run(["test", "-x", "/usr/bin/nvidia-persistenced"]).returncode == 0
    assert "WantedBy=multi-user.target" in node.read("/lib/systemd/system/pve-guests.service")

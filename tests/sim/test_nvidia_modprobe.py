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
    assert node.run(["nvidia-modprobe", "-c", "8"]).returncode == 1  # no such GPU (8 GPUs: 0-7)


def test_node_has_what_a_driver_install_and_pve_bring(shared_sim_node):
    node = shared_sim_node
    assert node.run(["test", "-x", "/usr/bin/nvidia-persistenced"]).returncode == 0
    assert "WantedBy=multi-user.target" in node.read("/lib/systemd/system/pve-guests.service")

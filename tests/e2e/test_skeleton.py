"""The walking skeleton: one full deploy through every stage, then a zero-change second run."""

from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def running_unit(site) -> dict:
    out = site.ct(
        "systemctl", "show", "-p", "ActiveState,MainPID,InvocationID", "dflash-train.service"
    ).stdout
    unit = dict(line.split("=", 1) for line in out.splitlines())
    assert unit["ActiveState"] == "active", unit
    return unit


def test_full_deploy_from_no_container_then_zero_changes(site):
    assert site.node.run(["test", "-e", "/etc/pve/lxc/200.conf"]).returncode != 0
    first = site.deploy()
    assert first.rc == 0, first.output[-4000:]
    assert first.changed > 0

    status = site.node.run(["pct", "status", "200"])
    assert status.stdout.strip() == "status: running"
    conf = site.node.read("/etc/pve/lxc/200.conf")
    assert "dev0: /dev/nvidia0" in conf and "/dev/nvidia-uvm" in conf
    torch = site.ct("/root/venv/bin/python", "-c", "import torch; print(torch.__version__)")
    assert torch.stdout.strip() == "2.11.0+cu130"
    cuda = site.ct(
        "/root/venv/bin/python",
        "-c",
        "import torch; print(torch.cuda.is_available(), torch.cuda.device_count())",
    )
    assert cuda.stdout.strip() == "True 8"
    assert site.ct("systemctl", "is-active", "dflash-train.service").stdout.strip() == "active"
    # The simulator's default: CT 200 boots real systemd, whose unit runs train.py with the python
    # of the pinned build /root/venv points at.
    comm = site.node.run(["pct", "exec", "200", "--", "cat", "/proc/1/comm"])
    assert comm.stdout == "systemd\n", comm
    unit = running_unit(site)
    build = site.ct("readlink", "-f", "/root/venv").stdout.strip()
    assert build.startswith("/root/venvs/torch-2.11.0-cu130"), build
    argv = site.ct("cat", f"/proc/{unit['MainPID']}/cmdline").stdout.split("\0")
    assert argv[:2] == [f"{build}/bin/python", "/data/dflash/train.py"], argv

    second = site.deploy()
    assert second.rc == 0, second.output[-4000:]
    doc = second.json
    assert second.changed == 0, doc
    assert running_unit(site) == unit  # the same run: same MainPID and InvocationID
    assert doc["results"]["totals"]["error"] == 0


def test_preview_without_yes_shows_container_will_be_created(site):
    before = site.node.tree_digest()
    run = site.pyinfra("deploy.py", yes=False, as_json=False)
    # Without -y pyinfra previews, then asks; with no stdin it stops there (and writes a debug log).
    (ROOT / "pyinfra-debug.log").unlink(missing_ok=True)
    assert "Detected changes" in run.output
    create = next(ln for ln in run.output.splitlines() if "Create CT 200 when missing" in ln)
    assert "1 (127.0.0.1)" in create
    assert "could not load fact" not in run.output
    assert site.node.tree_digest() == before

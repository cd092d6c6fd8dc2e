"""Progress lines of the NVIDIA userspace installer, read while it runs: the installer double
holds its install while a hold file exists in the container (sim/doubles/nvidia-installer.run),
so "while it runs" is checked without timing thresholds. The venv build's and the unit stop's are
in tests/e2e/test_python_env.py and tests/e2e/test_training_systemd.py."""

from __future__ import annotations

HOLD = "/var/lib/pve-sim/installer-hold"


def test_the_userspace_installer_says_how_long_it_has_run_while_it_runs(deployed):
    site = deployed
    # the training stopped (a reinstall waits for a running one: issue 20's gate), and the
    # container's userspace lost nvidia-smi: the next deploy reinstalls it with the .run
    assert site.ct("systemctl", "stop", "dflash-train.service").returncode == 0
    assert site.ct("rm", "/usr/bin/nvidia-smi").returncode == 0
    assert site.ct("sh", "-c", f"mkdir -p /var/lib/pve-sim && touch {HOLD}").returncode == 0
    with site.deploy_streaming("progress_interval_s=1") as run:
        try:
            line = run.wait_for("CT 200: installing NVIDIA userspace 580.95.05: ", timeout=300)
            assert " s so far" in line, line
            # still installing: the installer holds, nvidia-smi is not back yet
            assert site.ct("test", "-e", "/usr/bin/nvidia-smi").returncode == 1
        finally:
            site.ct("rm", "-f", HOLD)
        done = run.finish()
    assert done.rc == 0, done.output[-4000:]
    assert done.changed >= 1  # --json's stdout is still one JSON document: the lines go to the log
    assert "installing NVIDIA userspace" not in done.stdout
    assert site.ct("test", "-x", "/usr/bin/nvidia-smi").returncode == 0


def test_a_container_start_says_how_long_it_has_waited_for_pct_exec(deployed):
    site = deployed
    node = site.node
    assert node.run(["pct", "stop", "200"]).returncode == 0
    # the next start's container does not answer `pct exec` until the test lets it
    node.run(
        ["sh", "-c", "mkdir -p /var/lib/pve-sim/exec-hold && touch /var/lib/pve-sim/exec-hold/200"],
        check=True,
    )
    try:
        with site.deploy_streaming("progress_interval_s=1") as run:
            line = run.wait_for("waiting for `pct exec` to answer in CT 200: ", timeout=300)
            assert "so far (it may take up to about 60 s)" in line, line
            # still waiting: the container runs, `pct exec` does not answer yet
            assert node.run(["pct", "status", "200"]).stdout == "status: running\n"
            assert node.run(["pct", "exec", "200", "--", "true"]).returncode != 0
            node.run(["rm", "/var/lib/pve-sim/exec-hold/200"], check=True)
            done = run.finish()
    finally:
        node.run(["rm", "-f", "/var/lib/pve-sim/exec-hold/200"])
    assert done.rc == 0, done.output[-4000:]
    assert node.run(["pct", "exec", "200", "--", "true"]).returncode == 0

"""What would start a second trainer at boot is what starts the training (its script, a
launcher, training_command's module, a shell wrapper in the training dir), never a service that
only lives under the venv or the training dir: a Jupyter server, TensorBoard, a checkpoint upload
and its timer stay enabled, unmasked, untouched by a takeover."""

from __future__ import annotations

from pvegpu.plan.adoption import boot_starters, cron_runs_training, disable_starters_script

MATCH = {
    "script": "/data/dflash/train.py",
    "module": None,
    "workdir": "/data/dflash",
    "paths": ["/root/venv", "/root/venvs", "/data/dflash"],
}
PY = "/root/venv/bin/python"


def unit(name, argv, wd=None, **more):
    return {"id": name, "file_state": "enabled", "exec": [argv], "wd": wd, **more}


def test_only_units_that_start_the_training_are_boot_starters():
    units = [
        unit("jupyter.service", [PY, "/root/venv/bin/jupyter-lab", "--ip=0.0.0.0"], "/data/dflash"),
        unit(
            "tensorboard.service", ["/root/venv/bin/tensorboard", "--logdir", "/data/dflash/runs"]
        ),
        unit("upload.service", [PY, "/data/dflash/upload.py"], "/data/dflash"),
        unit("upload.timer", [], triggers=["upload.service"]),
        unit("train.service", [PY, "train.py", "--resume"], "/data/dflash"),
        unit("loop.service", ["/bin/bash", "/data/dflash/run.sh"]),
    ]
    found = boot_starters({"live": {"units": units, "crons": []}}, MATCH, "dflash-train.service")
    assert [line.split(" is enabled")[0] for line in found] == ["train.service", "loop.service"]


def test_only_cron_lines_that_start_the_training_count():
    assert cron_runs_training(f"@reboot cd /data/dflash && {PY} train.py --resume", MATCH)
    assert cron_runs_training("@reboot /root/venv/bin/torchrun /data/dflash/train.py", MATCH)
    assert not cron_runs_training(f"@reboot {PY} /data/dflash/upload.py", MATCH)
    assert not cron_runs_training("@reboot /root/venv/bin/tensorboard --logdir /data/dflash", MATCH)
    assert not cron_runs_training(f"@reboot cd /tmp && {PY} train.py", MATCH)


def test_what_the_takeover_disables_is_never_masked():
    script = disable_starters_script(["train.service"], [])
    assert "systemctl disable --now train.service" in script and "mask" not in script

"""Messages the preflight and the operations share are worded in one place (issue 13): the
restart blocker (pvegpu.plan.passthrough.restart_blocker) and the missing NVIDIA installer
(pvegpu.plan.installer_tools.missing_installer_line)."""

from pathlib import Path

import pytest

SRC = Path(__file__).resolve().parents[2] / "src" / "pvegpu"


@pytest.mark.parametrize(
    "fragment, home",
    [
        ("must restart to get its GPUs right", "plan/passthrough.py"),
        ("could not be read: check `pct exec", "plan/passthrough.py"),
        ("is not in {installer_dir} on the node", "plan/installer_tools.py"),
        ("NVIDIA userspace {driver} (", "plan/installer_tools.py"),
    ],
)
def test_a_shared_message_is_written_once(fragment, home):
    where = [p.relative_to(SRC).as_posix() for p in SRC.rglob("*.py") if fragment in p.read_text()]
    assert where == [home]


def test_preflight_and_operation_word_the_restart_blocker_alike():
    from pvegpu.plan.passthrough import restart_blocker

    line = restart_blocker(200, "t.service", None, ["pending dev0 apply only at start"])
    assert line == (
        "CT 200 must restart (pending dev0 apply only at start), but whether t.service is running "
        "in it could not be read: check `pct exec 200 -- systemctl is-active t.service`, or pass "
        "--data restart_training=true"
    )

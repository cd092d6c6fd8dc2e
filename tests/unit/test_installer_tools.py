"""nvidia-installer's required utilities in the container: what the deploy installs (kmod), what
it refuses with one line (the rest), and the preflight's line before anything changes."""

import pytest

from pvegpu.plan.installer_tools import INSTALLER_TOOLS, missing_tools_line, plan_tools
from pvegpu.startup.preflight import node_problems
from tests.unit.test_preflight import node, running_ct, settings

KMOD = ["modprobe", "rmmod", "lsmod", "depmod"]


def test_the_list_is_the_real_installers():
    # NVIDIA/nvidia-installer misc.c __utils: SystemUtils then ModuleUtils, in its lookup order
    # (SystemOptionalUtils such as objcopy, systemctl, tar are looked up but not required;
    # insmod is never looked up).
    assert list(INSTALLER_TOOLS) == ["ldconfig", "grep", "dmesg", "tail", *KMOD]


@pytest.mark.parametrize(
    "missing, plan",
    [
        ([], ("ok", [])),
        (["depmod", "modprobe"], ("install_kmod", ["modprobe", "depmod"])),
        (KMOD + ["tail"], ("fail", ["tail", *KMOD])),
        (["ldconfig"], ("fail", ["ldconfig"])),
    ],
)
def test_only_kmod_is_installed_by_the_deploy(missing, plan):
    assert plan_tools(missing) == plan


def test_the_refusal_names_tools_packages_and_fix():
    assert missing_tools_line(200, ["dmesg", "modprobe"]) == (
        "CT 200 lacks dmesg, modprobe, which the NVIDIA installer needs even with "
        "--no-kernel-modules: install util-linux kmod in it "
        "(pct exec 200 -- apt-get install -y util-linux kmod), then deploy again"
    )


def ct_missing(tools, libcuda=None):
    ct = running_ct(libcuda=libcuda)
    ct["live"]["missing_tools"] = tools
    return ct


def test_preflight_refuses_a_container_the_installer_would_abort_in():
    problems, _ = node_problems(
        settings(), node(containers={"200": ct_missing(["dmesg"])}), "n1", [200]
    )
    assert problems == [f"n1: {missing_tools_line(200, ['dmesg'])}"]


@pytest.mark.parametrize("tools, libcuda", [(KMOD, None), (["dmesg"], "580.95.05")])
def test_preflight_lets_through_what_the_deploy_fixes_or_never_needs(tools, libcuda):
    # kmod alone is installed by the deploy; a converged container never runs the installer
    state = node(containers={"200": ct_missing(tools, libcuda)})
    assert node_problems(settings(), state, "n1", [200]) == ([], [])

"""Driver versions compare as numbers wherever they are ordered, and a node with MORE GPUs than
expected is as unfit as one with fewer.

Versions chosen where string and numeric order disagree: "580.105.08" < "580.65.06" as strings
but 580.105.08 > 580.65.06 as versions; "580.9.01" > "580.65.06" as strings but older; and
"570.124.06" vs cu128's 570.26.
"""

import pytest

from pvegpu.startup.preflight import node_problems
from pvegpu.variants import VARIANTS, driver_fit
from pvegpu.verification import verify
from tests.unit.test_preflight import node, settings
from tests.unit.verify_facts import ct_facts, node_facts
from tests.unit.verify_facts import settings as verify_settings


def run_verify(s, driver, libcuda):
    return verify(
        s,
        node_facts(driver=driver),
        ct_facts(libcuda=libcuda, version=f"2.11.0+{s.torch.variant}", cuda=s.torch.spec.cuda),
        where="CT 200 on n1",
        vmid=200,
        node_name="n1",
        unit="dflash-train.service",
    )


@pytest.mark.parametrize(
    "variant, driver, fit",
    [
        ("cu130", "580.105.08", "ok"),  # string order says older than 580.65.06
        ("cu130", "580.9.01", "too_old"),  # string order says newer than 580.65.06
        ("cu130", "1000.1.1", "ok"),  # "1000" < "580" as strings
        ("cu128", "570.124.06", "ok"),  # string order says older than 570.26
        ("cu128", "570.9.1", "reduced"),  # newer than 525.60.13, older than 570.26
    ],
)
def test_driver_fit_orders_versions_numerically(variant, driver, fit):
    assert driver_fit(VARIANTS[variant], driver) == fit


@pytest.mark.parametrize("driver, too_old", [("580.105.08", False), ("580.9.01", True)])
def test_preflight_minimum_is_numeric(driver, too_old):
    doc = node(
        driver_version=driver,
        driver_version_smi=driver,
        installer=f"/root/NVIDIA-Linux-x86_64-{driver}.run",
    )
    problems, _ = node_problems(settings(), doc, "n1")
    assert any("driver for cu130: expected >= 580.65.06" in p for p in problems) == too_old, (
        problems
    )


@pytest.mark.parametrize("driver, too_old", [("580.105.08", False), ("580.9.01", True)])
def test_verification_minimum_is_numeric(driver, too_old):
    v = run_verify(verify_settings(), driver, driver)
    assert ("driver for cu130" in [p.check for p in v.problems]) == too_old, v.lines()


@pytest.mark.parametrize(
    "node_driver, ct_driver", [("580.105.08", "580.65.06"), ("580.65.06", "580.105.08")]
)
def test_parity_catches_either_direction(node_driver, ct_driver):
    """Parity is equality to the patch level: neither an older nor a newer userspace passes."""
    v = run_verify(verify_settings(), node_driver, ct_driver)
    assert [p.check for p in v.problems] == ["driver parity"], v.lines()
    assert f"libcuda {ct_driver}" in v.lines()[0]
    # the node's userspace against its own module, in preflight
    doc = node(driver_version=node_driver, driver_version_smi=ct_driver)
    problems, _ = node_problems(settings(), doc, "n1")
    assert any(
        f"userspace is {ct_driver} but its kernel module is {node_driver}" in p for p in problems
    ), problems


@pytest.mark.parametrize("count", [7, 9])
def test_preflight_refuses_a_node_with_another_gpu_count(count):
    """9 of 8 is refused like 7 of 8 (a `<` in place of `!=` lets 9 through)."""
    doc = node(gpus=[{"index": i, "minor": i} for i in range(count)])
    problems, _ = node_problems(settings(), doc, "n1")
    assert problems == [
        f"n1: node GPU count: expected 8 (expected_gpu_count); found {count} listed by nvidia-smi "
        "on n1; fix: check the GPUs (nvidia-smi -L on the node) or set expected_gpu_count"
    ]


def test_verification_refuses_a_node_with_more_gpus():
    v = verify(
        verify_settings(),
        node_facts(gpus=9),
        ct_facts(),
        where="CT 200 on n1",
        vmid=200,
        node_name="n1",
        unit="dflash-train.service",
    )
    assert "node GPU count" in [p.check for p in v.problems], v.lines()

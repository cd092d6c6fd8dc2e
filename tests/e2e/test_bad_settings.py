"""The rows about settings: each bad value is refused with one line naming it,
before any change to the node or the container (the sim's tree digest, which covers the node's
data dir and the container, is unchanged; on a deployed node the training keeps its InvocationID),
and never with a traceback. A unit that systemd-analyze rejects is refused the same way."""

from __future__ import annotations

import os

import pytest

# (--data values, the line that must be printed)
FRESH_NODE_ROWS = [
    (
        ["ct_hostname=x;id $(touch /tmp/INJ)"],
        "ct_hostname='x;id $(touch /tmp/INJ)' is not a valid host name",
    ),
    (["ct_memory_mib=1"], "ct_memory_mib=1 is outside pct's range >= 16"),
    (["ct_swap_mib=-1"], "ct_swap_mib=-1 is outside pct's range >= 0"),
    (["data_dir_node=/etc"], "data_dir_node='/etc' is a system directory of the node"),
    (["data_dir_node=/tank/dflash,ro=1"], "data_dir_node='/tank/dflash,ro=1' contains ','"),
]
DEPLOYED_ROWS = [
    (
        ["venvs_dir=/data", "rebuild=venv", "restart_training=true"],
        "venvs_dir='/data' overlaps data_dir_ct='/data'",
    ),
    (["venv_path=/root"], "venv_path='/root' is a system directory"),
    (["venv_path=/usr/bin"], "venv_path='/usr/bin' is a system directory"),
    (
        [
            "pytorch_cuda_alloc_conf=a\nExecStartPre=/bin/touch /tmp/INJECTED",
            "restart_training=true",
        ],
        "pytorch_cuda_alloc_conf='a\\nExecStartPre=/bin/touch /tmp/INJECTED' "
        "has characters outside",
    ),
    (
        ["training_script=/data/dflash/my train.py"],
        "training_script='/data/dflash/my train.py' has a",
    ),
    (["training_script=/data/dflash/it's.py"], 'training_script="/data/dflash/it\'s.py" has a'),
    (
        ["training_script=/data/dflash/$(touch INJ).py"],
        "training_script='/data/dflash/$(touch INJ).py'",
    ),
    (["data_dir_ct=/root"], "data_dir_ct='/root' is a system directory of the container"),
    (["data_dir_node=/etc"], "data_dir_node='/etc' is a system directory of the node"),
    # a tab passed the preflight and aborted the whole run at the venv switch (JSON's "\t")
    (
        ['training_env={"MY_FLAGS": "a\\tb"}', "restart_training=true"],
        "training_env['MY_FLAGS'] holds a control character (tab): remove it",
    ),
]


def invocation(site) -> str:
    """The training unit's InvocationID: the same while the same run of the training goes on."""
    show = ["systemctl", "show", "-p", "InvocationID", "--value", "dflash-train.service"]
    return site.ct(*show).stdout.strip()


def assert_refused_without_change(site, rows, running=False):
    before = site.node.tree_digest()
    training = invocation(site) if running else None
    assert training != "", "the deployed training is not running"
    for data, line in rows:
        run = site.deploy(*data)
        assert run.rc != 0, (data, run.output[-3000:])
        assert line in run.output, (data, run.output[-3000:])
        assert "Traceback" not in run.output, run.output[-3000:]
        assert site.node.tree_digest() == before, data
        if running:
            assert invocation(site) == training, data


@pytest.mark.parametrize(
    "node_options",
    [{"minor_order": "reverse", "profile": "pve8"}, {"minor_order": "reverse", "profile": "pve9"}],
    ids=["pve8", "pve9"],
)
def test_bad_settings_on_a_fresh_node_change_nothing(site):
    assert_refused_without_change(site, FRESH_NODE_ROWS)


def test_bad_settings_on_a_deployed_node_cost_no_data(deployed):
    site = deployed
    for name in ("my train.py", "it's.py", "$(touch INJ).py"):  # the scripts exist
        site.node.run(
            ["cp", "/tank/dflash/dflash/train.py", f"/tank/dflash/dflash/{name}"], check=True
        )
    assert_refused_without_change(site, DEPLOYED_ROWS, running=True)
    assert site.ct("test", "-L", "/root/venv").returncode == 0


def test_a_unit_systemd_analyze_rejects_fails_the_deploy_before_any_change(
    site, tmp_path, monkeypatch
):
    # systemd-analyze as it reports a bad line: on stderr, naming the unit file, exit status 0
    # ("..., ignoring"); first on the controller's PATH, with its own verdict cache.
    bindir = tmp_path / "bin"
    bindir.mkdir()
    tool = bindir / "systemd-analyze"
    tool.write_text(
        "#!/bin/sh\necho \"$2:9: Unknown key name 'Bogus' in section 'Service', ignoring.\" >&2\n"
    )
    tool.chmod(0o755)
    monkeypatch.setenv("PATH", f"{bindir}:{os.environ['PATH']}")
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    line = (
        "dflash-train.service as rendered is rejected by systemd-analyze verify: "
        "dflash-train.service:9: Unknown key name 'Bogus' in section 'Service', ignoring.: "
        "fix the setting or templates/training.service.j2"
    )
    assert_refused_without_change(site, [([], line)])

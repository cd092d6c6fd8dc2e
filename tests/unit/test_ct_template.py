"""The default template follows the node's Proxmox VE major (Debian 12 on 8, 13 on 9)."""

from pvegpu.operations.proxmox import create_args
from pvegpu.plan.ct_template import default_template
from pvegpu.settings import Settings, defaults

D12 = ["debian-12-standard_12.7-1_amd64.tar.zst", "debian-12-standard_12.12-1_amd64.tar.zst"]
D13 = ["debian-13-standard_13.1-2_amd64.tar.zst"]


def test_unset_template_follows_the_major_and_takes_the_newest_present():
    assert (
        default_template(None, "8.4.1", D12 + D13)
        == "local:vztmpl/debian-12-standard_12.12-1_amd64.tar.zst"
    )
    assert (
        default_template(None, "9.0.3", D12 + D13)
        == "local:vztmpl/debian-13-standard_13.1-2_amd64.tar.zst"
    )
    # none present: the known name, which the caller reports with its `pveam download` line
    assert (
        default_template(None, "9.1.1", D12)
        == "local:vztmpl/debian-13-standard_13.1-2_amd64.tar.zst"
    )


def test_a_set_template_wins_and_create_passes_it_with_unprivileged_explicit():
    s = Settings.from_data({**defaults(), "ct_template": "local:vztmpl/mine.tar.zst"})
    assert defaults()["ct_template"] is None and s.container.template == "local:vztmpl/mine.tar.zst"
    volid = default_template(s.container.template, "9.1.1", D13)
    argv = create_args(s.container, 200, volid)
    assert argv[:4] == ["pct", "create", "200", "local:vztmpl/mine.tar.zst"]
    assert argv[argv.index("--unprivileged") + 1] == "0"

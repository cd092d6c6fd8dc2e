"""The training container (CT): what ``pct create``/``pct set`` get, and the data bind mount.

>>> c = ContainerSettings(None, "-x", 0, 16, 0, "local-lvm:128", "name=eth0", False,
...                       "nesting=1", True, True, "/tank/dflash", "/data")
>>> for line in c.problems(): print(line)
ct_hostname='-x' is not a valid host name (RFC 1123: letters, digits and inner '-', \
dot-separated labels): e.g. dflash-train
ct_cores=0 is outside pct's range 1..8192: set a value in range
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from .kinds import Part, flag, integer, optional_text, setting, text

# RFC 1123 host name (what pct's dns-name format accepts, with RFC 1123's label and name lengths).
HOST_LABEL_RE = re.compile(r"^[A-Za-z0-9]([A-Za-z0-9-]{0,61}[A-Za-z0-9])?$")
# pct's ranges (pve-container src/PVE/LXC/Config.pm): cores 1..8192, memory >= 16 MiB, swap >= 0.
CT_RANGES = {"ct_cores": (1, 8192), "ct_memory_mib": (16, None), "ct_swap_mib": (0, None)}


@dataclass(frozen=True)
class ContainerSettings(Part):
    """``ct_*`` and the data dir (group_data/all.py, "container")."""

    template: str | None = setting("ct_template", optional_text)
    hostname: str = setting("ct_hostname", text, strict=True)
    cores: int = setting("ct_cores", integer)
    memory_mib: int = setting("ct_memory_mib", integer)
    swap_mib: int = setting("ct_swap_mib", integer)
    rootfs: str = setting("ct_rootfs", text)
    net0: str = setting("ct_net0", text)
    unprivileged: bool = setting("ct_unprivileged", flag)
    features: str = setting("ct_features", text)
    protection: bool = setting("ct_protection", flag)
    onboot: bool = setting("ct_onboot", flag)
    data_dir_node: str = setting("data_dir_node", text, where="node")
    data_dir_ct: str = setting("data_dir_ct", text, where="ct")
    #: data_dir_node may be on the node's root filesystem (else the preflight refuses it there)
    data_dir_on_root_fs: bool = setting("data_dir_on_root_fs", flag, default=False)

    def problems(self) -> list[str]:
        """The hostname (RFC 1123) and pct's ranges for cores, memory and swap."""
        errs = self.field_problems()
        name = self.hostname
        if len(name) > 253 or not all(HOST_LABEL_RE.match(label) for label in name.split(".")):
            errs.append(
                f"ct_hostname={name!r} is not a valid host name (RFC 1123: letters, "
                f"digits and inner '-', dot-separated labels): e.g. dflash-train"
            )
        values = {"ct_cores": self.cores, "ct_memory_mib": self.memory_mib}
        values["ct_swap_mib"] = self.swap_mib
        for key, (low, high) in CT_RANGES.items():
            value = values[key]
            if value < low or (high is not None and value > high):
                span = f"{low}..{high}" if high is not None else f">= {low}"
                errs.append(f"{key}={value} is outside pct's range {span}: set a value in range")
        return errs

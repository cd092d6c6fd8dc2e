"""Every host's settings, validated together with the training unit each renders.

Above both :mod:`pvegpu.settings` (one host's data) and :mod:`pvegpu.plan.unit` (which renders from
settings), so neither imports the other back.
"""

from __future__ import annotations

from ..plan import unit  # looked up at call time: tests replace unit.unit_problems
from ..settings import Settings, SettingsError
from .data_keys import unknown_key_lines


def load_all(hosts) -> dict[str, Settings]:
    """Validate every host's data (every key known: ``data_keys.unknown_key_lines``; every value
    valid), and the training unit it renders (``unit.unit_problems``: systemd-analyze verify on
    the controller); raise one SettingsError listing every problem of every host.

    .. code:: python

        settings = load_all(list(state.inventory))  # {host name: Settings}
    """
    result: dict = {}
    errors: list[str] = unknown_key_lines(hosts)
    for h in hosts:
        try:
            result[h.name] = Settings.from_data(h.data)
        except SettingsError as e:
            errors.extend(f"{h.name}: {line}" for line in str(e).splitlines())
            continue
        errors.extend(f"{h.name}: {line}" for line in unit.unit_problems(result[h.name]))
    errors.extend(shared_gpu_lines(hosts, result))
    if errors:
        raise SettingsError("bad settings, nothing was changed:\n" + "\n".join(errors))
    return result


def shared_gpu_lines(hosts, settings: dict[str, Settings]) -> list[str]:
    """One line per GPU that two training containers of one node both train on (their
    ``target_gpus`` + ``drafter_gpus``): two trainers on one GPU would share its memory.

    >>> from types import SimpleNamespace as NS
    >>> from pvegpu.settings import defaults
    >>> a = Settings.from_data(dict(defaults(), target_gpus=[0, 1], drafter_gpus=[2]))
    >>> b = Settings.from_data(dict(defaults(), target_gpus=[3], drafter_gpus=[2]))
    >>> hosts = [NS(name=f"@pct/n1/{v}", data={"pct_node": "n1", "pct_vmid": v})
    ...          for v in (200, 201)]
    >>> shared_gpu_lines(hosts, {"@pct/n1/200": a, "@pct/n1/201": b})  # doctest: +ELLIPSIS
    ['n1: GPU 2 is a training GPU of both CT 200 (drafter_gpus) and CT 201 (drafter_gpus): ...']
    """
    owner: dict[tuple[str, int], tuple[int, str]] = {}  # (node, GPU): (vmid, key)
    lines = []
    for h in hosts:
        node, vmid, s = h.data.get("pct_node"), h.data.get("pct_vmid"), settings.get(h.name)
        if not node or vmid is None or s is None:
            continue
        for key, gpus in (("target_gpus", s.gpus.targets), ("drafter_gpus", s.gpus.drafters)):
            for gpu in gpus:
                first = owner.setdefault((node, gpu), (vmid, key))
                if first[0] != vmid:
                    lines.append(
                        f"{node}: GPU {gpu} is a training GPU of both CT {first[0]} ({first[1]}) "
                        f"and CT {vmid} ({key}): give each container of a node its own GPUs "
                        "(target_gpus and drafter_gpus in its fleet file `containers:` entry, "
                        "e.g. {vmid: 201, target_gpus: [4, 5, 6], drafter_gpus: [7]})"
                    )
    return lines

"""Every host's settings, validated together with the training unit each renders.

Above both :mod:`pvegpu.settings` (one host's data) and :mod:`pvegpu.plan.unit` (which renders from
settings), so neither imports the other back.
"""

from __future__ import annotations

from ..plan import unit  # looked up at call time: tests replace unit.unit_problems
from ..settings import Settings, SettingsError
from .data_keys import one_run_lines, unknown_key_lines


def load_all(hosts) -> dict[str, Settings]:
    """Validate every host's data (every key known: ``data_keys.unknown_key_lines``; every value
    valid), and the training unit it renders (``unit.unit_problems``: systemd-analyze verify on
    the controller); raise one SettingsError listing every problem of every host.

    .. code:: python

        settings = load_all(list(state.inventory))  # {host name: Settings}
    """
    result: dict = {}
    found: dict[str, list[str]] = {}  # problem line: the hosts it is a problem of
    for h in hosts:
        try:
            result[h.name] = Settings.from_data(h.data)
        except SettingsError as e:
            for line in str(e).splitlines():
                found.setdefault(line, []).append(h.name)
            continue
        for line in unit.unit_problems(result[h.name]):
            found.setdefault(line, []).append(h.name)
    errors = (
        unknown_key_lines(hosts)
        + one_run_lines(hosts)
        + shared_lines(found, [h.name for h in hosts])
    )
    errors.extend(shared_gpu_lines(hosts, result))
    if errors:
        raise SettingsError("bad settings, nothing was changed:\n" + "\n".join(errors))
    return result


def shared_lines(found: dict[str, list[str]], hosts: list[str]) -> list[str]:
    """Each problem once: bare when every host of the run has it (a node and its containers
    share their data), else after the names of the hosts that have it.

    >>> shared_lines({"x=1 is bad": ["n1", "@pct/n1/200"], "y=2 is bad": ["n2"]},
    ...              ["n1", "@pct/n1/200", "n2"])
    ['n1, @pct/n1/200: x=1 is bad', 'n2: y=2 is bad']
    >>> shared_lines({"x=1 is bad": ["n1", "@pct/n1/200"]}, ["n1", "@pct/n1/200"])
    ['x=1 is bad']
    """
    return [
        line if len(names) == len(hosts) else f"{', '.join(names)}: {line}"
        for line, names in found.items()
    ]


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
    shared: dict[tuple[str, int, int], list[tuple[int, str, str]]] = {}  # by node and CT pair
    for h in hosts:
        node, vmid, s = h.data.get("pct_node"), h.data.get("pct_vmid"), settings.get(h.name)
        if not node or vmid is None or s is None:
            continue
        for key, gpus in (("target_gpus", s.gpus.targets), ("drafter_gpus", s.gpus.drafters)):
            for gpu in gpus:
                first = owner.setdefault((node, gpu), (vmid, key))
                if first[0] != vmid:
                    shared.setdefault((node, first[0], vmid), []).append((gpu, first[1], key))
    return [shared_gpu_line(*pair, found) for pair, found in shared.items()]


def shared_gpu_line(node: str, first: int, second: int, found: list[tuple[int, str, str]]) -> str:
    """One line for the GPUs two containers of a node both train on."""
    fix = (
        "give each container of a node its own GPUs (target_gpus and drafter_gpus in its fleet "
        "file `containers:` entry, e.g. {vmid: 201, target_gpus: [4, 5, 6], drafter_gpus: [7]})"
    )
    if len(found) == 1:
        gpu, key_a, key_b = found[0]
        return (
            f"{node}: GPU {gpu} is a training GPU of both CT {first} ({key_a}) and CT {second} "
            f"({key_b}): {fix}"
        )
    gpus = ", ".join(str(gpu) for gpu, _, _ in found)
    return f"{node}: GPUs {gpus} are training GPUs of both CT {first} and CT {second}: {fix}"

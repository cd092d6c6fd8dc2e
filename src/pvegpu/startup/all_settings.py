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
    if errors:
        raise SettingsError("bad settings, nothing was changed:\n" + "\n".join(errors))
    return result

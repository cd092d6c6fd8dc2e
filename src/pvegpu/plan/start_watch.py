"""The watch after the deploy starts (or restarts) the training unit: ``systemctl start`` of a
``Type=simple`` unit returns at fork, so a trainer that dies at import (a package the build
lacks) would crash-loop until StartLimitBurst while the run says "converged". The watch reads
the unit every second for ``training_start_watch_s``: it must stay ``active`` with no automatic
restart (``NRestarts`` is 0 after the deploy's ``reset-failed`` + ``start``); otherwise one line
on stderr with its state and the journal's last lines, exit 1.

>>> "did not come up" in watch_script("dflash-train.service", 60, 200)
True
"""

from __future__ import annotations

import shlex

#: journal lines the failure line quotes
JOURNAL_LINES = 3


def watch_script(unit: str, seconds: int, vmid) -> str:
    """A sh script for inside CT ``vmid`` (see the module's docstring)."""
    u = shlex.quote(unit)
    fix = f"fix what its journal says (journalctl -u {unit}), then deploy again"
    return (
        f"i=0; while [ $i -lt {int(seconds)} ]; do "
        f"s=$(systemctl show -p ActiveState --value {u}); "
        f"r=$(systemctl show -p NRestarts --value {u}); "
        'if [ "$s" != active ] || [ "${r:-0}" != 0 ]; then '
        f"sub=$(systemctl show -p SubState --value {u}); "
        f"j=$(journalctl -u {u} -n {JOURNAL_LINES} -o cat --no-pager 2>/dev/null "
        "| tr '\\n' '|' | sed 's/|$//; s/|/ | /g'); "
        f"printf 'CT %s: %s did not come up: %s (%s) after %s s, %s automatic restarts; its "
        f'journal: %s; %s\\n\' {shlex.quote(str(vmid))} {u} "$s" "$sub" "$i" "${{r:-0}}" '
        f'"${{j:-(empty)}}" '
        f"{shlex.quote(fix)} >&2; exit 1; fi; "
        "sleep 1; i=$((i + 1)); done"
    )

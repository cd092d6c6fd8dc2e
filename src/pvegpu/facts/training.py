"""Facts for the training unit's inputs."""

from __future__ import annotations

import shlex

from pyinfra.api import FactBase


class PathKinds(FactBase):
    """What each path is: ``"file"``, ``"directory"`` or ``"missing"``, in one command.

    .. code:: python

        kinds = host.get_fact(PathKinds, paths=["/tank/dflash/dflash/train.py"])
        kinds["/tank/dflash/dflash/train.py"]   # 'file'

    An empty dict means the host could not be asked (e.g. a container that does not run yet).
    """

    def command(self, paths):
        quoted = " ".join(shlex.quote(p) for p in paths)
        return (
            f'for p in {quoted}; do if [ -f "$p" ]; then k=file; elif [ -d "$p" ]; then '
            'k=directory; else k=missing; fi; printf \'%s %s\\n\' "$k" "$p"; done'
        )

    @staticmethod
    def default():
        return {}

    def process(self, output):
        kinds = {}
        for line in output:
            kind, _, path = line.partition(" ")
            if kind in ("file", "directory", "missing") and path:
                kinds[path] = kind
        return kinds

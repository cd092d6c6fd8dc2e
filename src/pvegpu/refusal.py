"""A refusal: the run stops before any change, with one line per problem, shown as an error and
not as a crash.

pyinfra prints any other error it gets from a deploy file as ``--> pyinfra error in <our file>
line <N>: ...``: the place in pvegpu's code where the refusal was raised, which tells a user
nothing. A :class:`Refused` is also pyinfra's own CLI error (``pyinfra_cli``'s ``CliError``, whose
``show`` pyinfra leaves to the exception), so it prints exactly its own lines, once for the whole
run (pyinfra stops at the first host's error; every host raises the same one), and the run exits 1.

>>> e = Refused("bad settings, nothing was changed:\\nct_cores=0 is outside pct's range")
>>> e.title, e.problems
('bad settings, nothing was changed', ["ct_cores=0 is outside pct's range"])
>>> Refused("PVE_HOST is empty: set it").problems
['PVE_HOST is empty: set it']
"""

from __future__ import annotations

import sys

import click
from pyinfra import logger
from pyinfra.api.exceptions import PyinfraError

#: The title over the problem lines of a refusal whose message has none of its own.
TITLE = "refused, nothing was changed"

# pyinfra's CLI error class, taken from the CLI that runs (it is imported before any deploy
# file): importing pyinfra_cli here would monkey-patch the whole process for gevent (its
# __init__ does), a test runner's threads included. Outside the CLI, click's own exception.
_cli = sys.modules.get("pyinfra_cli.exceptions")
CliError = _cli.CliError if _cli is not None else click.ClickException


class Refused(CliError, PyinfraError):  # type: ignore[valid-type, misc]
    """One line per problem (the message's lines; a first line ending in ``:`` is their title).

    ``CliError`` makes pyinfra show it as it is, ``PyinfraError`` makes pyinfra's deploy-file
    loader pass it on unwrapped.
    """

    @property
    def title(self) -> str:
        lines = str(self).splitlines()
        return lines[0][:-1] if len(lines) > 1 and lines[0].endswith(":") else TITLE

    @property
    def problems(self) -> list[str]:
        lines = str(self).splitlines()
        return lines[1:] if len(lines) > 1 and lines[0].endswith(":") else lines

    def show(self, file=None) -> None:
        logger.error(f"--> {click.style(self.title, 'red', bold=True)}:")
        for line in self.problems:
            logger.error(line)  # pyinfra indents a line that does not start with -->

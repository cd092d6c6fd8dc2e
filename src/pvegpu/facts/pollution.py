"""What a rebuild would remove: side installs in the venv, files under /usr/local, apt packages."""

from __future__ import annotations

from .probe import ProbeFact


class Pollution(ProbeFact):
    """Packages of the live venv, /usr/local files pvegpu did not place, apt packages added since
    the container was created (when its baseline was recorded), in one command.

    .. code:: python

        p = host.get_fact(Pollution, venv="/root/venv", uv_bin=..., lock_file=".pvegpu-lock.txt",
                          baseline=..., usr_local_ours=["/usr/local/bin/uv"])
        p["packages"]["torch"], p["lock"], p["usr_local"], p["apt_extras"]
    """

    probe = "pollution"

    def command(self, venv, uv_bin, lock_file, baseline, usr_local_ours=()):
        return self.command_for(
            venv=venv,
            python=f"{venv}/bin/python",
            uv_bin=uv_bin,
            lock_file=lock_file,
            baseline=baseline,
            usr_local_ours=list(usr_local_ours),
        )

"""What a run may disrupt: rebuilds, restarting the training, adopting a container pvegpu did not
make, waiting for another deploy.

>>> RunPolicy("everything", False, 600, 10).problems()  # doctest: +NORMALIZE_WHITESPACE
["rebuild='everything' is unknown: use rebuild=venv or rebuild=container (or leave it unset)"]
"""

from __future__ import annotations

from dataclasses import dataclass

from .kinds import Part, flag, integer, optional_text, setting, text_list

REBUILDS = (None, "venv", "container")


@dataclass(frozen=True)
class RunPolicy(Part):
    """``rebuild``, ``restart_training``, ``adopt``, ``destroy_volumes``, ``deploy_lock_wait_s``,
    ``progress_interval_s`` (group_data/all.py, "rebuild / restarts") and ``extra_data_keys``
    (keys of the user's own the run accepts in the data)."""

    rebuild: str | None = setting("rebuild", optional_text)
    restart_training: bool = setting("restart_training", flag)
    lock_wait_s: int = setting("deploy_lock_wait_s", integer)
    progress_interval_s: int = setting("progress_interval_s", integer)
    extra_keys: tuple[str, ...] = setting("extra_data_keys", text_list, default=())
    #: one-run consents (``--data`` only, pvegpu.startup.data_keys.one_run_lines): change a
    #: container pvegpu did not make; let rebuild=container destroy storage-backed volumes
    adopt: bool = setting("adopt", flag, default=False)
    destroy_volumes: bool = setting("destroy_volumes", flag, default=False)

    def problems(self) -> list[str]:
        errs = self.field_problems()
        if self.rebuild not in REBUILDS:
            errs.append(
                f"rebuild={self.rebuild!r} is unknown: use rebuild=venv or rebuild=container (or "
                "leave it unset)"
            )
        if not 0 <= self.lock_wait_s <= 86400:
            errs.append(
                f"deploy_lock_wait_s={self.lock_wait_s} must be 0..86400: the "
                "seconds a deploy waits for another one on the same node"
            )
        errs += [
            f"extra_data_keys has {key!r}, not a data key name: list names like my_key"
            for key in self.extra_keys
            if not key.isidentifier()
        ]
        if not 1 <= self.progress_interval_s <= 3600:
            errs.append(
                f"progress_interval_s={self.progress_interval_s} must be 1..3600: the seconds "
                "between two progress lines of a long step (default 10)"
            )
        return errs

"""The site's files a container's uv needs: the indexes' credentials (a 0600 netrc) and their
CA bundle, copied from the controller with a file transfer (never on a command line).
"""

from __future__ import annotations

import io

from pyinfra.operations import files

from ..locks import netrc_text
from ..plan.uv_commands import CA_BUNDLE, NETRC
from ..settings import Settings, TorchSettings


def index_credentials(torch: TorchSettings) -> None:
    """Put the indexes' credentials (from ``user:token@`` in ``package_index_url`` or
    ``torch_index_base``) into the container as a 0600 netrc at ``NETRC``, for uv (``$NETRC``)
    and pvegpu's own index checks: a file transfer (``pct push``), never a command line. Nothing
    happens when no URL carries credentials.

    .. code:: python

        site_files.index_credentials(s.torch)  # from tasks/python_env.py
    """
    text = netrc_text(torch)
    if not text:
        return
    files.put(
        name="Index credentials for uv in the container (netrc, mode 600)",
        src=io.StringIO(text),
        dest=NETRC,
        mode="600",
        create_remote_dir=True,
    )


def index_ca_bundle(settings: Settings) -> None:
    """Copy ``index_ca_bundle`` (a PEM file on the controller) into the container at
    ``CA_BUNDLE``, where uv and pvegpu's index checks read it (``SSL_CERT_FILE``). Nothing
    happens when it is unset.

    .. code:: python

        site_files.index_ca_bundle(s)  # from tasks/python_env.py
    """
    if not settings.site.index_ca_bundle:
        return
    files.put(
        name="CA bundle of the indexes in the container (index_ca_bundle)",
        src=settings.site.index_ca_bundle,
        dest=CA_BUNDLE,
        mode="644",
        create_remote_dir=True,
    )

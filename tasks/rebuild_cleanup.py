# rebuild=venv, in each training container, after the python env stage switched to the fresh
# build: delete the builds it replaced (never the live one, never one a running process uses).
from pyinfra import host

from pvegpu.deploy_context import settings
from pvegpu.operations import rebuild

s = settings(host)

rebuild.old_builds_removed(name="Delete the venv builds rebuild=venv replaced", settings=s)

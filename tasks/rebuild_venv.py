# In each training container: the package baseline (for later pollution reports), and, with
# rebuild=venv, every venv build deleted so the python env stage builds from scratch.
from pyinfra import host

from pvegpu.deploy_context import settings
from pvegpu.operations import rebuild

s = settings(host)

rebuild.baseline_recorded(name="Record the container's package baseline", settings=s)
rebuild.venvs_removed(name="Delete every venv build for rebuild=venv", settings=s)

# Stage 3, in each training container: pinned uv, a venv per torch build, verified, then live.
from pyinfra import host

from pvegpu.deploy_context import settings
from pvegpu.operations import checks, python_env

s = settings(host)

python_env.uv_installed(name=f"Install uv {s.uv_version}", settings=s)
python_env.venv_built(name=f"Build venv {s.build_name}", settings=s)
checks.torch_runtime(
    name=f"Check torch in {s.build_name} before switching to it",
    python=f"{s.build_venv}/bin/python",
    settings=s,
)
python_env.venv_selected(name=f"Switch {s.venv_path} to {s.build_name}", settings=s)

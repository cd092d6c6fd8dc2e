# Stage 3, in each training container: pinned uv, a venv per torch build built beside the live one
# from its lock, checked, then switched in atomically; compile caches per build; old builds pruned.
from pyinfra import host

from pvegpu.locks import early_lock_error
from pvegpu.operations import python_env
from pvegpu.settings import SettingsError
from pvegpu.startup.deploy_context import settings

s = settings(host)
build = s.torch.build_name

# An .in that pins other things, or require_lock=true without a lock: refuse here, before any
# operation of the run executes (with python_version unset, the container's Python is known only
# at execution; venv_built checks that lock again before it changes anything).
error = early_lock_error(s)
if error:
    raise SettingsError(f"{host.name}: {error}")

python_env.index_credentials(s.torch)
python_env.uv_installed(
    name=f"Install uv {s.python_env.uv_version}", python_env=s.python_env, torch=s.torch
)
python_env.venv_built(name=f"Build venv {build} when missing, stale or drifted", settings=s)
python_env.compile_caches(
    name=f"Compile caches under {s.compile_cache_dir}", cache_dir=s.compile_cache_dir
)
python_env.venv_checked(
    name=f"Check torch in the new {build} build before switching",
    torch=s.torch, python_env=s.python_env, gpus=s.gpus,
)
python_env.venv_selected(
    name=f"Switch {s.python_env.venv_path} to {build}", torch=s.torch, python_env=s.python_env
)
python_env.venvs_pruned(
    name=f"Keep {s.python_env.keep_venvs} venv builds", torch=s.torch, python_env=s.python_env
)

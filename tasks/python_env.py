# Stage 3, in each training container: pinned uv, a venv per torch build built beside the live one
# from its lock, checked, promoted; compile caches per build. It goes live (one rename) only after
# verify accepted it, in the training unit stage.
from pyinfra import host

from pvegpu.locks import early_lock_error
from pvegpu.operations import python_env, site_files
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

site_files.index_credentials(s.torch)
site_files.index_ca_bundle(s)
python_env.uv_installed(
    name=f"Install uv {s.python_env.uv_version}",
    python_env=s.python_env,
    torch=s.torch,
    settings=s,
)
python_env.venv_built(name=f"Build venv {build} when missing, stale or drifted", settings=s)
python_env.compile_caches(
    name=f"Compile caches under {s.compile_cache_dir}", cache_dir=s.compile_cache_dir
)
python_env.venv_checked(
    name=f"Check torch in the new {build} build before switching",
    torch=s.torch,
    python_env=s.python_env,
    gpus=s.gpus,
)
python_env.venv_promoted(name=f"Promote the new {build} build when one was built", settings=s)
# Verify (tasks/verify.py) checks this build next; the training unit stage then switches
# venv_path to it, with its unit, and prunes old builds.

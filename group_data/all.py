# Every pvegpu variable, with its default. Defaults live here and only here; override any of them
# per run with `pyinfra inventory.py deploy.py --data key=value`, or per host in the fleet file.
# src/pvegpu/settings/ validates every value before anything on a host changes.
from importlib.metadata import version as _installed_version

# --- torch build -----------------------------------------------------------------------------
# The one variable that swaps the CUDA build: cu128 or cu130 (rows of src/pvegpu/variants.py).
torch_variant = "cu130"
# Installed as exactly torch==<torch_version>+<torch_variant>. Must be X.Y.Z.
torch_version = "2.11.0"
# PyTorch's wheel index (or a local mirror); the variant's index is <torch_index_base>/<variant>.
torch_index_base = "https://download.pytorch.org/whl"
# Simple index for everything that is not torch (or a local mirror in air-gapped sites).
package_index_url = "https://pypi.org/simple"
# Pins installed beside torch; [] installs torch alone.
training_requirements = ["transformers==5.6.0"]
# Refuse when locks/<variant>-py<X.Y>.lock is missing (else the deploy makes it on this
# machine from the configured indexes and says so: commit it).
require_lock = False
# Controller directory of the per-variant lock inputs (<variant>.in) and hashed locks
# (<variant>-py<X.Y>.lock, one per Python version); a relative path is from the project root.
locks_dir = "locks"

# --- python env in the container ----------------------------------------------------------------
# uv in the container: the same version as the project's own locked uv package (one pin).
uv_version = _installed_version("uv")
# Interpreter the venvs are built on (the container's system Python by default).
python_interpreter = "/usr/bin/python3"
# Python version (X.Y) python_interpreter must be; venvs and locks (<variant>-py<X.Y>.lock) are
# made for it. None: whatever python_interpreter is in the container (3.11 on Debian 12, 3.13 on
# Debian 13 templates).
python_version = None
# The stable path users and the training unit run; a symlink to the selected build's venv.
venv_path = "/root/venv"
# Where per-build venvs live (torch-<version>-<variant>), beside uv's cache (same filesystem).
venvs_dir = "/root/venvs"
# Built venvs kept for instant rollback (the selected one included).
keep_venvs = 2
# uv's cache in the container; on the venvs' filesystem so installs hard-link instead of copy.
uv_cache_dir = "/root/.cache/uv"

# --- GPUs ---------------------------------------------------------------------------------------
# GPUs the node must have and the container must see.
expected_gpu_count = 8
# GPU indices of the target models and of the drafters (disjoint).
target_gpus = [0, 1, 2, 3, 4]
drafter_gpus = [5, 6, 7]
# Free memory each training GPU must have before a launch (MiB).
min_free_gpu_mib = 1024
# Extra NVIDIA devices to pass through besides nvidiaN, nvidiactl, nvidia-uvm(-tools):
# any of "nvidia-modeset", "nvidia-caps".
passthrough_extra_devices = []
# How devices reach the container: "auto" (devN entries where the node's pve-container is
# >= 5.0.7, i.e. PVE 8.1 on; raw lxc lines before), "dev" or "lxc".
passthrough_mode = "auto"
# Directory on the node holding NVIDIA-Linux-x86_64-<driver>.run, used to install the exact
# same userspace driver inside the container.
nvidia_installer_dir = "/root"

# --- container ----------------------------------------------------------------------------------
# Template `pct create` uses when the container is missing (storage:vztmpl/file). None: the
# newest debian-<N>-standard in local storage, N following the node (12 on PVE 8, 13 on PVE 9).
ct_template = None
# Container hostname, CPU cores, memory and swap (MiB), root disk (storage:GiB), network.
ct_hostname = "dflash-train"
ct_cores = 32
ct_memory_mib = 262144
ct_swap_mib = 0
ct_rootfs = "local-lvm:128"
ct_net0 = "name=eth0,bridge=vmbr0,ip=dhcp"
# Privileged by default: GPU device nodes and the bind-mounted data dir keep plain root
# ownership; unprivileged needs uid/gid mapping of both (see docs/node-and-container.md,
# "Privileged by default").
ct_unprivileged = False
# LXC features (nesting lets systemd in the container sandbox its services).
ct_features = "nesting=1"
# protection: 1 makes a stray `pct destroy` refuse; only rebuild=container lifts it.
ct_protection = True
# Start the container when the node boots.
ct_onboot = True
# Node directory bind-mounted into the container for checkpoints, datasets and compile caches.
# Its parent must exist on the node (the deploy creates only the last directory), and it must
# not be on the node's root filesystem (checkpoints would fill it) unless data_dir_on_root_fs.
data_dir_node = "/tank/dflash"
# Where that directory appears inside the container.
data_dir_ct = "/data"
# True: data_dir_node may be on the node's root filesystem (no pool or disk of its own mounted
# there); False: the preflight refuses it there, before any change.
data_dir_on_root_fs = False

# --- rebuild / restarts -------------------------------------------------------------------------
# None, "venv" (build the selected venv from scratch beside the live one, switch, then delete the
# old builds) or "container" (destroy and re-create the CT).
rebuild = None
# A deploy never restarts a running training service unless this is True: with it, a training
# pvegpu did not start is stopped gracefully (its checkpoint first) once the new build verified.
restart_training = False
# One deploy at a time per node (an flock on the node): how many seconds a deploy waits for
# another one to finish before it refuses, naming the holder.
deploy_lock_wait_s = 600
# Seconds between two progress lines of a long step (the venv build, a stop waiting for the
# training's checkpoint, the NVIDIA userspace installer, a container start): one line at least
# this often while the step lasts.
progress_interval_s = 10
# Keys of your own that may sit in the same data (a group_data file, the fleet file, --data):
# every other key that is not a setting above nor pyinfra's own (ssh_*, _sudo, ...) stops the run
# as a likely typo. Keys starting with x_ are always yours: no need to list them.
extra_data_keys = []
# Change a container pvegpu did not create (no "pvegpu" tag): without it the deploy shows the
# plan (every change, old -> new) and changes nothing there. Once adopted, it carries the tag.
adopt = False
# Let rebuild=container destroy the container's storage-backed mount points (mpN volumes, not
# bind mounts) along with it; without it such a rebuild is refused.
destroy_volumes = False
# rebuild, restart_training, adopt and destroy_volumes are one-run decisions: give them with
# --data only (set here or in a fleet file they are refused, so they never repeat by accident).

# --- verification -------------------------------------------------------------------------------
# "basic" or "compile" (adds the concurrent torch.compile check, one thread per GPU).
verify_level = "basic"
# Write the verification facts and verdict as JSON to this controller path (None: don't).
verify_report = None

# --- training unit ------------------------------------------------------------------------------
# systemd unit name (without .service) of the training service in the container.
training_unit_name = "dflash-train"
# The training script inside the container, run with the venv's python.
training_script = "/data/dflash/train.py"
# Working directory, dataset and checkpoint dirs, and whether to resume from the last checkpoint.
training_workdir = "/data/dflash"
dataset_dir = "/data/datasets"
checkpoint_dir = "/data/checkpoints"
resume = True
# Tokens per step and sequences per batch (defaults; see variant_overrides).
token_budget = 65536
max_batch_size = 64
# Seconds systemd waits after SIGTERM (to the trainer only) before SIGKILL: long enough to write a
# checkpoint; what is left once the trainer has exited is SIGKILLed at once.
training_stop_timeout_s = 900
# Back-off of Restart=on-failure: seconds before each automatic restart, and at most this many
# starts an hour, the deploy's own start included (StartLimitBurst: 5 is 4 automatic restarts
# right after a deploy; a deploy's start resets the count), then the unit stays failed for a
# human to look.
training_restart_delay_s = 30
training_restart_burst = 5
# PYTORCH_CUDA_ALLOC_CONF for the training process.
pytorch_cuda_alloc_conf = "expandable_segments:True"
# Per-variant overrides merged over the values above (cu130 needs more headroom, as users found).
# They live in each build (<build>/.pvegpu-train.env), so the unit is the same for every variant.
variant_overrides = {"cu130": {"token_budget": 49152, "max_batch_size": 48}}
# What the unit runs, after the build's python (and the launcher): the script or `-m module` and
# its arguments, one list item per argument (never split or interpreted by a shell). Placeholders
# are filled by pvegpu: {python} {script} {workdir} {data_dir} {dataset_dir} {checkpoint_dir}
# {gpus} {gpu_count} {target_gpus} {drafter_gpus} (GPU lists as CUDA numbers them in the unit:
# 0..n-1) {token_budget} {max_batch_size} (the selected variant's) and {resume_flag} (--resume
# when resume is true; an item that is only {resume_flag} is left out otherwise). A GPU role the
# command does not use may be empty (drafter_gpus = [] for a plain DDP script). Default: the
# DFlash trainer; docs/training-unit.md has a torchrun DDP and a one-GPU example.
training_command = [
    "{script}",
    "--target-gpus", "{target_gpus}", "--drafter-gpus", "{drafter_gpus}",
    "--token-budget", "{token_budget}", "--max-batch-size", "{max_batch_size}",
    "--dataset-dir", "{dataset_dir}", "--checkpoint-dir", "{checkpoint_dir}",
    "{resume_flag}",
]  # fmt: skip
# "python": one process (the build's python runs the command). "torchrun": torch's launcher,
# one node, a local rendezvous, one worker per training GPU (python -m torch.distributed.run
# --standalone --nnodes=1 --nproc-per-node=<GPUs>); a stop gives every worker
# training_stop_timeout_s to write its checkpoint.
training_launcher = "python"
# Extra environment variables of the training process, e.g. {"NCCL_DEBUG": "WARN"}.
training_env = {}
# Seconds the deploy watches the trainer it started (or restarted): the unit must stay active,
# with no automatic restart, that long, and one of its processes must appear on a GPU (nvidia-smi
# in the container), or the run fails with the journal's last lines (a trainer that dies at
# import, or hangs before its first CUDA call). Raise it for a trainer that loads for longer.
# 0: no watch.
training_start_watch_s = 60

# --- site ---------------------------------------------------------------------------------------
# Free space (GiB) the container's root disk (and, for a new container, its rootfs storage) must
# have before a deploy changes anything: the floor under the build's own estimate (uv's cache, a
# build of torch with its CUDA wheels, about 12 GiB, and keep_venvs builds beside it).
min_free_gib = 20
# Seconds between SSH keepalives on the node connections (the deploy lock's channel included,
# idle for a whole run): a NAT or firewall idle timeout must not drop them.
ssh_keepalive_s = 30
# Proxies for the package and torch indexes, passed explicitly to uv and to pvegpu's own index
# checks in the container and on the controller (`pct exec` starts from an empty environment):
# e.g. "http://10.0.0.1:3128"; None: none. no_proxy: hosts reached directly, as uv reads NO_PROXY:
# names with their subdomains, addresses, CIDR blocks, "*" ("localhost,.lan,10.0.0.0/8").
http_proxy = None
https_proxy = None
no_proxy = None
# A PEM bundle on this machine (the controller) with the CA(s) the indexes' TLS certificates
# chain to, for a mirror with an internal CA: copied into the container and given to uv and the
# index checks as SSL_CERT_FILE. It replaces uv's roots for every index, so it must hold every CA
# the indexes need: beside a public index (PyPI, download.pytorch.org), append the public roots
# (e.g. /etc/ssl/certs/ca-certificates.crt); pvegpu's checks trust exactly what uv trusts, so a
# missing root fails them before any build. None: uv's bundled Mozilla roots.
index_ca_bundle = None

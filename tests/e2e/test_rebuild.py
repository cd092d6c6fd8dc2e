"""Rebuild a polluted container in one command, losing nothing (issue 7)."""

from __future__ import annotations

DATA_FILES = {
    "/tank/dflash/checkpoints/step-1000.pt": "weights " * 1000,
    "/tank/dflash/datasets/train.jsonl": '{"text": "hello"}\n' * 100,
    "/tank/dflash/cache/torch-2.11.0-cu130/inductor/fx-graph.bin": "compiled " * 100,
}


def put_data(node):
    for path, text in DATA_FILES.items():
        node.run(["mkdir", "-p", path.rsplit("/", 1)[0]], check=True)
        node.run(["sh", "-c", f"cat > {path}"], input=text, check=True)


def data_sums(node) -> str:
    return node.run(
        ["sh", "-c", "cd /tank/dflash && find . -type f | sort | xargs sha256sum"]
    ).stdout


def pollute(site):
    uv = "/usr/local/bin/uv"
    junk = site.ct(
        uv,
        "pip",
        "install",
        "--python",
        "/root/venv/bin/python",
        "--index-url",
        site.index.package_index_url,
        "sglang-junk==0.1.0",
    )
    assert junk.returncode == 0, junk.stderr
    other = site.ct(
        uv,
        "pip",
        "install",
        "--python",
        "/root/venv/bin/python",
        "--index-url",
        site.index.torch_index_url("cu128"),
        "torch==2.11.0+cu128",
    )
    assert other.returncode == 0, other.stderr
    site.ct("sh", "-c", "echo junk > /usr/local/bin/junk-tool && chmod +x /usr/local/bin/junk-tool")


def packages(site) -> str:
    return site.ct("/usr/local/bin/uv", "pip", "list", "--python", "/root/venv/bin/python").stdout


def test_rebuild_venv_then_container_end_verified_with_data_unchanged(deployed):
    site = deployed
    put_data(site.node)
    sums = data_sums(site.node)
    pollute(site)
    assert "sglang-junk" in packages(site)

    # A running training unit blocks a rebuild unless asked.
    refused = site.deploy("rebuild=venv")
    assert refused.rc != 0
    assert "dflash-train.service is running: rebuild=venv refused" in refused.output
    assert "sglang-junk" in packages(site)

    run = site.deploy("rebuild=venv", "restart_training=true")
    assert run.rc == 0, run.output[-4000:]
    report = run.output
    assert "rebuild=venv replaces the venv" in report
    assert "venv: torch is 2.11.0+cu128, the lock says 2.11.0+cu130 (wrong variant" in report
    assert "venv: sglang-junk 0.1.0 is installed but not in the lock (extra)" in report
    assert "/usr/local/bin/junk-tool was not placed by pvegpu" in report
    listed = packages(site)
    assert "sglang-junk" not in listed and "2.11.0+cu130" in listed
    assert data_sums(site.node) == sums
    # rebuild=venv leaves the rest of the container alone
    assert site.ct("test", "-e", "/usr/local/bin/junk-tool").returncode == 0

    run = site.deploy("rebuild=container", "restart_training=true")
    assert run.rc == 0, run.output[-4000:]
    assert site.ct("test", "-e", "/usr/local/bin/junk-tool").returncode != 0
    assert "2.11.0+cu130" in packages(site)
    assert data_sums(site.node) == sums
    assert "protection: 1" in site.node.read("/etc/pve/lxc/200.conf")

    again = site.deploy()
    assert again.rc == 0 and again.changed == 0, again.output[-4000:]


def test_dry_rebuild_shows_what_it_would_destroy_and_changes_nothing(deployed):
    site = deployed
    site.ct("sh", "-c", "echo junk > /usr/local/bin/junk-tool")
    before = site.node.tree_digest()
    # --dry previews (facts and detected changes) and stops: pyinfra's own convention.
    run = site.pyinfra(
        "deploy.py",
        "rebuild=container",
        "restart_training=true",
        as_json=False,
        yes=False,
        extra=("--dry",),
    )
    assert run.rc == 0, run.output[-4000:]
    assert "/usr/local/bin/junk-tool was not placed by pvegpu" in run.output
    destroy = next(
        ln for ln in run.output.splitlines() if "Destroy CT 200 for rebuild=container" in ln
    )
    assert "1 (127.0.0.1)" in destroy
    assert site.node.tree_digest() == before

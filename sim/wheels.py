"""Build the wheels the simulation serves: the torch double, small doubles, and the real uv wheel.

    build_wheel(name, version, files, out_dir, requires=(), tag="py3-none-any") -> Path
    build_torch_wheels(out_dir, version="2.11.0", variants=("cu128", "cu130")) -> dict[str, Path]
    build_simple_wheels(out_dir) -> dict[str, Path]
    build_dependency_wheels(out_dir) -> (fresh, stale)   torch's deps: PyPI's and the torch index's
    ensure_uv_wheel(cache_dir=None, version=None) -> Path
    build_wheelhouse(out_dir, uv_cache=None) -> Wheelhouse   (all of the above, for PackageIndex)

Wheels are byte-for-byte reproducible (fixed zip timestamps and order), so their sha256 is stable.
"""

from __future__ import annotations

import base64
import hashlib
import importlib.metadata
import importlib.util
import os
import re
import shutil
import subprocess
import sys
import tempfile
import zipfile
from dataclasses import dataclass, field
from pathlib import Path

TORCH_DOUBLE_DIR = Path(__file__).resolve().parent / "torch_double"
DEFAULT_WHEEL_CACHE = Path("~/.cache/pvegpu-sim/wheels")
UNLABELED = "unlabeled"  # key of the PyPI-style torch==<version> wheel in build_torch_wheels()
# torch's own console script (pytorch/pytorch setup.py, entry_points): installed as bin/torchrun
TORCH_ENTRY_POINTS = "[console_scripts]\ntorchrun = torch.distributed.run:main\n"
_ZIP_DATE = (2020, 1, 1, 0, 0, 0)


def _escape(name: str) -> str:
    """Wheel filename / dist-info escaping of a project name (PEP 427, PEP 503 normalised)."""
    return re.sub(r"[-_.]+", "_", name).lower()


def _record_hash(data: bytes) -> str:
    digest = hashlib.sha256(data).digest()
    return "sha256=" + base64.urlsafe_b64encode(digest).rstrip(b"=").decode()


def build_wheel(
    name: str,
    version: str,
    files: dict[str, str | bytes],
    out_dir: str | os.PathLike,
    requires=(),
    tag: str = "py3-none-any",
    summary: str = "pvegpu simulation double",
    entry_points: str = "",
) -> Path:
    """Write ``<name>-<version>-<tag>.whl`` into out_dir and return its path.

    ``files`` maps archive paths (``pkg/__init__.py``) to contents. The wheel has METADATA (2.1),
    WHEEL, ``entry_points.txt`` when given (``[console_scripts]`` become scripts in the venv's
    bin/ at install) and a RECORD with sha256 of every file, so pip and uv install it as any
    other wheel.
    """
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    dist = _escape(name)
    dist_info = f"{dist}-{version}.dist-info"
    metadata = [
        "Metadata-Version: 2.1",
        f"Name: {name}",
        f"Version: {version}",
        f"Summary: {summary}",
        "Requires-Python: >=3.9",
    ]
    metadata += [f"Requires-Dist: {r}" for r in requires]
    wheel_meta = [
        "Wheel-Version: 1.0",
        "Generator: pvegpu-sim",
        f"Root-Is-Purelib: {'true' if tag.endswith('-none-any') else 'false'}",
        f"Tag: {tag}",
    ]
    entries: list[tuple[str, bytes]] = []
    for arc, content in sorted(files.items()):
        if arc.startswith("/") or ".." in arc.split("/"):
            raise ValueError(f"bad archive path {arc!r}")
        entries.append((arc, content.encode() if isinstance(content, str) else bytes(content)))
    entries.append((f"{dist_info}/METADATA", ("\n".join(metadata) + "\n").encode()))
    entries.append((f"{dist_info}/WHEEL", ("\n".join(wheel_meta) + "\n").encode()))
    if entry_points:
        entries.append((f"{dist_info}/entry_points.txt", entry_points.encode()))
    record = "".join(f"{arc},{_record_hash(data)},{len(data)}\n" for arc, data in entries)
    record += f"{dist_info}/RECORD,,\n"
    entries.append((f"{dist_info}/RECORD", record.encode()))

    path = out / f"{dist}-{version}-{tag}.whl"
    tmp = path.with_name(path.name + ".tmp")
    with zipfile.ZipFile(tmp, "w", zipfile.ZIP_DEFLATED) as zf:
        for arc, data in entries:
            info = zipfile.ZipInfo(arc, date_time=_ZIP_DATE)
            info.compress_type = zipfile.ZIP_DEFLATED
            info.external_attr = 0o644 << 16
            zf.writestr(info, data)
    os.replace(tmp, path)
    return path


def torch_variants() -> dict:
    """The torch double's variant table (sim/torch_double/torch/_variants.py), loaded by path."""
    spec = importlib.util.spec_from_file_location(
        "_pvegpu_sim_torch_variants", TORCH_DOUBLE_DIR / "torch" / "_variants.py"
    )
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _torch_sources() -> dict[str, str]:
    files = {}
    for path in sorted((TORCH_DOUBLE_DIR / "torch").rglob("*.py")):
        rel = path.relative_to(TORCH_DOUBLE_DIR).as_posix()
        if "__pycache__" in rel or rel == "torch/_build.py":
            continue
        files[rel] = path.read_text()
    return files


def build_torch_wheels(
    out_dir: str | os.PathLike, version: str = "2.11.0", variants=("cu128", "cu130")
) -> dict[str, Path]:
    """Build ``torch-<version>+<variant>`` for each variant and the unlabeled ``torch-<version>``.

    Returns ``{variant: wheel, ..., "unlabeled": wheel}``. As on PyPI, the unlabeled wheel is the
    CUDA 13.0 build (``__version__ == version``, ``torch.version.cuda == "13.0"``).
    """
    table = torch_variants()
    sources = _torch_sources()
    builds = [(v, f"{version}+{v}") for v in variants]
    builds.append((UNLABELED, version))
    out: dict[str, Path] = {}
    for key, full_version in builds:
        variant = table.UNLABELED_VARIANT if key == UNLABELED else key
        if variant not in table.VARIANTS:
            raise ValueError(f"unknown torch variant {variant!r}; known: {sorted(table.VARIANTS)}")
        git = hashlib.sha1(f"pvegpu-sim torch {full_version}".encode()).hexdigest()
        build = (
            '"""Generated by sim/wheels.py: which build of the torch double this is."""\n'
            f"VERSION = {full_version!r}\n"
            f"VARIANT = {variant!r}\n"
            f"CUDA = {table.VARIANTS[variant]['cuda']!r}\n"
            f"GIT_VERSION = {git!r}\n"
        )
        files = dict(sources, **{"torch/_build.py": build})
        if tuple(int(n) for n in version.split(".")[:2]) >= (2, 12):
            # torch 2.12's launcher reads its shutdown timeout from this variable; 2.11's source
            # never names it (docs/real-tools.md, "PyTorch: torchrun")
            files["torch/distributed/launcher/_shutdown.py"] = (
                '"""Generated by sim/wheels.py (torch 2.12 on): the launcher\'s variable."""\n'
                'VARIABLE = "TORCH_ELASTIC_SHUTDOWN_TIMEOUT"\n'
            )
        out[key] = build_wheel(
            "torch",
            full_version,
            files,
            out_dir,
            summary="pvegpu simulation: torch double",
            entry_points=TORCH_ENTRY_POINTS,
        )
    return out


def build_simple_wheels(out_dir: str | os.PathLike) -> dict[str, Path]:
    """The package mirror's small doubles: ``transformers==5.6.0``, junk ``sglang-junk==0.1.0``."""
    return {
        "transformers": build_wheel(
            "transformers",
            "5.6.0",
            {"transformers/__init__.py": '"""transformers double."""\n__version__ = "5.6.0"\n'},
            out_dir,
            summary="pvegpu simulation: transformers double",
        ),
        "sglang-junk": build_wheel(
            "sglang-junk",
            "0.1.0",
            {"sglang_junk/__init__.py": '"""Pollution for tests."""\n__version__ = "0.1.0"\n'},
            out_dir,
            summary="pvegpu simulation: an extraneous package",
        ),
    }


#: Dependencies of torch that the real per-CUDA torch index also hosts, in copies that lag
#: behind PyPI (``download.pytorch.org/whl/cu130/filelock/`` and ``.../typing-extensions/``):
#: ``{name: (version on PyPI, older version on the torch index)}``.
TORCH_INDEX_COPIES = {"filelock": ("3.20.0", "3.13.1"), "typing-extensions": ("4.15.0", "4.12.2")}
#: A small training requirement (package index only) that needs the PyPI versions above.
TRAINER_UTILS = ("trainer-utils", "1.0.0")


def build_dependency_wheels(out_dir) -> tuple[dict[str, Path], dict[str, Path]]:
    """``(fresh, stale)``: the PyPI copies of ``TORCH_INDEX_COPIES`` plus ``trainer-utils``
    (requiring each fresh version), and the torch index's stale copies.

    A resolver that takes every package the torch index has from there (uv's ``first-index``
    with the torch index as an extra index) cannot satisfy ``trainer-utils``.
    """
    out = Path(out_dir)
    fresh, stale = {}, {}
    for name, (new, old) in TORCH_INDEX_COPIES.items():
        module = _escape(name)
        for version, where, sub in ((new, fresh, out), (old, stale, out / "torch-index-copies")):
            source = f'"""{name} double."""\n__version__ = "{version}"\n'
            where[name] = build_wheel(
                name,
                version,
                {f"{module}.py": source},
                sub,
                summary=f"pvegpu simulation: {name} double",
            )
    name, version = TRAINER_UTILS
    fresh[name] = build_wheel(
        name,
        version,
        {"trainer_utils/__init__.py": f'__version__ = "{version}"\n'},
        out,
        requires=[f"{n}>={new}" for n, (new, _) in TORCH_INDEX_COPIES.items()],
        summary="pvegpu simulation: a training requirement needing fresh torch dependencies",
    )
    return fresh, stale


def ensure_uv_wheel(cache_dir: str | os.PathLike | None = None, version: str | None = None) -> Path:
    """The real manylinux x86_64 wheel of uv (default: the project's locked version).

    Downloaded once with ``pip download`` from the configured package index into cache_dir
    (default ``$PVE_SIM_WHEEL_CACHE``, else ``~/.cache/pvegpu-sim/wheels``) and reused afterwards.
    Containers install uv from it.
    """
    version = version or importlib.metadata.version("uv")
    cache = Path(
        cache_dir or os.environ.get("PVE_SIM_WHEEL_CACHE") or DEFAULT_WHEEL_CACHE
    ).expanduser()
    found = _find_uv_wheel(cache, version)
    if found:
        return found
    cache.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=cache, prefix=".download-") as tmp:
        cmd = [
            *_pip_command(Path(tmp)),
            "download",
            f"uv=={version}",
            "--no-deps",
            "--only-binary=:all:",
            "--platform",
            "manylinux_2_17_x86_64",
            "--disable-pip-version-check",
            "--no-input",
            "-d",
            str(Path(tmp) / "out"),
        ]
        proc = subprocess.run(cmd, capture_output=True, text=True)
        got = _find_uv_wheel(Path(tmp) / "out", version)
        if proc.returncode != 0 or not got:
            raise RuntimeError(
                f"could not download uv=={version} ({' '.join(cmd)}):\n{proc.stdout}{proc.stderr}"
            )
        os.replace(got, cache / got.name)
    return cache / got.name


def _find_uv_wheel(directory: Path, version: str) -> Path | None:
    if not directory.is_dir():
        return None
    for path in sorted(directory.glob(f"uv-{version}-*.whl")):
        if "manylinux" in path.name and "x86_64" in path.name:
            return path
    return None


def _pip_command(scratch: Path) -> list[str]:
    """``python -m pip``: this interpreter's pip, or a throwaway venv's (ensurepip, offline)."""
    if importlib.util.find_spec("pip") is not None:
        return [sys.executable, "-m", "pip"]
    venv = scratch / "pip-venv"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True, capture_output=True)
    return [str(venv / "bin" / "python"), "-m", "pip"]


@dataclass
class Wheelhouse:
    """Every wheel the simulation serves (see ``build_wheelhouse``)."""

    dir: Path
    torch: dict[str, Path]  # "cu128", "cu130", "unlabeled"
    simple: dict[str, Path]  # "transformers", "sglang-junk"
    uv: Path
    uv_version: str
    variants: tuple[str, ...] = field(default=("cu128", "cu130"))
    deps: dict[str, Path] = field(default_factory=dict)  # PyPI's filelock, ..., trainer-utils
    stale: dict[str, Path] = field(default_factory=dict)  # the torch index's older copies

    def torch_index(self) -> dict[str, list[Path]]:
        """The torch mirror's content: ``{variant: [torch-<v>+<variant>, stale dependency
        copies]}`` (like download.pytorch.org/whl/<variant>, which hosts older copies of
        many of torch's dependencies)."""
        return {v: [self.torch[v], *self.stale.values()] for v in self.variants}

    def pypi(self) -> list[Path]:
        """The package mirror's content (PyPI-like: the unlabeled torch is the CUDA 13 build)."""
        return [self.torch[UNLABELED], *self.simple.values(), *self.deps.values(), self.uv]


def build_wheelhouse(out_dir, uv_cache=None, variants=("cu128", "cu130")) -> Wheelhouse:
    """Build the torch and small doubles into out_dir and fetch (or reuse) the real uv wheel."""
    out = Path(out_dir)
    uv_version = importlib.metadata.version("uv")
    uv = ensure_uv_wheel(uv_cache, uv_version)
    fresh, stale = build_dependency_wheels(out)
    return Wheelhouse(
        dir=out,
        torch=build_torch_wheels(out, variants=variants),
        simple=build_simple_wheels(out),
        uv=uv,
        uv_version=uv_version,
        variants=tuple(variants),
        deps=fresh,
        stale=stale,
    )


def main(argv=None) -> int:
    """``python -m sim.wheels OUT_DIR``: build every double wheel and fetch uv into OUT_DIR."""
    args = list(sys.argv[1:] if argv is None else argv)
    out = Path(args[0] if args else "dist-sim")
    for path in [*build_torch_wheels(out).values(), *build_simple_wheels(out).values()]:
        print(path)
    uv = ensure_uv_wheel()
    shutil.copy2(uv, out / uv.name)
    print(out / uv.name)
    return 0


if __name__ == "__main__":
    sys.exit(main())

from ._build import CUDA as cuda
from ._build import GIT_VERSION as git_version
from ._build import VERSION as __version__

__all__ = ["__version__", "debug", "cuda", "git_version", "hip", "xpu"]
debug = False
hip = None
xpu = None

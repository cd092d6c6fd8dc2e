"""flex_attention double: shapes and devices only, plus real's warning when called uncompiled."""

from __future__ import annotations

import warnings

from ... import _dynamo
from ..._tensor import Tensor, _placed

_DEFAULT_SPARSE_BLOCK_SIZE = 128


class BlockMask:
    def __init__(self, mask_mod, shape, device, block_size):
        self.mask_mod = mask_mod
        self.shape = shape
        self.seq_lengths = shape[-2:]
        self.device = device
        self.BLOCK_SIZE = (block_size, block_size)

    def to(self, device):
        return BlockMask(self.mask_mod, self.shape, _placed(device), self.BLOCK_SIZE[0])

    def __repr__(self):
        name = getattr(self.mask_mod, "__name__", "?")
        return f"BlockMask(shape={self.shape}, mask_mod={name})"


def create_block_mask(
    mask_mod,
    B,
    H,
    Q_LEN,
    KV_LEN,
    device="cuda",
    BLOCK_SIZE=_DEFAULT_SPARSE_BLOCK_SIZE,
    _compile=False,
):
    dev = _placed(device)
    # Evaluate the mask on a corner, as vmap tracing would call it.
    mask_mod(0, 0, 0, 0)
    return BlockMask(mask_mod, (B or 1, H or 1, Q_LEN, KV_LEN), dev, BLOCK_SIZE)


def flex_attention(
    query,
    key,
    value,
    score_mod=None,
    block_mask=None,
    scale=None,
    enable_gqa=False,
    return_lse=False,
    kernel_options=None,
):
    for name, t in (("query", query), ("key", key), ("value", value)):
        if not isinstance(t, Tensor) or t.dim() != 4:
            raise ValueError(f"NYI: {name} must be a 4D tensor")
    if not (query.device == key.device == value.device):
        raise ValueError("Expected query, key, and value to have the same device type")
    if not _dynamo.is_compiling():
        warnings.warn(
            "flex_attention called without torch.compile() - this will use an unfused "
            "implementation that materializes the full scores matrix instead of generating a "
            "fused flex attention kernel.",
            UserWarning,
            stacklevel=2,
        )
    out = Tensor(tuple(query.shape[:-1]) + (value.shape[-1],), query.device, query.dtype)
    if return_lse:
        return out, Tensor(tuple(query.shape[:-1]), query.device, query.dtype)
    return out

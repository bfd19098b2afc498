"""MXFP4 (OCP microscaling FP4) dequantisation of the published gpt-oss expert weights.

The checkpoint stores each expert matrix as `*_blocks` (uint8, two FP4 e2m1 codes per byte, low
nibble first) and `*_scales` (uint8 power-of-two exponents biased by 127), one scale per block of
32 values along the input dimension: blocks [..., rows, n_blocks, 16], scales [..., rows, n_blocks].
"""

from __future__ import annotations

import numpy as np

# e2m1: sign bit, 2 exponent bits, 1 mantissa bit
FP4_E2M1 = np.array(
    [0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0, -0.0, -0.5, -1.0, -1.5, -2.0, -3.0, -4.0, -6.0], dtype=np.float32
)
SCALE_BIAS = 127


def dequantize(blocks: np.ndarray, scales: np.ndarray, dtype: np.dtype | type = np.float32) -> np.ndarray:
    """[..., rows, n_blocks, 16] codes and [..., rows, n_blocks] exponents -> [..., rows, n_blocks * 32] values."""
    blocks = np.asarray(blocks, dtype=np.uint8)
    scales = np.asarray(scales, dtype=np.uint8)
    if blocks.shape[:-1] != scales.shape or blocks.shape[-1] != 16:
        raise ValueError(f"MXFP4 blocks {blocks.shape} and scales {scales.shape} do not pair up (32 values per scale)")
    values = np.empty((*blocks.shape[:-1], 32), dtype=np.float32)
    values[..., 0::2] = FP4_E2M1[blocks & 0x0F]
    values[..., 1::2] = FP4_E2M1[blocks >> 4]
    exponents = scales.astype(np.int32) - SCALE_BIAS
    values = np.ldexp(values, exponents[..., None])
    return values.reshape(*blocks.shape[:-2], blocks.shape[-2] * 32).astype(dtype)


def quantize(values: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Exact inverse for values already on the MXFP4 grid (tests build checkpoints with it)."""
    *lead, cols = values.shape
    groups = values.reshape(*lead, cols // 32, 32).astype(np.float32)
    peak = np.max(np.abs(groups), axis=-1)
    exp = np.where(peak > 0, np.ceil(np.log2(np.maximum(peak, 1e-30) / 6.0)), 0).astype(np.int32)
    scaled = groups / np.ldexp(1.0, exp)[..., None]
    codes = np.abs(scaled[..., None] - FP4_E2M1).argmin(axis=-1).astype(np.uint8)
    codes = np.where((scaled == 0) & np.signbit(scaled), 8, codes).astype(np.uint8)
    blocks = (codes[..., 0::2] | (codes[..., 1::2] << 4)).astype(np.uint8)
    return blocks, (exp + SCALE_BIAS).astype(np.uint8)

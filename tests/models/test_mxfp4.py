"""MXFP4 dequantisation against hand-built values and against transformers' own CPU dequantiser."""

from __future__ import annotations

import numpy as np
import pytest

from rlexp.models.gpt_oss.mxfp4 import FP4_E2M1, dequantize, quantize


def test_codes_nibble_order_and_scale_bias():
    # one block of 32 values: byte j holds value 2j (low nibble) and 2j+1 (high nibble)
    codes = np.arange(32) % 16
    blocks = (codes[0::2] | (codes[1::2] << 4)).astype(np.uint8).reshape(1, 1, 16)
    out = dequantize(blocks, np.array([[128]], dtype=np.uint8))  # exponent 128 - 127 = 1: values x 2
    np.testing.assert_array_equal(out[0], 2 * FP4_E2M1[codes])
    assert out[0, 7] == 12.0 and out[0, 15] == -12.0
    small = dequantize(blocks, np.array([[127 - 3]], dtype=np.uint8))
    np.testing.assert_array_equal(small[0], FP4_E2M1[codes] / 8)


def test_shapes_and_mismatch():
    rng = np.random.default_rng(0)
    blocks = rng.integers(0, 256, size=(3, 5, 2, 16), dtype=np.uint8)
    scales = rng.integers(120, 130, size=(3, 5, 2), dtype=np.uint8)
    assert dequantize(blocks, scales).shape == (3, 5, 64)
    with pytest.raises(ValueError, match="do not pair up"):
        dequantize(blocks, scales[..., :1])


def test_quantize_round_trips_grid_values():
    rng = np.random.default_rng(1)
    blocks = rng.integers(0, 256, size=(2, 4, 3, 16), dtype=np.uint8)
    scales = rng.integers(115, 135, size=(2, 4, 3), dtype=np.uint8)
    values = dequantize(blocks, scales)
    np.testing.assert_array_equal(dequantize(*quantize(values)), values)


def test_matches_transformers_dequantiser():
    import torch
    from transformers.integrations import mxfp4

    rng = np.random.default_rng(2)
    blocks = rng.integers(0, 256, size=(2, 6, 4, 16), dtype=np.uint8)  # [E, out, in/32, 16]
    scales = rng.integers(110, 140, size=(2, 6, 4), dtype=np.uint8)
    theirs = mxfp4.convert_moe_packed_tensors(torch.from_numpy(blocks), torch.from_numpy(scales), dtype=torch.float32)
    ours = dequantize(blocks, scales).transpose(0, 2, 1)  # transformers returns [E, in, out]
    np.testing.assert_array_equal(ours, theirs.numpy())

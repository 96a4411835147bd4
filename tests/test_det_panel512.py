"""Deterministic mode's products of the 32-element types on the default prompt's int8 panels
(det_panel_x86.c: q8mm32_512.inc's p32_tile_as with det at the AVX512-VNNI level, q8mm32_256.inc's at AVX2),
from their per-type row counts on: det8's sequence, so row for row the bits of each row alone (det8's one-row
kernel).  Whole panels of outputs and a part-filled last one (75 = 32 + 32 + 11; AVX2's 16-row panels: 4 + 11),
every part-filled tile of rows (P32_MR 6 at AVX-512, 3 at AVX2) and a many-row product, y = and y +=, at the x86
levels this CPU runs (test_deterministic_kernels.py's lib fixture)."""
from __future__ import annotations

import gguf
import numpy as np
import pytest
from test_deterministic_kernels import activations, lib, rows_as_alone, weights  # noqa: F401  (lib: the fixture)

T = gguf.GGMLQuantizationType
N_OUT = 75
# every panel from 128 rows (det_panel_x86.h LP_DET_PANEL_ROWS_*: 128 at AVX-512, at most 64 at AVX2), tails 2, 3,
# 4, 5, 0, 1 (AVX-512's tiles of 6 rows); rows longer than 1024 from 256 rows (LP_DET_PANEL_ROWS_WIDE)
ROWS = {640: (128, 129, 130, 131, 132, 133, 260), 1280: (255, 256, 261)}


@pytest.mark.parametrize("n_in", sorted(ROWS))
@pytest.mark.parametrize("qtype", [T.Q4_0, T.Q4_1, T.Q5_0, T.Q5_1, T.Q8_0], ids=lambda t: t.name)
def test_det_panels_equal_one_row(lib, qtype, n_in):  # noqa: F811
    w = weights(qtype, N_OUT, n_in, seed=53 + int(qtype))
    x = activations(max(ROWS[n_in]), n_in, seed=59)
    y0 = np.random.default_rng(61).standard_normal((max(ROWS[n_in]), N_OUT)).astype(np.float32)
    rows_as_alone(lib, qtype, w, x, N_OUT, ROWS[n_in], y0)

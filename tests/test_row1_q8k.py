"""The Q4_K / Q6_K products of 1-4 activation rows on ggml's Q8_K activations (kernels/c/row1q8k_x86.c)
at every x86 level, the VNNI ones included (lp.h LP_Q8K_FEW: native, avx2+vnni): against an
int8-rounded reference (tests/test_kernels.py q8k_rounded), each row its own one-row product, the
two-weight-rows pass and the single last row alike, and the VNNI levels' sums bit for bit the
avx2 level's (vpdpwssd adds the same int32 products vpmaddwd + vpaddd do).  The VNNI levels take
Q8_K by the CPU (lp_cpu.h: not on AMD Zen 4, family 0x19): the CPU's answer against
/proc/cpuinfo, and both forms forced (lp_cpu_q8k_few_set) on this CPU."""
from __future__ import annotations

import contextlib
from pathlib import Path

import gguf
import pytest
import torch

from llamapy.model.block_matrix import block_matrix
from kernel_level import kernels_at
from test_kernels import _matrix, q8k_rounded

T = gguf.GGMLQuantizationType
SHAPE = (37, 2048)  # an odd number of weight rows (the last one alone after the pairs), 8 super-blocks a row


def level(name: str):
    """The kernels of this level, or a skip saying why this CPU has none."""
    return kernels_at(name)


@contextlib.contextmanager
def q8k_few(lib, on: int):
    """The VNNI levels' 1-4-row choice forced to `on` (1 Q8_K, 0 split int16), the CPU's after."""
    lib.fn.lp_cpu_q8k_few_set(on)
    try:
        yield
    finally:
        lib.fn.lp_cpu_q8k_few_set(-1)


@pytest.fixture(scope="module", params=["avx512", "avx2+vnni", "avx2"])
def lib(request):
    return level(request.param)


def cpuinfo_amd_family() -> int | None:
    """/proc/cpuinfo's 'cpu family' where vendor_id is AuthenticAMD, 0 for another vendor, None
    without /proc/cpuinfo's x86 fields."""
    try:
        info = Path("/proc/cpuinfo").read_text()
    except OSError:
        return None
    fields = dict(line.split(":", 1) for line in info.split("\n\n")[0].splitlines() if ":" in line)
    fields = {k.strip(): v.strip() for k, v in fields.items()}
    if "vendor_id" not in fields or "cpu family" not in fields:
        return None
    return int(fields["cpu family"]) if fields["vendor_id"] == "AuthenticAMD" else 0


def test_the_choice_follows_the_cpu(lib):
    """lp_cpu_amd_family is /proc/cpuinfo's family on AMD (0 elsewhere); the VNNI levels read 1-4
    rows as Q8_K except on family 0x19 (Zen 4), and lp_q8k_takes follows the choice."""
    fam = cpuinfo_amd_family()
    if fam is None:
        pytest.skip("no x86 /proc/cpuinfo here")
    assert lib.fn.lp_cpu_amd_family() == fam
    lib.fn.lp_cpu_q8k_few_set(-1)
    assert lib.fn.lp_cpu_q8k_few() == int(fam != 0x19)
    x = torch.randn(1, SHAPE[1], generator=torch.Generator().manual_seed(25))
    takes = lib.fn.lp_q8k_takes(int(T.Q4_K), x.data_ptr(), SHAPE[1], 1)
    assert takes == (1 if "vnni" not in lib.isa else int(fam != 0x19)), lib.isa


@pytest.mark.parametrize("qtype", [T.Q4_K, T.Q6_K], ids=lambda t: t.name)
def test_vnni_split_form_forced(lib, qtype):
    """Forced off (as on Zen 4), the VNNI levels' 1-4 rows take the split int16 form: not Q8_K,
    within the integer products' bound of the exact product (x unrounded), each row its one-row
    product; the avx2 level keeps Q8_K whatever the setting."""
    raw, W = _matrix(qtype, SHAPE, seed=26)
    m = block_matrix([(raw, qtype, SHAPE)], lib)
    x = torch.randn(4, SHAPE[1], generator=torch.Generator().manual_seed(27))
    exact = (x.double() @ W.double().T).float()
    vnni = "vnni" in lib.isa
    with q8k_few(lib, 0):
        one = torch.cat([m(x[r:r + 1]) for r in range(4)])
        for rows in (1, 4):
            assert lib.fn.lp_q8k_takes(int(qtype), x.data_ptr(), SHAPE[1], rows) == (not vnni), (lib.isa, rows)
            y = m(x[:rows])
            if vnni:
                assert (y - exact[:rows]).abs().max().item() <= 5e-5 * exact[:rows].abs().max().item(), rows
            assert torch.equal(y, one[:rows]), rows


@pytest.mark.parametrize("qtype", [T.Q4_K, T.Q6_K], ids=lambda t: t.name)
def test_few_rows_read_q8k(lib, qtype):
    """1-4 rows without an outlier block read x as Q8_K: within fp32 order of the product of the
    int8-rounded x, each row bit for bit its one-row product (2-4 rows at AVX-512 VNNI: q8kz_x86.c's,
    tests/test_q8kz.py); 5 rows do not at AVX2 with VNNI (the integer lanes or bf16; without VNNI:
    mm.c q8k_chunk, tests/test_kernels.py; AVX-512 VNNI: q8kz)."""
    raw, W = _matrix(qtype, SHAPE, seed=21)
    m = block_matrix([(raw, qtype, SHAPE)], lib)
    x = torch.randn(4, SHAPE[1], generator=torch.Generator().manual_seed(22))
    vnni = "vnni" in lib.isa
    with q8k_few(lib, 1):  # (the CPU's choice on Zen 4 is the split form: test_vnni_split_form_forced)
        if vnni and not lib.fn.lp_q8kz_takes(5):
            assert not lib.fn.lp_q8k_takes(int(qtype), x.data_ptr(), SHAPE[1], 5)
        ref = (q8k_rounded(x).double() @ W.double().T).float()
        one = torch.cat([m(x[r:r + 1]) for r in range(4)])
        for rows in (1, 2, 3, 4):
            assert lib.fn.lp_q8k_takes(int(qtype), x.data_ptr(), SHAPE[1], rows), (lib.isa, rows)
            y = m(x[:rows])
            assert (y - ref[:rows]).abs().max().item() <= 1e-5 * ref[:rows].abs().max().item(), rows
            assert lib.fn.lp_q8kz_takes(rows) or torch.equal(y, one[:rows]), rows


@pytest.mark.parametrize("qtype", [T.Q4_K, T.Q6_K], ids=lambda t: t.name)
def test_vnni_levels_are_the_avx2_sums(lib, qtype):
    """The VNNI levels' one-row Q8_K products are the avx2 level's bit for bit (the same int32 sums,
    the same float steps), one row and four (at AVX-512 VNNI four rows take q8kz_x86.c: one row alone,
    tests/test_q8kz.py)."""
    if lib.level == "avx2" and "vnni" not in lib.isa:
        pytest.skip("the avx2 level is the reference here")
    base = level("avx2")
    raw, _ = _matrix(qtype, SHAPE, seed=23)
    x = torch.randn(4, SHAPE[1], generator=torch.Generator().manual_seed(24))
    with q8k_few(lib, 1):
        for rows in (1,) if lib.fn.lp_q8kz_takes(4) else (1, 4):
            assert torch.equal(block_matrix([(raw, qtype, SHAPE)], lib)(x[:rows]), block_matrix([(raw, qtype, SHAPE)], base)(x[:rows]))

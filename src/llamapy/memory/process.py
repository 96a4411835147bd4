"""The process memory a loaded model holds (VmRSS once every weight has been read),
predicted from the GGUF header alone and without torch: `llamapy mem` and estimate_memory
report it beside the tensor bytes.

  weights     each matrix as the loader keeps it: its file bytes where the CPU kernels read
              its type (a view over the mapped file, or a stack read into one buffer), else
              what model/qmatrix.py's conversion allocates; vectors as float32.
  vocabulary  the whole `tokenizers` model's tables (its vocabulary twice, the merge map;
              built once a process has tokenized enough, tokenizer/build.py) and the Vocab's
              per-token arrays: VOCAB_FIXED + VOCAB_PER_TOKEN x n_vocab +
              VOCAB_PER_MERGE x merges, fitted to SmolLM2 (49152 tokens, 48900 merges:
              20.9 MB) and Gemma 3 (262144 tokens, 514906 merges: 83.1 MB) as measured.  An
              SPM vocabulary's merges (every split of every token) are not in the header:
              SPM_MERGES_PER_TOKEN of them per token is assumed (Gemma 3: 1.96).
  metadata    the header's pages (the vocabulary reads them), kv_end bytes.

Block matrices are sized by kernels/types.py (torch-free, shared with model/block_matrix.py);
the fallback restates model/qmatrix.py's qmatrix_nbytes, which imports torch: tests hold the
two equal on every type and on both real models."""
from __future__ import annotations

from dataclasses import dataclass

import gguf

from ..gguf.header import GGUFHeader, TensorInfo
from ..kernels.types import BLOCK_TYPES, bf16_gemm, block_nbytes, blocks_fit, lanes_gemm

T = gguf.GGMLQuantizationType
Q4_TYPES = (T.Q4_0, T.Q4_1, T.Q4_K)  # model/qmatrix.py: PyTorch's int4 kernel
DENSE_ESIZE = 4  # WeightLoader.dtype: float32
VOCAB_FIXED = 8_600_000
VOCAB_PER_TOKEN = 216
VOCAB_PER_MERGE = 35
SPM_MERGES_PER_TOKEN = 2


def matrix_nbytes(qtype: T, shape: tuple[int, int], blocks: bool, exact: bool = False) -> int:
    """Resident bytes of one [n_out, n_in] matrix as make_qmatrix keeps it (qmatrix_nbytes)."""
    n_out, n_in = shape
    if blocks and not exact and blocks_fit(qtype, n_in):
        return block_nbytes(qtype, n_out, n_in)
    if exact or n_in % 32 or n_out % 16 or qtype not in (*Q4_TYPES, T.Q8_0):
        return n_out * n_in * DENSE_ESIZE
    groups = (n_in // 32) * n_out
    if qtype in Q4_TYPES:  # packed nibbles + bf16 (scale, zero') per group
        return n_out * n_in // 2 + groups * 4
    return n_out * n_in + 2 * groups * 4 + groups * 2  # Q8_0: two nibble matrices, tables, f16 scales


def resident_weight_bytes(tensors: dict[str, TensorInfo], blocks: bool) -> int:
    """Bytes of the weights once loaded: matrices (2-D, and each expert of a 3-D one) by matrix_nbytes, every other tensor
    dequantized to float32 (what WeightLoader.get keeps)."""
    total = 0
    for t in tensors.values():
        if len(t.ne) == 2 and not t.name.endswith(".bias"):  # gpt-oss's expert biases [n_expert, n]: float32 (get)
            total += matrix_nbytes(t.qtype, t.shape, blocks)
            continue
        if len(t.ne) == 3:  # experts (ffn_*_exps, ne [n_in, n_out, n_expert]): one matrix each (WeightLoader.experts)
            total += t.ne[2] * matrix_nbytes(t.qtype, (t.ne[1], t.ne[0]), blocks)
            continue
        n = 1
        for x in t.ne:
            n *= x
        total += n * DENSE_ESIZE
    return total


def layers_dense(tensors: dict[str, TensorInfo], level: str | None, cpu_bf16: bool, coarse_many: bool = True) -> str:
    """How the layers' many-row products run (model/block_matrix.py _dense, dense_dtype), with
    the kernels at `level` (None: no kernels): "bf16" GEMMs (a CPU with native bf16 and every
    layer matrix of a type that takes it), "lanes" (every layer matrix stays in the kernels'
    integer lanes: kernels/types.py lanes_gemm), else "fp32" GEMMs (also for a mix: their
    dequantized chunks are the largest buffers).  coarse_many: the library's timed many-row
    choice for the coarse types (kernels/calibrate.py; memory/host.py coarse_many_bf16_expected)."""
    # the layers' matrices, the experts' 3-D stacks among them (one matrix an expert, the same products)
    mats = [t.qtype for name, t in tensors.items() if name.startswith("blk.") and len(t.ne) in (2, 3)]
    if not mats:
        return "fp32"
    if all(bf16_gemm(q, cpu_bf16, coarse_many) for q in mats):
        return "bf16"
    if level is not None and all(lanes_gemm(q, level, cpu_bf16, coarse_many) for q in mats):
        return "lanes"
    return "fp32"


def vocab_bytes(n_vocab: int, n_merges: int) -> int:
    """The tokenizer's resident tables (see the module doc for the fit)."""
    if n_vocab == 0:
        return 0
    return VOCAB_FIXED + VOCAB_PER_TOKEN * n_vocab + VOCAB_PER_MERGE * n_merges


@dataclass(frozen=True, slots=True)
class ProcessEstimate:
    """What a loaded model adds to the process once every weight page has been read."""

    weights: int
    vocab: int
    metadata: int
    file: int  # the GGUF's size, for the ratio

    @property
    def total(self) -> int:
        return self.weights + self.vocab + self.metadata

    def line(self) -> str:
        mib = 1024 * 1024
        return (f"process: weights {self.weights / mib:.2f} MiB + vocabulary up to ~{self.vocab / mib:.2f} MiB + "
                f"metadata {self.metadata / mib:.2f} MiB = ~{self.total / mib:.2f} MiB resident once every weight "
                f"is read ({self.total / max(self.file, 1):.2f}x the {self.file / mib:.2f} MiB file)")


def process_estimate(h: GGUFHeader, weights: int) -> ProcessEstimate:
    """From the header (GGUFHeader or GGUFFile) and the resident weight bytes."""
    tokens = h.get("tokenizer.ggml.tokens")
    n_vocab = 0 if tokens is None else len(tokens)
    merges = h.get("tokenizer.ggml.merges")
    if h.get("tokenizer.ggml.model") == "llama":
        n_merges = SPM_MERGES_PER_TOKEN * n_vocab
    else:
        n_merges = 0 if merges is None else len(merges)
    return ProcessEstimate(weights, vocab_bytes(n_vocab, n_merges), h.kv_end, h.file_size())

"""`llamapy quantize IN OUT TYPE` (llama-quantize's role, for the types this package can write).

Which tensor gets which type follows llama-quantize (src/llama-quant.cpp); the rules are in
quantize_mix.py (the router and norms kept, the output matrix Q6_K / Q8_0, MXFP4_MOE's experts,
the IQ4 and K mixes' Q5_K / Q6_K bumps, the block fallbacks);
- a tensor already of its target type is copied byte for byte.
Converting a quantized tensor to another block type loses precision twice (requantizing): it
is refused unless allow_requantize (llama-quantize's --allow-requantize).  Dequantizing one to
F32, F16 or BF16 is allowed (how a bigger target is made from a small file).

Every check runs before anything is written; the output is written beside its destination
and renamed into place at the end, so a failure leaves no partial file.  The input is read
with the engine's reader (gguf/reader.py: a vocabulary's arrays stay in the map until copied;
gguf.GGUFReader's per-entry objects cost Gemma 3's 262k-token file ~700 MiB), one tensor at a
time, converted in slices and written as soon as it is done.

TYPE: F32, F16, BF16, Q8_0, Q4_0, Q4_1, Q5_0, Q5_1, IQ4_NL, IQ4_XS, MXFP4_MOE (or MXFP4), Q4_K_S,
Q4_K_M, Q5_K_S, Q5_K_M (Q4_K / Q5_K name the _M mixes, as llama-quantize), the blocks byte for byte
as ggml's reference quantizers without an imatrix (gguf/quants_pack.py, quants_iq.py,
quants_pack_k.py, quants_pack_k45.py).
"""
from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import gguf
import numpy as np
import torch

from .gguf.header import VT, ArrayRef
from .gguf.quants import quantize
from .gguf.quants_pack_k import QK_K, quantize_q6_k
from .gguf.quants_pack_k45 import quantize_q4_k, quantize_q5_k
from .gguf.reader import GGUFFile
from .quantize_mix import FLOAT_TYPES, MixHparams, choose_type, hparams_of, output_matrix_name

T = gguf.GGMLQuantizationType
FILE_TYPES = {"F32": (T.F32, 0), "F16": (T.F16, 1), "BF16": (T.BF16, 32), "Q8_0": (T.Q8_0, 7), "Q4_0": (T.Q4_0, 2),
              "Q4_1": (T.Q4_1, 3), "Q5_0": (T.Q5_0, 8), "Q5_1": (T.Q5_1, 9), "IQ4_NL": (T.IQ4_NL, 25),
              "IQ4_XS": (T.IQ4_XS, 30), "MXFP4_MOE": (T.MXFP4, 38), "Q4_K_S": (T.Q4_K, 14), "Q4_K_M": (T.Q4_K, 15),
              "Q5_K_S": (T.Q5_K, 16), "Q5_K_M": (T.Q5_K, 17)}
ALIASES = {"MXFP4": "MXFP4_MOE", "Q4_K": "Q4_K_M", "Q5_K": "Q5_K_M"}  # llama-quantize's own aliases
K_ENCODERS = {T.Q4_K: quantize_q4_k, T.Q5_K: quantize_q5_k, T.Q6_K: quantize_q6_k}  # [n, 256] -> blocks
SKIP_KEYS = ("general.architecture", "general.file_type")  # the writer's own

# progress(done_bytes, total_bytes) over the input's tensor bytes
Progress = Callable[[int, int], None]


class QuantizeError(ValueError):
    """Bad input to quantize: nothing was written."""


@dataclass(frozen=True, slots=True)
class TensorPlan:
    name: str
    shape: tuple[int, ...]  # numpy order: [.., n_in]
    src_type: T
    out_type: T
    fell_back_from: T | None = None  # the mix's type for it, had its rows been whole blocks of it


@dataclass(slots=True)
class QuantizeReport:
    plans: list[TensorPlan]
    bytes_in: int = 0  # tensor data, llama-quantize's "model size"
    bytes_out: int = 0  # its "quant size"
    n_elements: int = 0
    counts: dict[str, int] = field(default_factory=dict)  # output type name -> tensors


def gguf_block(t: T) -> int:
    """Elements in one block of t."""
    return gguf.GGML_QUANT_SIZES[t][0]


def target_type(name: str, shape: tuple[int, ...], src_type: T, qtype: T, output_name: str,
                hp: MixHparams | None = None) -> tuple[T, T | None]:
    """(the type `name` is written as in the `qtype` mix, the type it fell back from when its
    rows are not a whole number of that type's blocks, else None); quantize_mix.choose_type."""
    c = choose_type(name, shape, src_type, qtype, output_name, hp)
    return c.out, c.fell_back_from


def mix_name(type_name: str) -> str:
    """The mix's canonical name (MXFP4 -> MXFP4_MOE, Q4_K -> Q4_K_M ...); QuantizeError for a type
    not written here."""
    key = ALIASES.get(type_name.upper(), type_name.upper())
    if key not in FILE_TYPES:
        raise QuantizeError(f"quantize type {type_name!r}: expected one of {', '.join(FILE_TYPES)} "
                            "(the others need llama.cpp's llama-quantize)")
    return key


def mix_type(type_name: str) -> tuple[T, int]:
    """(the mix's default tensor type, its general.file_type); QuantizeError for a type not written here."""
    return FILE_TYPES[mix_name(type_name)]


def plan_file(f: GGUFFile, type_name: str, allow_requantize: bool) -> list[TensorPlan]:
    """Each tensor's target type, in the file's order; raises QuantizeError for an unknown type
    or a requantization that allow_requantize does not permit."""
    mix = mix_name(type_name)
    qtype = mix_type(mix)[0]
    out_name = output_matrix_name(set(f.tensors))
    hp = hparams_of(f.fields, str(f.fields["general.architecture"].value), list(f.tensors))
    plans = []
    for t in f.tensors.values():
        shape, src = tuple(reversed(t.ne)), T(t.qtype)
        c = choose_type(t.name, shape, src, qtype, out_name, hp, mix)
        out = c.out
        if out != src and src not in FLOAT_TYPES and out not in FLOAT_TYPES and not allow_requantize:
            raise QuantizeError(
                f"{t.name} is {src.name}: requantizing it to {out.name} loses precision twice; quantize from an "
                "F32/F16/BF16 file, or pass --allow-requantize to do it anyway")
        plans.append(TensorPlan(t.name, shape, src, out, c.fell_back_from))
    return plans


def copy_metadata(f: GGUFFile, w: gguf.GGUFWriter) -> None:
    """Every metadata key of f but those the writer sets itself, large arrays (a vocabulary)
    decoded from the map only here, once."""
    for name, fld in f.fields.items():
        if name.startswith(SKIP_KEYS):
            continue
        if name == "general.alignment":
            w.add_custom_alignment(int(fld.value))
            continue
        v, et = fld.value, fld.elem_type
        if isinstance(v, ArrayRef):
            et = v.type
            v = f.strings(name).tolist() if v.type == VT.STRING else f.array(name).tolist()
        w.add_key_value(name, v, fld.type, et if fld.type == VT.ARRAY else None)


NUMPY_TYPES = {T.F32: np.float32, T.F16: np.float16}  # written as numpy arrays; the rest as raw blocks


def stored(shape: tuple[int, ...], t: T) -> tuple[tuple[int, ...], np.dtype, T | None]:
    """How GGUFWriter is told about a tensor of `shape` (numpy order) stored as t: (the array's
    shape, its dtype, raw_dtype) -- the elements for F32/F16, else bytes [.., row bytes]."""
    if t in NUMPY_TYPES:
        return shape, np.dtype(NUMPY_TYPES[t]), None
    block, size = gguf.GGML_QUANT_SIZES[t]
    return (*shape[:-1], shape[-1] // block * size), np.dtype(np.uint8), t


def encode(x: np.ndarray, out_type: T) -> np.ndarray:
    """Float32 values x [.., n_in] as out_type (stored()'s form)."""
    if out_type in NUMPY_TYPES:
        return x.astype(NUMPY_TYPES[out_type])
    xt = torch.from_numpy(np.require(x, np.float32, ["C", "W"]))
    if out_type in K_ENCODERS:
        return K_ENCODERS[out_type](xt.reshape(-1, QK_K)).numpy().reshape(*x.shape[:-1], -1)
    return quantize(xt, out_type).numpy()  # ggml's quantize_row_*_ref, byte for byte


CHUNK_ELEMENTS = 1 << 22  # floats converted at a time (16 MiB): gguf's dequantization makes a few copies


def convert(raw: np.ndarray, p: TensorPlan, out: np.ndarray) -> np.ndarray:
    """raw [rows, row bytes or elements] of p.src_type into out (stored()'s form of p.out_type),
    CHUNK_ELEMENTS floats at a time, so a vocabulary's temporaries stay small."""
    rows, n_in = raw.shape[0], p.shape[-1]
    flat = out.reshape(rows, -1)
    step = max(1, CHUNK_ELEMENTS // n_in)
    for i in range(0, rows, step):
        x = gguf.quants.dequantize(raw[i : i + step], p.src_type).reshape(-1, n_in).astype(np.float32, copy=False)
        flat[i : i + step] = encode(x, p.out_type).reshape(x.shape[0], -1)
    return out


def quantize_file(src: Path, dst: Path, type_name: str, *, allow_requantize: bool = False, force: bool = False,
                  progress: Progress | None = None) -> QuantizeReport:
    """Write dst from src with its weights as type_name's mix (module docstring); returns what
    was written.  Raises QuantizeError, before writing anything, for an unknown type, a
    requantization without allow_requantize, dst being src, dst's folder missing, or dst
    existing without force.
    Every tensor's size is known from the plan, so the header goes first and each tensor is
    written as soon as it is converted (GGUFWriter's add_tensor would hold them all)."""
    src, dst = Path(src), Path(dst)
    file_type = mix_type(type_name)[1]
    if src.resolve() == dst.resolve():
        raise QuantizeError(f"output {dst} is the input: choose another path")
    if not dst.parent.is_dir():
        raise QuantizeError(f"output folder {dst.parent} does not exist")
    if dst.exists() and not force:
        raise QuantizeError(f"output {dst} exists: choose another path, or pass --force to overwrite it")
    f = GGUFFile(src)
    report = QuantizeReport(plan_file(f, type_name, allow_requantize))
    tmp = dst.with_name(f".{dst.name}.partial")
    w = None
    try:
        w = gguf.GGUFWriter(tmp, str(f.fields["general.architecture"].value))
        copy_metadata(f, w)
        w.add_uint32("general.file_type", file_type)
        forms = [stored(p.shape, p.out_type) for p in report.plans]
        for p, (shape, dtype, raw_dtype) in zip(report.plans, forms):
            w.add_tensor_info(p.name, shape, dtype, int(np.prod(shape)) * dtype.itemsize, raw_dtype=raw_dtype)
        w.write_header_to_file()
        w.write_kv_data_to_file()
        w.write_ti_data_to_file()
        total = sum(t.n_bytes for t in f.tensors.values())
        for t, p, (shape, dtype, _) in zip(f.tensors.values(), report.plans, forms):
            in_shape, in_dtype, _ = stored(p.shape, p.src_type)
            raw = f.tensor_array(t.name).view(in_dtype).reshape(in_shape)  # over the map, no copy
            if p.out_type == p.src_type:  # copied as it is
                data = np.ascontiguousarray(raw)
            else:
                data = convert(raw.reshape(-1, in_shape[-1]), p, np.empty(shape, dtype))
            w.write_tensor_data(data)
            report.bytes_in += int(t.n_bytes)
            report.bytes_out += int(data.nbytes)
            report.n_elements += int(np.prod(p.shape))
            report.counts[p.out_type.name] = report.counts.get(p.out_type.name, 0) + 1
            if progress is not None:
                progress(report.bytes_in, total)
        w.close()
        os.replace(tmp, dst)
    finally:
        if w is not None:
            w.close()  # (again, harmless) the file is closed before the partial output goes
        tmp.unlink(missing_ok=True)
    return report

"""`llamapy quantize IN OUT TYPE` (llama-quantize's role, for the types the `gguf` package can
write): every 2-D weight is dequantized (gguf's own arithmetic) and stored as TYPE; 1-D
tensors (norms, biases) stay F32, as llama-quantize keeps them; the metadata is copied with
general.file_type set to TYPE's.  One tensor at a time, so the process holds about one
tensor's floats beyond the mapped input.

TYPE: F32, F16, BF16, or a block type the `gguf` package quantizes (Q8_0, Q4_0, Q4_1, Q5_0,
Q5_1).  The K-quants need llama.cpp's quantizer (importance search), which `gguf` lacks."""
from __future__ import annotations

from pathlib import Path

import gguf
import numpy as np

T = gguf.GGMLQuantizationType
FILE_TYPES = {"F32": (T.F32, 0), "F16": (T.F16, 1), "BF16": (T.BF16, 32), "Q8_0": (T.Q8_0, 7), "Q4_0": (T.Q4_0, 2),
              "Q4_1": (T.Q4_1, 3), "Q5_0": (T.Q5_0, 8), "Q5_1": (T.Q5_1, 9)}
SKIP_KEYS = ("GGUF.", "general.architecture", "general.file_type")


def quantize_file(src: Path, dst: Path, type_name: str) -> dict[str, int]:
    """Write dst from src with its weights as type_name; returns {tensor type name: count}.
    Raises ValueError for a type it cannot write, or when dst is src."""
    key = type_name.upper()
    if key not in FILE_TYPES:
        raise ValueError(f"quantize type {type_name!r}: expected one of {', '.join(FILE_TYPES)} "
                         "(the K-quants need llama.cpp's llama-quantize)")
    if Path(src).resolve() == Path(dst).resolve():
        raise ValueError(f"output {dst} is the input: choose another path")
    qtype, ftype = FILE_TYPES[key]
    r = gguf.GGUFReader(src)
    arch = str(r.fields["general.architecture"].contents())
    w = gguf.GGUFWriter(dst, arch)
    for name, f in r.fields.items():
        if name.startswith(SKIP_KEYS):
            continue
        sub = f.types[1] if f.types[0] == gguf.GGUFValueType.ARRAY and len(f.types) > 1 else None
        w.add_key_value(name, f.contents(), f.types[0], sub)
    w.add_uint32("general.file_type", ftype)
    counts: dict[str, int] = {}
    for t in r.tensors:
        shape = tuple(int(x) for x in reversed(t.shape))  # numpy order: [.., n_in]
        x = gguf.quants.dequantize(t.data, t.tensor_type).reshape(shape).astype(np.float32)
        out_type = qtype if x.ndim >= 2 and x.shape[-1] % gguf.GGML_QUANT_SIZES[qtype][0] == 0 else T.F32
        if out_type == T.F32:
            w.add_tensor(t.name, x)
        elif out_type == T.F16:
            w.add_tensor(t.name, x.astype(np.float16))
        else:
            w.add_tensor(t.name, gguf.quants.quantize(x, out_type), raw_shape=x.shape, raw_dtype=out_type)
        counts[out_type.name] = counts.get(out_type.name, 0) + 1
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return counts

"""What llama-bench prints about the model and the machine: llama_model_desc ("llama 256M Q4_1"),
llama_model_size (bytes of tensor data), llama_model_n_params, cpu_info, backends; and llamapy's
cpu_isa, the level its CPU kernels run at."""
from __future__ import annotations

import platform
from pathlib import Path

import torch

from ..gguf.ftype import ftype_name

# (arch, n_layer) -> llm_type name, the few entries of llama.cpp's per-arch tables we meet
_TYPE_NAMES = {
    ("llama", 16): "1B", ("llama", 22): "1B", ("llama", 26): "3B", ("llama", 28): "3B",
    ("llama", 30): "256M", ("llama", 40): "13B", ("llama", 48): "34B", ("llama", 60): "30B",
    ("gemma3", 18): "270M", ("gemma3", 26): "1B", ("gemma3", 34): "4B", ("gemma3", 48): "12B",
    ("gemma3", 62): "27B",
}


def model_desc(model) -> str:
    """llama_model_desc: "{arch} {type} {ftype}", e.g. "llama 256M Q4_1"."""
    f = model.gguf
    hp = model.hparams
    type_name = _TYPE_NAMES.get((f.arch, hp.n_layer), "?B")
    return f"{f.arch} {type_name} {ftype_name(f.get('general.file_type'))}"


def model_size(model) -> int:
    """llama_model_size: bytes of all tensor data in the GGUF (not the file's header)."""
    return sum(t.n_bytes for t in model.gguf.tensors.values())


def model_n_params(model) -> int:
    """llama_model_n_params: elements of all tensors."""
    n = 0
    for t in model.gguf.tensors.values():
        k = 1
        for d in t.ne:
            k *= d
        n += k
    return n


def cpu_info() -> str:
    """The CPU's model name as /proc/cpuinfo has it (llama-bench's get_cpu_info)."""
    p = Path("/proc/cpuinfo")
    if p.is_file():
        for line in p.read_text(errors="replace").splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    return platform.processor() or platform.machine()


def cpu_isa() -> str:
    """The ISA llamapy's CPU kernels were built for, as the library names it: the level first,
    then the extensions it uses ("avx512+vnni+bf16", "avx2", "neon+dotprod", "scalar"); "torch"
    when the kernels are off (LLAMAPY_KERNELS=0, no C compiler) and PyTorch's paths run.
    LLAMAPY_CPU_ISA picks the level; a level this CPU lacks raises IsaError."""
    from ..kernels import load_kernels

    lib = load_kernels()
    return lib.isa if lib is not None else "torch"


def gpu_info(device: str) -> str:
    if device.startswith("cuda") and torch.cuda.is_available():
        return torch.cuda.get_device_name(0)
    return ""


def backend_name(device: str) -> str:
    """llama-bench's `backend` column: CPU, or the accelerator's backend."""
    return "CUDA" if device.startswith("cuda") else "CPU"

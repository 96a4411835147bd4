"""Model: a GGUF file loaded into hparams, weights and a tokenizer (llama_model + llama_vocab)."""
from __future__ import annotations

import contextlib
import time
from pathlib import Path
from typing import Iterator

import torch

from ..gguf.header import GGUFError
from ..gguf.reader import GGUFFile
from ..log import Progress, logger
from .archs import arch_class
from .hparams import HParams, hparams_from_gguf
from .huge_pages import WeightArena, read_weights, thp_available
from .loader import WeightLoader
from .lora_apply import LoraState
from .stage import StageLayers

MiB = 1024 * 1024


class Model:
    def __init__(self, path: Path, f: GGUFFile, hp: HParams, net, tokenizer, loader: WeightLoader) -> None:
        self.path = path
        self.gguf = f
        self.hparams = hp
        self.net = net
        self.tokenizer = tokenizer
        self.n_bytes_file = loader.n_bytes_file
        self.n_bytes_resident = loader.n_bytes_resident
        self.n_bytes_stacked = loader.n_bytes_stacked  # read into new buffers; the rest is mapped
        self.n_bytes_arena = loader.arena.n_bytes if loader.arena is not None else 0  # of those, in the weight arena
        self.device = loader.device
        self.lora: LoraState | None = None  # the LoRA adapters (add_loras), applied beside the weights

    def add_loras(self, specs: list[tuple[str, float]]) -> None:
        """Load the LoRA adapters (path, scale) -- --lora / --lora-scaled -- and apply them to
        this model's products (model/lora.py, lora_apply.py); a refused adapter changes nothing."""
        if self.lora is not None:
            raise ValueError("LoRA adapters are added once, when the model is loaded")
        from .lora import load_lora
        from .lora_apply import attach_loras

        adapters = [load_lora(p, self.gguf, self.device) for p, _ in specs]
        shapes = {n: t.shape for n, t in self.gguf.tensors.items()}
        self.lora = attach_loras(self.net, shapes, adapters, tuple(float(s) for _, s in specs))
        self.n_bytes_resident += sum(ad.n_bytes for ad in adapters)  # the context's memory estimate counts them

    @classmethod
    def load(cls, name_or_path: str | Path | None = None, device: str = "auto", exact: bool = False,
             stage: StageLayers | None = None, tokenizer: bool = True, mmap: bool | None = None) -> "Model":
        """Load a registered model name (pulled on first use) or a path to a .gguf file.
        stage: only these layers (and the embedding / output where the stage holds them: a
        pipeline stage, see pipeline/); tokenizer False: none is built (tokenizer None).
        exact=True dequantizes every weight to float32 (slow, for reference comparisons);
        otherwise weights stay in the file's blocks where a kernel reads them: views of the
        mapped file, but matrices of 16 MiB or more read into 2 MiB pages where the kernel has
        transparent huge pages (mmap True: every one mapped, llama.cpp's --mmap; False: every
        one read, --no-mmap; see model/huge_pages.py).  On CUDA weights are dense float32.
        device "auto": CUDA when available, else the CPU."""
        device = resolve_device(device)
        from ..kernels import load_kernels
        from ..registry import resolve_model
        from ..tokenizer import Tokenizer

        log = logger("llama_model_loader")
        path = resolve_model(None if name_or_path is None else str(name_or_path))
        t0 = time.perf_counter()
        f = GGUFFile(path)
        with _field_context(f, "general.architecture"):
            net_cls = arch_class(f.arch)  # unsupported architecture -> GGUFError before any weight
        hp = hparams_from_gguf(f)
        stage = stage or StageLayers.whole(hp.n_layer)
        log.info(f"loaded meta data with {len(f.fields)} key-value pairs and {len(f.tensors)} tensors from {path} "
                 f"(version GGUF V{f.version})")
        _log_hparams(hp)
        _warm_page_cache(f, stage)
        exact = exact or torch.device(device).type != "cpu"
        kernels = None if exact else load_kernels()
        min_bytes, huge = read_weights(mmap, thp_available())
        arena = None
        if min_bytes is not None and kernels is not None:  # (capacity: the data, and alignment slack per tensor)
            arena = WeightArena.reserve(f.file_size() - f.data_offset + 64 * len(f.tensors), huge, min_bytes)
        loader = WeightLoader(f, torch.device(device), exact=exact, kernels=kernels, arena=arena)
        net = net_cls(hp, loader, stage)
        if stage.first and stage.last:
            _check_all_read(f, loader)
        tok = None
        if tokenizer:
            with _field_context(f, "tokenizer.ggml.merges"):
                tok = Tokenizer.from_gguf(f)
        logger("load_tensors").info(f"CPU model buffer size = {loader.n_bytes_resident / MiB:10.2f} MiB (file: {loader.n_bytes_file / MiB:.2f} MiB; "
                                    f"{(loader.n_bytes_file - loader.n_bytes_stacked) / MiB:.2f} MiB mapped from the file, "
                                    f"{_read_into(loader.n_bytes_stacked, arena)})")
        log.info(f"model loaded in {time.perf_counter() - t0:.2f} s")
        return cls(path, f, hp, net, tok, loader)

    # --- vocabulary -----------------------------------------------------------------------
    @property
    def n_vocab(self) -> int:
        return self.hparams.n_vocab

    def tokenize(self, text: str, add_special: bool = True, parse_special: bool = False) -> list[int]:
        return self.tokenizer.tokenize(text, add_special=add_special, parse_special=parse_special)

    def detokenize(self, ids: list[int], remove_special: bool = False, unparse_special: bool = False) -> str:
        return self.tokenizer.detokenize(ids, remove_special=remove_special, unparse_special=unparse_special)


def resolve_device(device: str) -> str:
    """"auto" -> "cuda" when torch sees a GPU, else "cpu"; anything else as given."""
    if device == "auto":
        return "cuda" if torch.cuda.is_available() else "cpu"
    if device.startswith("cuda") and not torch.cuda.is_available():
        raise ValueError(f"--device {device}: no CUDA device is available (use --device cpu)")
    return device


def _check_all_read(f: GGUFFile, loader: WeightLoader) -> None:
    """A whole model has read every tensor of its file (hparams_from_gguf refused the ones no
    table lists, model/arch_tensors.py): a tensor the table lists but the class skipped would
    otherwise be ignored in silence."""
    unread = [t for t in f.tensors if t not in loader.loaded]
    if unread:
        from .arch_tensors import name_list

        raise GGUFError(f"{f.path}: the '{f.arch}' model did not read {len(unread)} of the file's tensors: "
                        f"{name_list(unread)} (model/arch_tensors.py and model/archs/ disagree)")


def _read_into(n_read: int, arena: WeightArena | None) -> str:
    """The load line's account of the bytes read: stacks, and the arena's matrices."""
    n_arena = arena.n_bytes if arena is not None else 0
    out = f"{(n_read - n_arena) / MiB:.2f} MiB read into stacked matrices"
    if arena is not None:
        out += f", {n_arena / MiB:.2f} MiB into {'2 MiB pages' if arena.huge else 'memory'}"
    return out


def _warm_page_cache(f: GGUFFile, stage: StageLayers | None = None) -> None:
    """Sample the tensor data's pages: when some are not in the page cache (a cold start),
    read the file once through the cache with progress dots, as llama.cpp's populated map
    does, so the first forward pass does not wait on the disk a page fault at a time.  When
    all are cached, only an asynchronous read-ahead hint.  A pipeline stage leaves this to the
    kernels' first reads: it maps only its share of the file."""
    if stage is not None and not (stage.first and stage.last):
        return
    probe = f.cached_pages()
    span = f.file_size() - f.data_offset
    if probe is None or probe[0] == probe[1] or span > _available_memory():
        f.advise_willneed()
        return
    msg = (f"page cache cold ({probe[0]} of {probe[1]} sampled pages cached): reading {span / MiB:.2f} MiB "
           f"of tensor data")
    with Progress("llama_model_loader", msg) as p:
        f.read_ahead(p.update)


def _available_memory() -> int:
    """MemAvailable (Linux), else unbounded."""
    try:
        with open("/proc/meminfo") as fh:
            for line in fh:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    return 1 << 62


def _log_hparams(hp: HParams) -> None:
    log = logger("print_info")
    for name in ("arch", "n_ctx_train", "n_embd", "n_layer", "n_head", "n_head_kv", "n_rot", "n_swa", "n_embd_head_k", "n_embd_head_v", "n_ff", "n_vocab"):
        log.info(f"{name:<13}= {getattr(hp, name)}")
    log.info(f"{'n_gqa':<13}= {hp.n_gqa}")
    log.info(f"{'n_embd_k_gqa':<13}= {hp.n_embd_k_gqa()}")
    log.info(f"{'n_embd_v_gqa':<13}= {hp.n_embd_v_gqa()}")
    log.info(f"{'f_norm_rms_eps':<13}= {hp.f_norm_rms_eps:.1e}")
    log.info(f"{'freq_base_train':<13}= {hp.rope_freq_base:.1f}")


@contextlib.contextmanager
def _field_context(f: GGUFFile, key: str) -> Iterator[None]:
    """A GGUFError raised without the file's name (by code that reads a decoded field) gets
    the path, the field and its byte offset, like the parser's own."""
    try:
        yield
    except GGUFError as e:
        if str(e).startswith(str(f.path)):
            raise
        fld = f.fields.get(key)
        where = f"metadata '{key}' at byte {fld.offset}" if fld is not None and fld.offset >= 0 else f"metadata '{key}'"
        raise GGUFError(f"{f.path}: {where}: {e}") from None

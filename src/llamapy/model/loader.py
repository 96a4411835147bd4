"""Tensor names -> torch weights, with byte accounting (llama_model_loader).

Weights keep the GGUF file's bytes.  Mapped, a matrix is a view over the mapped file
(gguf/reader.py), so its pages join the process only as the kernels first read them, and the
page cache shares them with any other process mapping the same file.  Read, a matrix the
kernels keep in its blocks goes with os.preadv straight from the file into a WeightArena
(model/huge_pages.py: 2 MiB pages, far fewer TLB misses when a decode step streams it), its
bytes once, no mapped page touched: by default the matrices of 16 MiB or more where the
kernel has transparent huge pages, with Model.load(mmap=False) (--no-mmap) every one, with
mmap=True (--mmap) none.  Matrices stacked along n_out for one product (Q|K|V, gate|up) are
read the same way into one buffer (the arena's where it takes them), the parts at their
offsets: the stack costs its bytes once, with no torch.cat copy.  Parts of different types
are each a view, or read into the arena.  Where no kernel reads a type as it lies (model/qmatrix.py's fallback), that
matrix is converted and costs what the conversion allocates.  `n_bytes_file` keeps what the
GGUF holds so the memory report can show both."""
from __future__ import annotations

from dataclasses import dataclass, field

import torch

from ..gguf.header import GGUFError, TensorInfo
from ..gguf.quants import DEQUANTIZE_TYPES, dequantize
from ..gguf.reader import GGUFFile
from ..kernels import KernelLib
from ..kernels.types import blocks_fit
from .huge_pages import WeightArena
from .qmatrix import QMatrix, make_qmatrix


@dataclass(slots=True)
class WeightLoader:
    f: GGUFFile
    device: torch.device
    dtype: torch.dtype = torch.float32
    exact: bool = False  # True: every matrix dequantized to float32 (reference mode)
    n_bytes_file: int = 0
    n_bytes_resident: int = 0
    n_bytes_stacked: int = 0  # read into new buffers (stacks, and every block matrix with an arena), the rest mapped
    loaded: set[str] = field(default_factory=set)
    slot_orders: dict[tuple[int, int], torch.Tensor] = field(default_factory=dict)
    kernels: KernelLib | None = None  # llamapy's CPU kernels: matrices stay in their blocks
    arena: WeightArena | None = None  # where block matrices are read (None: they stay mapped)

    def has(self, name: str) -> bool:
        return name in self.f.tensors

    def _info(self, name: str, shape: tuple[int, ...] | None = None) -> TensorInfo:
        info = self.f.tensors.get(name)
        if info is None:
            raise GGUFError(f"{self.f.path.name}: missing tensor '{name}' (is this GGUF complete?)")
        if shape is not None and tuple(shape) != info.shape:
            raise GGUFError(f"{self.f.path.name}: tensor '{name}' (info at byte {info.info_offset}) has shape "
                            f"{info.shape}, expected {tuple(shape)}")
        if info.qtype not in DEQUANTIZE_TYPES:  # every type the kernels read is among these
            raise GGUFError(f"{self.f.path.name}: tensor '{name}' (info at byte {info.info_offset}) has ggml type "
                            f"{info.qtype.name}, which llamapy cannot read "
                            f"(supported: {', '.join(sorted(t.name for t in DEQUANTIZE_TYPES))})")
        return info

    def _done(self, info: TensorInfo) -> None:
        self.n_bytes_file += info.n_bytes
        self.loaded.add(info.name)

    def _to_arena(self, infos: list[TensorInfo]) -> bool:
        """Is this matrix read into the arena: the kernels keep its blocks as they lie (so the
        read bytes are what stays), and the arena takes its size?"""
        return (self.arena is not None and self.kernels is not None and not self.exact
                and all(blocks_fit(i.qtype, i.shape[1]) for i in infos)
                and self.arena.wants(sum(i.n_bytes for i in infos)))

    def _stacked(self, infos: list[TensorInfo], in_arena: bool) -> torch.Tensor:
        """The tensors' bytes one after another in a new uint8 buffer (from the arena: a
        matrix _to_arena takes), read from the file."""
        n = sum(i.n_bytes for i in infos)
        out = self.arena.take(n) if in_arena else torch.empty(n, dtype=torch.uint8)
        mv = memoryview(out.numpy())
        pos = 0
        for i in infos:
            self.f.read_into(i.name, mv[pos : pos + i.n_bytes])
            pos += i.n_bytes
        self.n_bytes_stacked += pos
        return out

    def matrix(self, *names: str) -> QMatrix:
        """Weight matrices ([n_out, n_in] each, same n_in) kept in their blocks where a kernel
        reads them; several names are stacked along n_out into one matrix (one matmul for
        Q|K|V): one part read into one buffer when they share a type, else the parts' own
        (read into the arena, or views of the mapped file)."""
        infos = [self._info(name) for name in names]
        for i in infos:
            if len(i.ne) != 2:
                raise GGUFError(f"{self.f.path.name}: tensor '{i.name}' has shape {i.shape}, expected a matrix")
        n_in = {i.shape[1] for i in infos}
        if len(n_in) != 1:
            raise GGUFError(f"{self.f.path.name}: cannot stack {', '.join(names)}: their rows differ ({sorted(n_in)})")
        whole = self._to_arena(infos)
        if len({i.qtype for i in infos}) == 1 and (len(infos) > 1 or whole):
            shape = (sum(i.shape[0] for i in infos), infos[0].shape[1])
            parts = [(self._stacked(infos, whole), infos[0].qtype, shape)]
        else:  # each its own: read into the arena where it goes there, else mapped
            parts = [(self._stacked([i], True) if self._to_arena([i]) else self.f.tensor_data(i.name), i.qtype, i.shape)
                     for i in infos]
        m = make_qmatrix(parts, self.exact, self.dtype, self.slot_orders, self.kernels)
        if self.device.type != "cpu":  # exact (dense) on accelerators: see Model.load
            m.dense = m.dense.to(self.device)
        for i in infos:
            self._done(i)
        self.n_bytes_resident += m.nbytes
        return m

    def experts(self, name: str) -> list[QMatrix]:
        """A 3-D expert tensor (ggml ne [n_in, n_out, n_expert]: ffn_{gate,up,down}_exps) as
        n_expert matrices [n_out, n_in], each a view of its expert's bytes (contiguous in the
        file), kept in their blocks as matrix() keeps a 2-D one (no arena, no copy)."""
        info = self._info(name)
        if len(info.ne) != 3:
            raise GGUFError(f"{self.f.path.name}: tensor '{name}' has shape {info.shape}, expected [n_expert, n_out, n_in]")
        n_in, n_out, n_expert = info.ne
        data = self.f.tensor_data(name)
        step = info.n_bytes // n_expert
        mats = [make_qmatrix([(data[e * step : (e + 1) * step], info.qtype, (n_out, n_in))], self.exact, self.dtype,
                             self.slot_orders, self.kernels) for e in range(n_expert)]
        for m in mats:
            if self.device.type != "cpu":
                m.dense = m.dense.to(self.device)
            self.n_bytes_resident += m.nbytes
        self._done(info)
        return mats

    def get(self, name: str, shape: tuple[int, ...] | None = None) -> torch.Tensor:
        """Tensor `name` in torch order, dequantized to float32 (norms, small vectors; an F32
        tensor stays a view over the file)."""
        info = self._info(name, shape)
        t = dequantize(self.f.tensor_data(name), info.qtype, info.shape)
        t = t.to(device=self.device, dtype=self.dtype)
        self.n_bytes_resident += t.numel() * t.element_size()
        self._done(info)
        return t

    def embeddings(self, first: bool = True, last: bool = True) -> tuple[QMatrix | None, torch.Tensor | None, QMatrix | None]:
        """token_embd [n_vocab, n_embd] (first stage), output_norm [n_embd] and the output
        matrix (last stage): its own `output.weight`, or token_embd itself when the model ties
        them.  A part a stage does not hold is None."""
        tok_embd = self.matrix("token_embd.weight") if first or (last and not self.has("output.weight")) else None
        if not last:
            return tok_embd, None, None
        output = self.matrix("output.weight") if self.has("output.weight") else tok_embd
        return (tok_embd if first else None), self.get("output_norm.weight"), output

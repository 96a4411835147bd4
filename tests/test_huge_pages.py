"""The weight arena (model/huge_pages.py): which matrices Model.load reads into 2 MiB pages and
which stay mapped (--mmap / --no-mmap / the default), the arena's placement, and that the
model computes the same logits however its weights are held."""
from __future__ import annotations

import mmap

import pytest
import torch

import llamapy
from llamapy.model.block_matrix import BlockMatrix
from llamapy.model.huge_pages import ALIGN, HUGE_MIN_BYTES, HUGE_PAGE, WeightArena, read_weights, thp_available


def test_thp_modes(tmp_path):
    p = tmp_path / "enabled"
    for text, want in (("always [madvise] never\n", True), ("[always] madvise never\n", True),
                       ("always madvise [never]\n", False)):
        p.write_text(text)
        assert thp_available(p) is (want and hasattr(mmap, "MADV_HUGEPAGE"))
    assert thp_available(tmp_path / "missing") is False


def test_mmap_flag():
    assert read_weights(True, True) == (None, False)  # --mmap: every matrix mapped
    assert read_weights(False, True) == (0, True)  # --no-mmap: every one read, into huge pages
    assert read_weights(False, False) == (0, False)  # (no THP: read all the same)
    assert read_weights(None, True) == (HUGE_MIN_BYTES, True)  # default: the large ones, huge pages
    assert read_weights(None, False) == (None, False)  # default without THP: mapped


def test_arena_places_pieces_aligned_and_refuses_past_its_capacity():
    a = WeightArena.reserve(10_000, huge=False)
    x, y = a.take(100), a.take(3000)
    base = x.data_ptr()
    assert base % HUGE_PAGE == 0 and (y.data_ptr() - base) == 128 and y.data_ptr() % ALIGN == 0
    x.fill_(1), y.fill_(2)  # writable, and distinct
    assert int(x.sum()) == 100 and int(y.sum()) == 6000
    with pytest.raises(MemoryError, match="weight arena"):
        a.take(8000)


def _matrices(model) -> list[BlockMatrix]:
    out = []

    def walk(o, depth=0):
        if isinstance(o, BlockMatrix):
            if all(o is not m for m in out):  # (a tied embedding is one matrix)
                out.append(o)
            return
        if depth > 4:
            return
        items = o if isinstance(o, (list, tuple)) else [getattr(o, k) for k in getattr(o, "__slots__", ())] + \
            list(getattr(o, "__dict__", {}).values())
        for v in items:
            if isinstance(v, (list, tuple)) or hasattr(v, "__dict__") or hasattr(v, "__slots__"):
                walk(v, depth + 1)

    walk(model.net)
    return out


def _logits(model) -> torch.Tensor:
    ctx = llamapy.Context(model, llamapy.ContextParams(n_ctx=64, n_batch=64, n_ubatch=64))
    b = llamapy.Batch()
    for i, t in enumerate([1, 5, 9, 2, 7]):
        b.add(t, i, [0], logits=True)
    ctx.decode(b)
    return ctx.get_logits().clone()


def test_no_mmap_reads_every_kept_matrix_and_computes_the_same(tiny_path):
    mapped = llamapy.Model.load(tiny_path, mmap=True)
    read = llamapy.Model.load(tiny_path, mmap=False)
    ms = _matrices(read)
    if not ms:
        pytest.skip("the CPU kernels are off: no block matrices")
    info = next(iter(read.gguf.tensors.values()))
    map_lo = read.gguf.tensor_data(info.name).data_ptr() - info.offset  # the file's mapping
    map_hi = map_lo + read.gguf.file_size()
    for m in ms:  # every kept matrix lies in the arena, none in the file's mapping
        assert not map_lo <= m.blocks.data_ptr() < map_hi, m.qtype
    assert read.n_bytes_stacked == sum(m.nbytes for m in ms)
    assert mapped.n_bytes_stacked < read.n_bytes_stacked
    assert torch.equal(_logits(mapped), _logits(read))


@pytest.mark.skipif(not thp_available(), reason="the kernel gives no transparent huge pages (THP never)")
def test_default_reads_the_vocabulary_into_huge_pages(smollm2_path):
    """SmolLM2's 28 MiB Q8_0 vocabulary (>= HUGE_MIN_BYTES) is read into the arena's 2 MiB
    pages; its layers stay mapped."""
    model = llamapy.Model.load(smollm2_path)
    big = [m for m in _matrices(model) if m.nbytes >= HUGE_MIN_BYTES]
    assert big and all(m.blocks.data_ptr() % ALIGN == 0 for m in big)
    assert model.n_bytes_stacked < 0.9 * model.n_bytes_file  # the small layer matrices: mapped or stacked
    with open("/proc/self/smaps") as f:
        regions = _regions(f.read())
    lo = big[0].blocks.data_ptr()
    hit = [r for r in regions if r["start"] <= lo < r["end"]]
    # the vocabulary's mapping is eligible for huge pages (private, anonymous, advised); whether
    # the kernel found free 2 MiB pages at that moment is its affair, so it is printed, not held
    assert hit and hit[0].get("THPeligible") == 1, hit
    print(f"vocabulary mapping: {hit[0].get('AnonHugePages', 0) >> 20} MiB in huge pages")


def _regions(smaps: str) -> list[dict]:
    """Each mapping of /proc/self/smaps: start, end and its numeric fields (kB fields in bytes)."""
    out: list[dict] = []
    for line in smaps.splitlines():
        head = line.split()[0] if line else ""
        if "-" in head and all(c in "0123456789abcdef-" for c in head):
            lo, hi = (int(x, 16) for x in head.split("-"))
            out.append({"start": lo, "end": hi})
        elif out and ":" in head and len(line.split()) >= 2 and line.split()[1].isdigit():
            key, val = head.rstrip(":"), int(line.split()[1])
            out[-1][key] = val * 1024 if line.rstrip().endswith("kB") else val
    return out

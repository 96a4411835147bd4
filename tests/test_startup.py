"""Each command loads only what it needs: `tokenize` and `mem` answer in a process where
`import torch` raises, `--help` without torch, `run` without FastAPI/uvicorn; and the
header-only process figures and sizes of `mem` agree with the torch modules they restate."""
from __future__ import annotations

import json
import logging
import os
import subprocess
import sys
from pathlib import Path

import pytest

from llamapy.memory import process as proc


@pytest.fixture(scope="module")
def no_torch(tmp_path_factory) -> dict[str, str]:
    """An environment whose `import torch` raises (a failing torch module first on the path)."""
    d = tmp_path_factory.mktemp("no_torch")
    (d / "torch.py").write_text('raise ImportError("torch is blocked in this test")\n')
    path = os.pathsep.join(p for p in (str(d), os.environ.get("PYTHONPATH", "")) if p)
    return dict(os.environ, PYTHONPATH=path)


def _llamapy(args: list[str], env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "llamapy", *args], capture_output=True, text=True, timeout=300,
                          env=env)


def test_blocker_blocks(no_torch):
    r = subprocess.run([sys.executable, "-c", "import torch"], capture_output=True, text=True, env=no_torch)
    assert r.returncode != 0 and "torch is blocked" in r.stderr


@pytest.mark.parametrize("which", ["smollm2", pytest.param("gemma3", marks=pytest.mark.slow)])
def test_tokenize_without_torch(no_torch, which, smollm2_path, gemma3_path):
    from llamapy.tokenizer import Tokenizer

    path = smollm2_path if which == "smollm2" else gemma3_path
    text = "Hello world, <|im_start|>user ☃ 123"
    r = _llamapy(["tokenize", "-m", str(path), "-p", text, "--ids", "--parse-special"], no_torch)
    assert r.returncode == 0, r.stderr[-2000:]
    want = Tokenizer.from_gguf(path).tokenize(text, parse_special=True)
    assert json.loads(r.stdout) == want


@pytest.mark.parametrize("which", ["smollm2", "gemma3"])
def test_mem_without_torch_equals_in_process_estimate(no_torch, which, smollm2_path, gemma3_path):
    from llamapy import ContextParams, estimate_memory

    from llamapy.kernels import load_kernels

    load_kernels()  # its first load records the timed choice mem reads (kernels/calibrate.py)
    path = smollm2_path if which == "smollm2" else gemma3_path
    r = _llamapy(["mem", "-m", str(path), "-c", "8192", "--json"], no_torch)
    assert r.returncode == 0, r.stderr[-2000:]
    got = json.loads(r.stdout)
    import torch

    from llamapy.memory.host import default_torch_threads

    n = torch.get_num_threads()  # here torch is loaded (other tests set its threads): the default, as mem assumes
    torch.set_num_threads(default_torch_threads())
    try:
        e = estimate_memory(path, ContextParams(n_ctx=8192))
    finally:
        torch.set_num_threads(n)
    assert got["buffers"] == e.as_dict()
    assert got["process"]["total"] == e.process.total and got["process"]["weights"] == e.weights


def test_default_threads_are_torchs():
    r = subprocess.run([sys.executable, "-c", "import torch; print(torch.get_num_threads())"],
                       capture_output=True, text=True, timeout=120)
    from llamapy.memory.host import default_torch_threads

    assert int(r.stdout.strip()) == default_torch_threads()


def test_help_without_torch(no_torch):
    r = _llamapy(["--help"], no_torch)
    assert r.returncode == 0 and "tokenize" in r.stdout, r.stderr[-2000:]


def test_run_imports_no_server_libraries(tiny_path):
    code = ("import sys\nfrom llamapy.cli import main\n"
            f"rc = main(['run', '-m', {str(tiny_path)!r}, '-p', 'hi', '-n', '1', '-c', '256'])\n"
            "bad = [m for m in ('fastapi', 'uvicorn', 'starlette') if m in sys.modules]\n"
            "print('server libraries:', bad)\nsys.exit(rc or bool(bad))")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stdout[-1000:] + r.stderr[-2000:]


def test_restated_sizes_equal_the_torch_modules():
    import gguf
    import torch

    from llamapy.kernels import ops
    from llamapy.memory import estimate
    from llamapy.model import block_matrix, loader, qmatrix

    assert estimate.FAST_ROWS == ops.FAST_ROWS
    assert estimate.DENSE_ROWS == block_matrix.DENSE_ROWS
    assert estimate.QMATRIX_DENSE_ROWS == qmatrix.DENSE_ROWS
    assert proc.BLOCK_TYPES == block_matrix.BLOCK_TYPES
    assert proc.Q4_TYPES == qmatrix.Q4_TYPES
    dtype = loader.WeightLoader.__dataclass_fields__["dtype"].default
    assert proc.DENSE_ESIZE == torch.empty((), dtype=dtype).element_size()
    shapes = [(64, 256), (48, 512), (40, 96), (32, 33), (256, 4096)]
    for qt in gguf.GGMLQuantizationType:
        if qt not in gguf.GGML_QUANT_SIZES:
            continue
        for shape in shapes:
            for blocks in (False, True):
                for exact in (False, True):
                    assert proc.blocks_fit(qt, shape[1]) == block_matrix.blocks_fit(qt, shape[1]), qt.name
                    assert proc.matrix_nbytes(qt, shape, blocks, exact) == \
                        qmatrix.qmatrix_nbytes(qt, shape, exact, dtype, blocks), (qt.name, shape, blocks, exact)
    from llamapy.kernels import load_kernels

    from llamapy.memory import host

    assert host.kernels_buildable() == (load_kernels() is not None)


@pytest.mark.parametrize("which", ["smollm2", pytest.param("gemma3", marks=pytest.mark.slow)])
def test_header_estimate_equals_loaded_model(which, smollm2_path, gemma3_path):
    from llamapy.memory.estimate import model_info
    from llamapy.model.model import Model

    path = smollm2_path if which == "smollm2" else gemma3_path
    header, loaded = model_info(path), model_info(Model.load(path, device="cpu"))
    assert header.weights == loaded.weights
    assert header.process == loaded.process


@pytest.mark.parametrize("which", ["smollm2", "gemma3"])
def test_vocab_estimate_near_a_measured_load(which, smollm2_path, gemma3_path):
    """The header's vocabulary + metadata estimate against what a tokenizer load (its whole
    `tokenizers` model built) adds to a fresh process's VmRSS (tests/vocab_probe.py), within
    a fifth.  Measured here: SmolLM2 19.8-20.9 MB for 22.7 MB estimated, Gemma 3 97.4-99.1 MB
    for 90.1 MB.  Both models: SmolLM2 alone hardly depends on the per-merge term."""
    path = smollm2_path if which == "smollm2" else gemma3_path
    probe = Path(__file__).with_name("vocab_probe.py")
    r = subprocess.run([sys.executable, str(probe), str(path)], capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr[-3000:]
    got = json.loads(r.stdout.strip().splitlines()[-1])
    assert got["vocab"] + got["metadata"] == pytest.approx(got["growth"], rel=0.2), got


def test_cold_page_cache_is_read_with_progress(tmp_path, tiny_path, monkeypatch):
    """A model whose pages are not cached is read once, with llama.cpp-style dots."""
    import io

    from llamapy.gguf.reader import GGUFFile
    from llamapy.log import setup_logging
    from llamapy.model import model as model_mod

    p = tmp_path / "cold.gguf"
    p.write_bytes(Path(tiny_path).read_bytes())
    f = GGUFFile(p)
    monkeypatch.setattr(f, "cached_pages", lambda samples=64: (3, 64))
    out = io.StringIO()
    root = logging.getLogger("llamapy")
    saved = (list(root.handlers), root.level, root.propagate)
    setup_logging(verbose=True, stream=out)
    try:
        model_mod._warm_page_cache(f)
    finally:
        root.handlers[:], root.level, root.propagate = saved[0], saved[1], saved[2]
    line = out.getvalue()
    assert line.startswith("llama_model_loader: page cache cold (3 of 64 sampled pages cached): reading ")
    assert line.endswith("." * 50 + " done\n"), line


def test_cold_pages_are_seen(tmp_path, tiny_path):
    """Where preadv2's RWF_NOWAIT exists the probe must see an evicted file as cold (most
    sampled pages missing), and read_ahead must bring every sampled page back."""
    from page_cache import CAN_PROBE, cold_copy

    f = cold_copy(tiny_path, tmp_path / "cold.gguf")
    probe = f.cached_pages()
    if not CAN_PROBE:
        assert probe is None
        return
    assert probe is not None and probe[0] <= probe[1] // 4, f"evicted, yet the probe saw {probe} sampled pages cached"
    f.read_ahead()
    assert f.cached_pages() == (probe[1], probe[1])


def test_version_is_the_installed_one():
    from importlib.metadata import version

    import llamapy

    assert llamapy.__version__ == version("llamapy")  # the tokenizer cache's key names it

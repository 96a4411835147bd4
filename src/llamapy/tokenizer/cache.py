"""The vocabulary tables a tokenizer build derives by walking the vocabulary in Python (the
merges as id pairs: for SPM every split of every token, for BPE the parsed merge strings;
SPM's phantom characters), kept in $LLAMAPY_HOME/tokenizers/ so the next load skips that walk.

The key.  The tables depend only on the GGUF's metadata (tokens, scores, types, merges,
flags) and on the code that derives them.  Hashing a whole multi-GB file on every load
would cost seconds, so the key is the sha256 of the metadata section (gguf/reader.py's
metadata_sha256: the magic through the last metadata value, a few MB), plus llamapy's
version, the `tokenizers` version, a format number and a hash of the deriving modules'
source (an edited checkout rebuilds too).  The file is named by the metadata hash, so a
changed file gets a fresh entry and a changed llamapy rebuilds the same entry in place.

The file: MAGIC, the key, the payload's sha256 (hex lines), then the payload: a JSON line
(n_merges, phantoms) and the merges as little-endian int32 pairs.  Anything that does not
check out (short file, other key, wrong checksum, ids out of range) is rebuilt, never
trusted; a cache that cannot be written is a warning, not an error."""
from __future__ import annotations

import functools
import hashlib
import json
import os
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from ..gguf.reader import GGUFFile
from ..log import logger

MAGIC = b"llamapy vocabulary tables\n"
FORMAT = 1
CACHE_MIN_VOCAB = 4096  # smaller vocabularies build in milliseconds: not cached
# The modules that derive the tables, next to this file in tokenizer/: their bytes (not
# their names) enter the key, so editing any of them rebuilds the cache.
_SOURCES = ("cache.py", "spm.py", "bpe.py")


@dataclass(frozen=True, slots=True)
class VocabTables:
    merges: np.ndarray  # int32 [n_merges, 2], rank order; ids past n_vocab are phantoms
    phantoms: list[str]  # SPM: characters inside tokens that are no token (ids n_vocab + k)


class CacheInvalid(ValueError):
    """A cache file that does not check out; the message says why."""


def cache_dir(home: Path | None = None) -> Path | None:
    """$LLAMAPY_TOKENIZER_CACHE (a folder; "0": no cache), else $LLAMAPY_HOME/tokenizers/."""
    env = os.environ.get("LLAMAPY_TOKENIZER_CACHE")
    if env:
        return None if env == "0" else Path(env)
    from ..pull import llamapy_home

    return llamapy_home(home) / "tokenizers"


@functools.lru_cache(maxsize=1)
def _code_version() -> str:
    import tokenizers

    from .. import __version__ as mine

    src = hashlib.sha256()
    for name in _SOURCES:
        src.update(Path(__file__).with_name(name).read_bytes())
    return f"format {FORMAT}; llamapy {mine}; tokenizers {tokenizers.__version__}; source {src.hexdigest()[:16]}"


def cache_key(f: GGUFFile) -> str:
    return hashlib.sha256(f"{_code_version()}\n{f.metadata_sha256()}".encode()).hexdigest()


def cache_path(f: GGUFFile, folder: Path) -> Path:
    return folder / f"{f.metadata_sha256()[:32]}.vocab"


def read_tables(path: Path, key: str, n_ids: int) -> VocabTables:
    """The tables in `path` if they carry `key` and check out; CacheInvalid otherwise
    (FileNotFoundError when there is no file).  n_ids: the number of token + phantom ids
    allowed is n_ids + len(phantoms)."""
    data = path.read_bytes()
    head = len(MAGIC) + 2 * 65
    if len(data) < head or not data.startswith(MAGIC):
        raise CacheInvalid(f"not a vocabulary cache ({len(data)} bytes)")
    got_key = data[len(MAGIC) : len(MAGIC) + 64].decode("ascii", "replace")
    if got_key != key:
        raise CacheInvalid("built by another llamapy / tokenizers version or from other metadata")
    digest = data[len(MAGIC) + 65 : len(MAGIC) + 129].decode("ascii", "replace")
    payload = memoryview(data)[head:]
    if hashlib.sha256(payload).hexdigest() != digest:
        raise CacheInvalid("payload checksum mismatch (corrupted or truncated)")
    nl = data.find(b"\n", head)
    if nl < 0:
        raise CacheInvalid("no header line")
    try:
        meta = json.loads(data[head:nl])
        n_merges, phantoms = int(meta["n_merges"]), [str(p) for p in meta["phantoms"]]
    except (ValueError, KeyError, TypeError) as e:
        raise CacheInvalid(f"unreadable header ({e})") from None
    raw = memoryview(data)[nl + 1 :]
    if len(raw) != n_merges * 8:
        raise CacheInvalid(f"{len(raw)} bytes of merges, expected {n_merges} x 8")
    merges = np.frombuffer(raw, dtype="<i4").reshape(n_merges, 2).astype(np.int32)
    if n_merges and (int(merges.min()) < 0 or int(merges.max()) >= n_ids + len(phantoms)):
        raise CacheInvalid(f"merge ids outside 0..{n_ids + len(phantoms) - 1}")
    return VocabTables(merges, phantoms)


def write_tables(path: Path, key: str, tables: VocabTables) -> None:
    """Write atomically (a temporary file renamed into place)."""
    meta = json.dumps({"n_merges": len(tables.merges), "phantoms": tables.phantoms}, ensure_ascii=True).encode()
    payload = meta + b"\n" + np.ascontiguousarray(tables.merges, dtype="<i4").tobytes()
    blob = MAGIC + key.encode() + b"\n" + hashlib.sha256(payload).hexdigest().encode() + b"\n" + payload
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as out:
            out.write(blob)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def cached_tables(f: GGUFFile, n_vocab: int, build: Callable[[], VocabTables],
                  folder: Path | None = None) -> tuple[VocabTables, str]:
    """The tables from the cache when valid, else built (and saved).  folder None: the
    default cache_dir(), for vocabularies of CACHE_MIN_VOCAB tokens or more.
    Returns the tables and what happened: "loaded", "built" (and saved) or "uncached"."""
    log = logger("llama_vocab")
    if folder is None:
        folder = cache_dir() if n_vocab >= CACHE_MIN_VOCAB else None
        if folder is None:
            return build(), "uncached"
    path, key = cache_path(f, folder), cache_key(f)
    try:
        return read_tables(path, key, n_vocab), "loaded"
    except FileNotFoundError:
        why = None
    except (CacheInvalid, OSError) as e:
        why = str(e)
    if why:
        log.warning(f"tokenizer cache {path} is not usable ({why}); rebuilding it")
    log.info(f"building the vocabulary tables of {n_vocab} tokens (once; cached in {path.parent})")
    t0 = time.perf_counter()
    tables = build()
    try:
        write_tables(path, key, tables)
    except OSError as e:
        log.warning(f"could not write the tokenizer cache {path} ({e}); the next load builds it again")
        return tables, "uncached"
    log.info(f"built {len(tables.merges)} merges in {time.perf_counter() - t0:.2f} s")
    return tables, "built"

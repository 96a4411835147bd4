"""The C harness (tests/c/kernel_check.c) checks each SIMD build of the kernels against the
portable build of the same source, kernel by kernel: natively for the x86 levels this CPU runs
(an AVX-512 build is still compiled where the CPU lacks AVX-512, and its run skipped with the
reason), and for ARM64 NEON (with and without the dot-product extension) cross-compiled with
aarch64-linux-gnu-gcc and run under qemu-aarch64 -- Python cannot load those libraries, the
harness can.  The two tools are Debian's gcc-aarch64-linux-gnu and qemu-user (.ci/run installs
them); without them the ARM checks are skipped, with that reason."""
from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

from llamapy.kernels.build import IsaError, compile_library, cpu_features, level_flags, load_kernels, resolve_level

HARNESS = Path(__file__).with_name("c") / "kernel_check.c"
ARM_CC, QEMU, ARM_SYSROOT = "aarch64-linux-gnu-gcc", "qemu-aarch64", "/usr/aarch64-linux-gnu"


def _run_harness(cmd: list[str]) -> str:
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, f"{' '.join(cmd)} (rc {r.returncode}):\n{r.stdout[-4000:]}\n{r.stderr[-2000:]}"
    assert r.stdout.rstrip().endswith("0 failed")
    assert r.stdout.count("ok   attention tiles") == 3  # the many-row attention checked too (attn_tiles.c)
    assert r.stdout.count("ok   attention over") == 4  # and the few-row one over block-typed KV caches
    assert "ok   argmax" in r.stdout and "ok   topk" in r.stdout  # the sampler's picks (api.c)
    return r.stdout


@pytest.fixture(scope="module")
def native_harness(tmp_path_factory) -> Path:
    cc = shutil.which("gcc") or shutil.which("cc")
    if cc is None:
        pytest.skip("no C compiler")
    exe = tmp_path_factory.mktemp("harness") / "kernel_check"
    subprocess.run([cc, "-O2", str(HARNESS), "-o", str(exe), "-ldl", "-lm"], check=True, timeout=300)
    return exe


@pytest.mark.parametrize("level", ["avx512", "avx2+vnni", "avx2"])
def test_x86_level_against_portable(native_harness, tmp_path, level):
    machine, feats = cpu_features()
    if machine not in ("x86_64", "amd64"):
        pytest.skip(f"{machine}: no x86 levels")
    try:
        resolve_level(level, machine, feats)
    except IsaError as e:  # compiled all the same: the source must build for the level
        compile_library(shutil.which("gcc") or "cc", level_flags(level, machine, feats), tmp_path / f"{level}.so")
        pytest.skip(f"{level} built but not run: {e}")
    lib, ref = load_kernels(level), load_kernels("scalar")
    assert lib is not None and ref is not None
    out = _run_harness([str(native_harness), str(lib.path), str(ref.path)])
    assert f"checking {lib.isa} against scalar" in out


@pytest.fixture(scope="module")
def arm_builds(tmp_path_factory) -> dict[str, Path]:
    missing = [t for t in (ARM_CC, QEMU) if shutil.which(t) is None]
    if missing:
        pytest.skip(f"{' and '.join(missing)} not installed (Debian: apt-get install gcc-aarch64-linux-gnu qemu-user)")
    d = tmp_path_factory.mktemp("arm")
    builds = {"neon": ["-march=armv8-a"], "neon+dotprod": ["-march=armv8.2-a+dotprod"], "scalar": ["-DLP_PORTABLE"]}
    out = {name: d / f"{name}.so" for name in builds}
    for name, flags in builds.items():
        compile_library(ARM_CC, flags, out[name])
    out["harness"] = d / "kernel_check"
    subprocess.run([ARM_CC, "-O2", str(HARNESS), "-o", str(out["harness"]), "-ldl", "-lm"], check=True, timeout=300)
    return out


@pytest.mark.slow
@pytest.mark.parametrize("level", ["neon", "neon+dotprod"])
def test_arm_neon_against_portable_under_qemu(arm_builds, level):
    cmd = [QEMU, "-L", ARM_SYSROOT, "-cpu", "max", str(arm_builds["harness"]), str(arm_builds[level]),
           str(arm_builds["scalar"])]
    out = _run_harness(cmd)
    assert f"checking {level} against scalar" in out

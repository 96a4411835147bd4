"""One ISA level, three libraries: what makes "same ISA level" true on both sides of a comparison.

llama.cpp is pinned to a level by how it was built (../shared/tools/build-llamacpp.sh with
LLAMACPP_ISA=<level> builds into llama.cpp/<LLAMACPP_BUILD[level]>/bin).  llamapy is pinned at
run time, and not only through its own kernels: its prefill GEMMs and the ops it leaves to
PyTorch run in PyTorch's libraries, which pick their own ISA from the CPU.  So a llamapy
process measured "at avx2" gets, before torch is imported (they are read once, at load):

  LLAMAPY_CPU_ISA        llamapy's kernels (kernels/build.py): native | avx512 | avx2 | scalar
  ATEN_CPU_CAPABILITY    ATen's vectorized CPU kernels (DispatchStub): avx512 | avx2 | default
                         ("default" is ATen's unvectorized build; unset = the best the CPU has)
  ONEDNN_MAX_CPU_ISA     oneDNN (torch's mkldnn: bf16 linear, conv): AVX512_CORE_BF16 | AVX2 |
                         SSE41 (its lowest); unset = every ISA it knows
  MKL_ENABLE_INSTRUCTIONS  MKL's sgemm: AVX512 | AVX2 | SSE4_2.  MKL honours it on Intel CPUs
                         only (Intel's documentation: "not available on non-Intel processors");
                         on AMD it is set for completeness and changes nothing.

"native" removes all four from the environment: every library picks the best the CPU has, as a
-march=native llama.cpp does.  `python benchmarks/isa_env.py [LEVEL]` prints the CPU line and
what each library reports at that level (ATen's capability, oneDNN's ISA line)."""
from __future__ import annotations

import os
import platform
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

LEVELS = ("native", "avx512", "avx2", "scalar")
# LLAMACPP_ISA -> the build folder build-llamacpp.sh writes (its `case $ISA`)
LLAMACPP_BUILD = {"native": "build", "avx2": "build-avx2", "avx512": "build-avx512", "scalar": "build-scalar"}
LLAMACPP_ROOT = Path.home() / ".cache/llamacpp-ref/llama.cpp"


@dataclass(frozen=True, slots=True)
class IsaEnv:
    """The environment variables that pin one level; None = removed (the library's own choice)."""

    level: str
    llamapy: str
    aten: str | None
    onednn: str | None
    mkl: str | None

    def apply(self, base: dict[str, str] | None = None) -> dict[str, str]:
        """A copy of `base` (default os.environ) with this level's variables set or removed."""
        env = dict(os.environ if base is None else base)
        for key, val in (("LLAMAPY_CPU_ISA", self.llamapy), ("ATEN_CPU_CAPABILITY", self.aten),
                         ("ONEDNN_MAX_CPU_ISA", self.onednn), ("MKL_ENABLE_INSTRUCTIONS", self.mkl)):
            env.pop(key, None)
            if val is not None:
                env[key] = val
        env.pop("DNNL_MAX_CPU_ISA", None)  # oneDNN's older spelling of ONEDNN_MAX_CPU_ISA
        return env

    def describe(self) -> str:
        parts = [f"LLAMAPY_CPU_ISA={self.llamapy}"]
        parts += [f"{k}={v}" for k, v in (("ATEN_CPU_CAPABILITY", self.aten), ("ONEDNN_MAX_CPU_ISA", self.onednn),
                                          ("MKL_ENABLE_INSTRUCTIONS", self.mkl)) if v is not None]
        return " ".join(parts)


def isa_env(level: str) -> IsaEnv:
    """The variables for `level` (native | avx512 | avx2 | scalar)."""
    if level == "native":
        return IsaEnv("native", "native", None, None, None)
    if level == "avx512":  # llama.cpp's avx512 build turns on VNNI and BF16 too: oneDNN's AVX512_CORE_BF16
        return IsaEnv("avx512", "avx512", "avx512", "AVX512_CORE_BF16", "AVX512")
    if level == "avx2":
        return IsaEnv("avx2", "avx2", "avx2", "AVX2", "AVX2")
    if level == "scalar":
        return IsaEnv("scalar", "scalar", "default", "SSE41", "SSE4_2")
    raise ValueError(f"--isa {level!r}: expected one of {', '.join(LEVELS)}")


def llamacpp_bin(level: str, root: Path = LLAMACPP_ROOT) -> Path:
    """Where build-llamacpp.sh puts the tools of `level`."""
    if level not in LLAMACPP_BUILD:
        raise ValueError(f"--isa {level!r}: expected one of {', '.join(LEVELS)}")
    return root / LLAMACPP_BUILD[level] / "bin"


def cpu_model() -> str:
    """The CPU as lscpu names it (Model name), with family/model/stepping where the name is as
    short as a hypervisor's "AMD EPYC", and its vector extensions: the line each table is titled with."""
    info: dict[str, str] = {}
    try:
        out = subprocess.run(["lscpu"], capture_output=True, text=True, timeout=10).stdout
        info = {k.strip(): v.strip() for k, _, v in (ln.partition(":") for ln in out.splitlines()) if v}
    except (OSError, subprocess.SubprocessError):
        pass
    flags = set(info.get("Flags", "").split())
    if not info.get("Model name") and Path("/proc/cpuinfo").is_file():
        for ln in Path("/proc/cpuinfo").read_text(errors="replace").splitlines():
            k, _, v = ln.partition(":")
            k = k.strip()
            if k in ("model name", "cpu family", "model", "stepping", "flags", "Features") and k not in info:
                info[{"model name": "Model name", "cpu family": "CPU family", "model": "Model",
                      "stepping": "Stepping"}.get(k, k)] = v.strip()
        flags = set((info.get("flags") or info.get("Features") or "").split())
    name = info.get("Model name") or platform.processor() or platform.machine()
    if len(name.split()) <= 3 and info.get("CPU family"):
        name += f" (family {info['CPU family']}, model {info.get('Model', '?')}, stepping {info.get('Stepping', '?')})"
    vec = [f for f in ("avx2", "fma", "f16c", "avx_vnni", "avx512f", "avx512_vnni", "avx512_bf16", "amx_bf16", "asimddp") if f in flags]
    cores = info.get("CPU(s)") or str(os.cpu_count() or "?")
    return f"{name}, {cores} CPUs" + (f", {' '.join(vec)}" if vec else "")


def _probe(level: str) -> str:
    """What torch's libraries report under `level`'s variables, from a fresh interpreter."""
    code = ("import torch\n"
            "x = torch.randn(1, 64, 32, 32); torch.nn.functional.conv2d(x, torch.randn(64, 64, 3, 3))  # goes to oneDNN\n"
            "print('aten', torch.backends.cpu.get_cpu_capability())\n")
    env = isa_env(level).apply()
    env["ONEDNN_VERBOSE"] = "1"
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=120)
    lines = [ln for ln in (r.stdout + r.stderr).splitlines() if ln.startswith("aten") or ",isa:" in ln]
    return "; ".join(ln.split(",isa:")[-1] if ",isa:" in ln else ln for ln in lines) or r.stderr[-500:]


if __name__ == "__main__":
    print(cpu_model())
    for lv in sys.argv[1:] or ["native"]:
        e = isa_env(lv)
        print(f"{lv}: {e.describe()}\n  torch reports: {_probe(lv)}\n  llama.cpp: {llamacpp_bin(lv)}")

"""What this host will run with, known without importing torch (`llamapy mem`): torch's
default thread count and whether llamapy's CPU kernels will be loaded.  Where torch is
already loaded, the answers are its own."""
from __future__ import annotations

import os
import sys


def torch_threads() -> int:
    """torch.get_num_threads() where torch is loaded; else what it will default to."""
    if "torch" in sys.modules:
        return sys.modules["torch"].get_num_threads()
    return default_torch_threads()


def default_torch_threads() -> int:
    """torch's default thread count, without importing it (`llamapy mem`): OMP_NUM_THREADS,
    else the physical cores this process may run on."""
    env = os.environ.get("OMP_NUM_THREADS", "")
    if env.isdigit() and int(env) > 0:
        return int(env)
    cpus = os.sched_getaffinity(0) if hasattr(os, "sched_getaffinity") else set(range(os.cpu_count() or 1))
    cores: set[tuple[str, str]] = set()
    try:
        cpu = phys = core = ""
        with open("/proc/cpuinfo") as fh:
            for line in list(fh) + [""]:
                k, _, v = line.partition(":")
                k, v = k.strip(), v.strip()
                if k == "processor":
                    cpu = v
                elif k == "physical id":
                    phys = v
                elif k == "core id":
                    core = v
                elif not k and cpu:
                    if cpu.isdigit() and int(cpu) in cpus:
                        cores.add((phys, core or cpu))
                    cpu = phys = core = ""
    except OSError:
        pass
    return max(1, len(cores) or len(cpus))


def kernels_expected() -> bool:
    """Whether the loader has llamapy's CPU kernels: load_kernels() itself where torch is
    loaded (it loads torch's OpenMP runtime before the library); without torch (`llamapy
    mem`), what load_kernels decides on: not turned off (LLAMAPY_KERNELS=0) and a C compiler
    to build them with."""
    if "torch" in sys.modules:
        from ..kernels import load_kernels

        return load_kernels() is not None
    return kernels_buildable()


def coarse_many_bf16_expected() -> bool:
    """Whether a bf16 CPU's coarse types take bf16 GEMMs for many rows: the loaded library's
    timed choice (kernels/calibrate.py) where torch is loaded; without torch (`llamapy mem`,
    which loads no library), LLAMAPY_COARSE_BF16's or the choice recorded beside the library
    by the process that first loaded it, and before any has, bf16 (whose buffers are the larger)."""
    if "torch" in sys.modules:
        from ..kernels import load_kernels

        lib = load_kernels()
        return lib is None or lib.coarse_many_bf16 or not lib.bf16
    from ..kernels.build import expected_library
    from ..kernels.calibrate import forced_coarse_bf16, recorded_choice

    on = forced_coarse_bf16()
    if on is None:
        library = expected_library()
        choice = recorded_choice(library) if library is not None else None
        on = True if choice is None else choice.many
    return on


def kernels_buildable() -> bool:
    """load_kernels()'s conditions, checked without loading anything."""
    import shutil

    if os.environ.get("LLAMAPY_KERNELS", "1") == "0":
        return False
    return bool(os.environ.get("CC") or shutil.which("gcc") or shutil.which("cc"))

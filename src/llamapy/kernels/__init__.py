"""llamapy's own CPU kernels (cpu_kernels.c, built on first use) and their torch-facing calls."""
from .build import KernelLib, load_kernels

__all__ = ["KernelLib", "load_kernels"]

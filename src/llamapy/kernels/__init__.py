"""llamapy's own CPU kernels (kernels/c/, built per ISA level on first use) and their torch-facing calls."""
from .build import load_kernels
from .lib import KernelLib

__all__ = ["KernelLib", "load_kernels"]

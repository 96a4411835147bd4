from .batch import Batch
from .allocator import BatchAllocator, BatchError, UBatch

__all__ = ["Batch", "BatchAllocator", "BatchError", "UBatch"]

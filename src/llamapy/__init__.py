"""llamapy: llama.cpp's inference runtime, rebuilt in Python on PyTorch."""

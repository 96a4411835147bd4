"""Measuring tools mirroring llama.cpp's: llama-bench (llama_bench.py), llama-batched-bench
(batched_bench.py) and llama-perplexity (perplexity.py), with llama.cpp's output formats."""

"""Speculative decoding: draft sources (speculative/proposer.py) and their parameters."""
from .proposer import SpecParams, Speculator, make_speculator

__all__ = ["SpecParams", "Speculator", "make_speculator"]

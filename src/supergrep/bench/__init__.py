"""Benchmarks that a user runs: ``supergrep bench train`` (training speed, MFU, memory, against a
naive loop and sentence-transformers), ``bench encode`` (index-time encoding); the FLOP model in
``flops``, the reference workloads in ``workloads``."""

"""Benchmarks that run ckpt side by side with peer checkpoint stores (see bench/README.md)."""

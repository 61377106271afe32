"""Triton kernels (the main GPU backend); each beside its torch reference in ../reference."""

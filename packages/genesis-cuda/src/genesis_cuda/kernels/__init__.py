"""Triton kernels of the CUDA backend, one module per family.

Each module exposes functions with the backend contract's signatures minus ``self``
(``elementwise.unary(op, a, out=None)``, ``reduction.sum(a, dims, keepdim, dtype)`` ...);
``genesis_cuda.backend`` finds them by name. Nothing is imported here, so that importing
one family does not compile or import the others.
"""

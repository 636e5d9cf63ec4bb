"""Triton kernels of the CUDA backend, one module per family.

Each module exposes functions with the backend contract's signatures minus ``self``
(``elementwise.unary(op, a, out=None)``, ``reduction.sum(a, dims, keepdim, dtype)`` ...), which
``genesis_cuda.backend`` calls as ``kernels.<family>.<name>``. A family is imported on its first
use (the module ``__getattr__`` below), not here: importing the plugin must not import Triton
before CUDA is used, and using one family does not compile or import the others. After that
first use the module is an ordinary attribute of this package, so later calls cost one
attribute lookup.
"""

from importlib import import_module

FAMILIES = ("add_rms_norm", "arg_reduction", "attention", "attention_backward",
            "attention_decode", "cross_entropy",
            "elementwise", "indexing", "layout", "matmul", "multi_tensor",
            "multi_tensor_copy", "norms", "optim",
            "random", "reduction", "rotary", "softmax", "sorting", "swiglu")


def __getattr__(name: str):
    if name in FAMILIES:
        return import_module(f"{__name__}.{name}")  # also binds it on this package
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")

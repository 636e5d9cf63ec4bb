"""What the matmul kernel families share: the per-plan direct launch, the tensor-core product
and how split-K chunks are sized.

* ``Direct``: one fixed specialisation of a jit kernel with a fixed grid, launched without
  Triton's per-call argument binding once compiled (a matmul plan's integers never change).
* Split-K: a product whose output tiles are too few to fill the GPU splits K into
  ``split`` chunks, one program per (tile, chunk), each writing its float32 partial sums to
  a workspace that is then added up in a fixed order (the same bits on every run, unlike
  float atomics); ``split_k`` sizes the chunks. The workspace comes from the caching
  allocator on every call, always the same size for a plan, so a CUDA graph can capture
  it. The reductions live with their kernels (``matmul``, ``matmul_small``).
"""

import triton
import triton.language as tl
from triton.runtime import driver as _driver

from . import _launch
from ._launch import DIRECT, INTERPRET, cdiv

REDUCE_BLOCK = 1024  # outputs per program of a split-K reduction
REDUCE_WARPS = 4


class Direct:
    """One fixed specialisation of a jit kernel with a fixed grid.

    The first call goes through Triton (compile, launch); later calls hand the arguments
    straight to the compiled kernel's launcher, skipping Triton's per-call argument binding
    (~8 us). That is valid because a plan's integer arguments never change, only its
    pointers, whose 16-byte alignment is part of the plan key. Under the Triton interpreter
    (CPU tests) every launch goes through Triton with the arrays seen as torch tensors.
    """

    __slots__ = ("fn", "grid", "kw", "tail", "entry")

    def __init__(self, fn, grid, kw):
        self.fn = fn
        self.grid = tuple(grid) + (1,) * (3 - len(grid))
        # constexprs and compile options; launch_pdl where PDL is true (see dependent_launch)
        self.kw = _launch.compile_options({**_launch.COMPILE_OPTIONS, **kw}, kw.get("PDL", False))
        self.tail = tuple(kw[n] for n in fn.arg_names if n in kw)  # constexprs, in order
        self.entry = None

    def __call__(self, *args):
        e = self.entry
        if e is not None:
            drv = _driver.active
            stream = drv.get_current_stream(drv.get_current_device())
            g = self.grid
            e[0](g[0], g[1], g[2], stream, *e[1], *args, *self.tail)
            return
        if INTERPRET:
            args = [_interpret(a) for a in args]
        compiled = self.fn[self.grid](*args, **self.kw)
        if DIRECT and not INTERPRET and compiled is not None:
            self.entry = _launch.direct_entry(compiled)


def _interpret(arg):
    """An operand as the Triton interpreter takes it: arrays as torch tensors (through the
    converter the test-suite installs), host tensor descriptors re-pointed at one."""
    if hasattr(arg, "data_ptr"):
        return _launch.interpret_arg(arg)
    base = getattr(arg, "base", None)
    if base is not None and hasattr(base, "data_ptr") and hasattr(arg, "block_shape"):
        from triton.tools.tensor_descriptor import TensorDescriptor

        return TensorDescriptor(_launch.interpret_arg(base), arg.shape, arg.strides,
                                arg.block_shape)
    return arg


if INTERPRET:
    # Triton's CPU interpreter multiplies bfloat16 tiles wrongly in tl.dot; products of
    # half-precision values are exact in float32, so widening first gives the GPU's result.
    @triton.jit
    def mma(a, b, acc, PREC: tl.constexpr, ACC: tl.constexpr):
        """``acc + a @ b`` (``tl.dot`` with input precision PREC, accumulator type ACC)."""
        return tl.dot(a.to(ACC), b.to(ACC), acc, input_precision=PREC, out_dtype=ACC)
else:
    @triton.jit
    def mma(a, b, acc, PREC: tl.constexpr, ACC: tl.constexpr):
        """``acc + a @ b`` (``tl.dot`` with input precision PREC, accumulator type ACC)."""
        return tl.dot(a, b, acc, input_precision=PREC, out_dtype=ACC)


def split_k(programs: int, k_tiles: int, min_tiles: int, target: int):
    """``(split, tiles_per_split)``: how many K-chunks bring ``programs`` output tiles up to
    ``target`` programs, each chunk at least ``min_tiles`` K-tiles long (fewer would spend
    more on the float32 partials than they save); no chunk is left empty."""
    split = max(1, min(cdiv(target, max(programs, 1)), k_tiles // max(min_tiles, 1)))
    per = cdiv(k_tiles, split)
    return cdiv(k_tiles, per), per

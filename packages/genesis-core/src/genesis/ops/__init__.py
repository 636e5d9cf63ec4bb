"""Device-agnostic ops: shape rules, promotion and autograd, calling backend kernels."""

import builtins

from genesis.ops.comparison import allclose, equal, isclose
from genesis.ops.conversion import clone, to, type_as
from genesis.ops.declared_reductions import all, amax, amin, any, argmax, argmin, prod, sum
from genesis.ops.dim_indexing import (
    bincount,
    gather,
    index_add,
    index_select,
    scatter,
    scatter_add,
)
from genesis.ops.elementwise import (
    FUNCTIONS as _DECLARED,
)
from genesis.ops.elementwise import (
    addcdiv,
    addcmul,
    clamp,
    clamp_max,
    clamp_min,
    clip,
    lerp,
    reciprocal,
    rsub,
    square,
    where,
)
from genesis.ops.fused import layer_norm, log_softmax, rms_norm, softmax
from genesis.ops.indexing import (
    argwhere,
    masked_fill,
    masked_select,
    nonzero,
    one_hot,
)
from genesis.ops.joining import (
    cat,
    chunk,
    concat,
    concatenate,
    flip,
    fliplr,
    flipud,
    hstack,
    repeat_interleave,
    roll,
    split,
    stack,
    tensor_split,
    tile,
    tril,
    triu,
    vstack,
)
from genesis.ops.linalg import bmm, dot, ger, matmul, mm, outer
from genesis.ops.reduction import (
    count_nonzero,
    cumsum,
    logsumexp,
    max,
    mean,
    min,
    norm,
    std,
    std_mean,
    var,
    var_mean,
)
from genesis.ops.reshaping import contiguous, reshape, view
from genesis.ops.sorting import argsort, kthvalue, msort, sort, topk
from genesis.ops.special import erfinv
from genesis.ops.strided import as_strided, narrow, select, unbind
from genesis.ops.views import (
    broadcast_to,
    expand,
    flatten,
    moveaxis,
    movedim,
    permute,
    ravel,
    squeeze,
    swapaxes,
    swapdims,
    t,
    transpose,
    unflatten,
    unsqueeze,
)

globals().update(_DECLARED)  # genesis.exp, genesis.add ...: see genesis.op_declarations

__all__ = [name for name, obj in dict(globals()).items()
           if not name.startswith("_") and not isinstance(obj, type(builtins))]

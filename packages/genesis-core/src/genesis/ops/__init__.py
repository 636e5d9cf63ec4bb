"""Device-agnostic ops: shape rules, promotion and autograd, calling backend kernels."""

import builtins

from genesis.ops.conversion import clone, to, type_as
from genesis.ops.elementwise import (
    abs, add, addcdiv, addcmul, atan2, bitwise_and, bitwise_not, bitwise_or, bitwise_xor, ceil, clamp,
    clamp_max, clamp_min, clip, cos, div, divide, eq, equal, erf, exp, exp2, expm1, floor,
    floor_divide, ge, greater, greater_equal, gt, isfinite, isinf, isnan, le, lerp, less,
    less_equal, log, log1p, log2, logical_and, logical_not, logical_or, logical_xor, lt,
    maximum, minimum, mul, multiply, ne, neg, not_equal, pow, reciprocal, relu, remainder,
    round, rsqrt, rsub, sigmoid, sign, sin, sqrt, square, sub, subtract, tanh, true_divide,
    where,
)
from genesis.ops.fused import layer_norm, log_softmax, rms_norm, softmax
from genesis.ops.indexing import (
    argwhere, gather, index_add, index_select, masked_fill, masked_select, nonzero, one_hot,
    scatter, scatter_add,
)
from genesis.ops.joining import (
    cat, chunk, concat, concatenate, flip, fliplr, flipud, hstack, repeat_interleave, roll,
    split, stack, tensor_split, tile, tril, triu, vstack,
)
from genesis.ops.linalg import bmm, dot, ger, matmul, mm, outer
from genesis.ops.reduction import (
    all, amax, amin, any, argmax, argmin, count_nonzero, cumsum, logsumexp, max, mean, min,
    norm, prod, std, std_mean, sum, var, var_mean,
)
from genesis.ops.sorting import argsort, kthvalue, msort, sort, topk
from genesis.ops.views import (
    as_strided, broadcast_to, contiguous, expand, flatten, movedim, moveaxis, narrow,
    permute, ravel, reshape, select, squeeze, swapaxes, swapdims, t, transpose, unbind,
    unflatten, unsqueeze, view,
)

__all__ = [name for name, obj in dict(globals()).items()
           if not name.startswith("_") and not isinstance(obj, type(builtins))]

"""Random sampling: tensors of random draws (``rand``, ``randn``, ``randint``, ``randperm``,
``normal``, ``bernoulli`` and their ``*_like`` forms) and the in-place fills behind them
(``Tensor.uniform_``, ``normal_``, ``random_``). Generators and seeding are in
``genesis.random``."""

from __future__ import annotations

import math

from genesis import dtypes as D
from genesis.autograd.function import check_inplace
from genesis.creation import full_like
from genesis.device import placement
from genesis.dispatch import registered_op
from genesis.ops.common import shape_arg, wrap
from genesis.random import resolve_generator
from genesis.tensor import Tensor


def _random_fill(shape, dtype, device, fill) -> Tensor:
    dev = placement(device)
    dtype = dtype or D.get_default_dtype()
    out = wrap(dev.backend.empty(shape, dtype, dev.index), dev)
    fill(out)
    return out


@registered_op("rand")
def rand(*size, generator=None, dtype=None, device=None, requires_grad=False) -> Tensor:
    """Uniform samples from [0, 1).

    Args:
        *size: the shape: ints, or one tuple or list of ints.
        generator: the random-number generator to draw from; the device's default when None.
        dtype: the element type; the default float dtype when None.
        device: where to make it; the default device (``get_default_device()``) when None.
        requires_grad: whether autograd records operations on the result.

    Returns:
        A new tensor of samples.
    """
    t = _random_fill(shape_arg(size), dtype, device, lambda o: o.uniform_(0, 1,
                                                                         generator=generator))
    return t.requires_grad_() if requires_grad else t


@registered_op("randn")
def randn(*size, generator=None, dtype=None, device=None, requires_grad=False) -> Tensor:
    """Standard normal samples.

    Args:
        *size: the shape: ints, or one tuple or list of ints.
        generator: the random-number generator to draw from; the device's default when None.
        dtype: the element type; the default float dtype when None.
        device: where to make it; the default device (``get_default_device()``) when None.
        requires_grad: whether autograd records operations on the result.

    Returns:
        A new tensor of samples.
    """
    t = _random_fill(shape_arg(size), dtype, device, lambda o: o.normal_(0, 1,
                                                                        generator=generator))
    return t.requires_grad_() if requires_grad else t


@registered_op("rand_like")
def rand_like(input: Tensor, *, dtype=None, device=None) -> Tensor:
    """Uniform random numbers in ``[0, 1)`` with the shape of ``input``.

    Args:
        input: the tensor whose shape (and, by default, dtype and device) is used.
        dtype: the result's dtype (a floating dtype); ``input.dtype`` when None.
        device: the result's device; ``input.device`` when None.

    Returns:
        A new tensor of ``input.shape`` drawn from the default generator.
    """
    return rand(input.shape, dtype=dtype or input.dtype, device=device or input.device)


@registered_op("randn_like")
def randn_like(input: Tensor, *, dtype=None, device=None) -> Tensor:
    """Standard normal random numbers with the shape of ``input``.

    Args:
        input: the tensor whose shape (and, by default, dtype and device) is used.
        dtype: the result's dtype (a floating dtype); ``input.dtype`` when None.
        device: the result's device; ``input.device`` when None.

    Returns:
        A new tensor of ``input.shape`` drawn from the default generator.
    """
    return randn(input.shape, dtype=dtype or input.dtype, device=device or input.device)


@registered_op("randint")
def randint(low, high=None, size=None, *, generator=None, dtype=None, device=None) -> Tensor:
    """Uniform integers in ``[low, high)`` (``randint(high, size)`` starts at 0).

    Args:
        low: the lowest value (or, with two arguments, ``high``).
        high: one above the highest value.
        size: the shape.
        generator: the random-number generator to draw from; the device's default when None.
        dtype: the element type; int64 when None.
        device: where to make it; the default device (``get_default_device()``) when None.

    Returns:
        A new tensor of samples.
    """
    if size is None:
        low, high, size = 0, low, high
    if high is None or size is None:
        raise TypeError("randint() needs high and size")
    if low >= high:
        raise RuntimeError(f"random_ expects 'from' to be less than 'to', but got from={low} "
                           f">= to={high}")
    dev = placement(device)
    out = wrap(dev.backend.empty(shape_arg((size,) if isinstance(size, int) else size),
                                 dtype or D.int64, dev.index), dev)
    dev.backend.random_(out._data, int(low), int(high), resolve_generator(generator, dev))
    return out


@registered_op("randint_like")
def randint_like(input: Tensor, low, high=None, *, dtype=None) -> Tensor:
    """Uniform random integers in ``[low, high)`` with the shape of ``input``.

    ``randint_like(input, high)`` starts at 0, as torch's.

    Args:
        input: the tensor whose shape, dtype (by default) and device are used.
        low: the lowest value (inclusive), or ``high`` when ``high`` is None.
        high: one above the highest value.
        dtype: the result's dtype; ``input.dtype`` when None.

    Returns:
        A new tensor of ``input.shape`` on ``input.device``.
    """
    if high is None:
        low, high = 0, low
    return randint(low, high, input.shape, dtype=dtype or input.dtype, device=input.device)


@registered_op("randperm")
def randperm(n: int, *, generator=None, dtype=None, device=None) -> Tensor:
    """A random permutation of ``0..n-1``.

    Args:
        n: the number of values.
        generator: the random-number generator to draw from; the device's default when None.
        dtype: the element type; int64 when None.
        device: where to make it; the default device (``get_default_device()``) when None.

    Returns:
        A new 1-d tensor.
    """
    dev = placement(device)
    gen = resolve_generator(generator, dev)
    return wrap(dev.backend.randperm(int(n), dtype or D.int64, dev.index, gen), dev)


@registered_op("normal")
def normal(mean, std, size=None, *, generator=None, dtype=None, device=None) -> Tensor:
    """Normal samples with the given mean and std (numbers with ``size``, or tensors).

    Args:
        mean: the mean (a number or a tensor).
        std: the standard deviation (a number or a tensor).
        size: the shape when ``mean`` and ``std`` are numbers.
        generator: the random-number generator to draw from; the device's default when None.
        dtype: the element type; the default float dtype when None.
        device: where to make it; the default device (``get_default_device()``) when None.

    Returns:
        A new tensor of samples.
    """
    if isinstance(mean, Tensor) or isinstance(std, Tensor):
        ref = mean if isinstance(mean, Tensor) else std
        return randn(ref.shape if size is None else size, generator=generator,
                     dtype=ref.dtype, device=ref.device) * std + mean
    if size is None:
        raise TypeError("normal() with float mean and std needs size")
    t = _random_fill(shape_arg((size,) if isinstance(size, int) else size), dtype, device,
                     lambda o: o.normal_(mean, std, generator=generator))
    return t


@registered_op("bernoulli")
def bernoulli(input: Tensor, p=None, *, generator=None) -> Tensor:
    """0/1 samples with probability ``input`` (or ``p``) of a one.

    Args:
        input: probabilities of a one, in [0, 1].
        p: a probability used instead of ``input``'s values (then ``input`` gives only
            the shape).
        generator: the random-number generator to draw from; the device's default when None.

    Returns:
        A new tensor of ``input``'s shape and dtype holding 0s and 1s.
    """
    probs = input if p is None else full_like(input, p)
    return (rand(input.shape, generator=generator, dtype=probs.dtype,
                 device=input.device) < probs).to(input.dtype)


def _check_finite(name: str, *values) -> None:
    for v in values:
        if not math.isfinite(v):
            raise RuntimeError(f"{name} expects finite parameters, got {v}")


@registered_op("uniform_")
def uniform_(t: Tensor, a: float = 0.0, b: float = 1.0, *, generator=None) -> Tensor:
    """Fill ``t`` in place with U[a, b) samples."""
    _check_finite("uniform_", a, b)
    if a > b:
        raise RuntimeError(f"uniform_ expects to return a [from, to) range, but found from={a} "
                           f"> to={b}")
    _random_check(t, "uniform_")
    t._backend.uniform_(t._data, float(a), float(b), resolve_generator(generator, t.device))
    t._version_box[0] += 1
    return t


@registered_op("normal_")
def normal_(t: Tensor, mean: float = 0.0, std: float = 1.0, *, generator=None) -> Tensor:
    """Fill ``t`` in place with N(mean, std²) samples."""
    _check_finite("normal_", mean, std)
    if std < 0:
        raise RuntimeError(f"normal expects std >= 0.0, but found std {std}")
    _random_check(t, "normal_")
    t._backend.normal_(t._data, float(mean), float(std), resolve_generator(generator, t.device))
    t._version_box[0] += 1
    return t


@registered_op("random_")
def random_(t: Tensor, low: int = 0, high: int | None = None, *, generator=None) -> Tensor:
    """Fill ``t`` in place with integers in ``[low, high)``."""
    if high is None:
        low, high = 0, low
    t._backend.random_(t._data, int(low), int(high), resolve_generator(generator, t.device))
    t._version_box[0] += 1
    return t


def _random_check(t: Tensor, op: str) -> None:
    if not t.dtype.is_floating_point:
        raise TypeError(f"{op} is only implemented for floating types, got {t.dtype}")
    check_inplace(t)


@registered_op("multinomial")
def multinomial(input: Tensor, num_samples: int, replacement: bool = False, *,
                generator=None) -> Tensor:
    """Category indices drawn from the (unnormalised) probabilities in each row of ``input``.

    With replacement every draw inverts the row's cumulative distribution at a uniform
    number; without replacement the ``num_samples`` largest of ``log(p) - log(E)`` (``E``
    standard exponential: the Gumbel top-k trick) are taken, which draws categories one
    after another in proportion to the probability left. Both are compositions of genesis
    ops, so they run on every backend. The streams differ from torch's: a seed gives the
    same indices in genesis every time, not the indices torch draws from that seed.

    Args:
        input: a 1-d (categories) or 2-d (rows, categories) floating tensor of
            non-negative weights; each row needs a positive sum.
        num_samples: draws per row (at most the number of categories without replacement).
        replacement: whether a category can be drawn more than once.
        generator: the random-number generator to draw from; the device's default when None.

    Returns:
        An int64 tensor of shape ``(num_samples,)`` or ``(rows, num_samples)``.

    Example:
        >>> probs = genesis.softmax(logits[:, -1, :], dim=-1)
        >>> next_token = genesis.multinomial(probs, num_samples=1)   # (B, 1)
    """
    if input.ndim not in (1, 2):
        raise RuntimeError(f"prob_dist must be 1 or 2 dim, got a tensor of shape "
                           f"{tuple(input.shape)}")
    if not input.dtype.is_floating_point:
        raise RuntimeError(f"multinomial only supports floating-point dtypes for input, "
                           f"got: {input.dtype}")
    num_samples = int(num_samples)
    if num_samples <= 0:
        raise RuntimeError(f"cannot sample n_sample <= 0 samples (num_samples={num_samples})")
    categories = input.shape[-1]
    if not replacement and num_samples > categories:
        raise RuntimeError(f"cannot sample n_sample > prob_dist.size(-1) samples without "
                           f"replacement (num_samples={num_samples}, categories={categories})")
    if categories == 0:
        raise RuntimeError("multinomial: prob_dist has no categories (its last dim is 0)")
    probs = input.detach().reshape(-1, categories)  # (R, C)
    probs = probs if input.dtype is D.float64 else probs.to(D.float32)
    if probs.shape[0] == 0:
        return probs.new_zeros((0, num_samples), dtype=D.int64)
    _check_distribution(probs)
    if replacement:
        out = _draw_with_replacement(probs, num_samples, generator)
    else:
        out = _draw_without_replacement(probs, num_samples, generator)
    return out.reshape(num_samples) if input.ndim == 1 else out


def _check_distribution(probs: Tensor) -> None:
    """torch's checks of the rows (it reads them on the host too, on the CPU)."""
    if not bool((probs.isfinite() & (probs >= 0)).all()):
        raise RuntimeError("probability tensor contains either `inf`, `nan` or element < 0")
    if not bool((probs.sum(-1) > 0).all()):
        raise RuntimeError("invalid multinomial distribution (sum of probabilities <= 0)")


def _draw_with_replacement(probs: Tensor, num_samples: int, generator) -> Tensor:
    cdf = probs.cumsum(-1)  # (R, C)
    total = cdf[:, -1:]  # (R, 1)
    u = rand((probs.shape[0], num_samples), generator=generator, dtype=probs.dtype,
             device=probs.device) * total  # (R, S), in [0, total)
    # (R, S): how many categories the draw passed; counted in the float dtype, exact below
    # 2**24 categories (torch's limit too), as float sums run on every backend
    passed = (cdf.unsqueeze(1) <= u.unsqueeze(2)).to(probs.dtype).sum(-1)
    # u * total may round up to total: such a draw belongs to the last category with weight
    last = probs.shape[1] - 1 - (probs > 0).to(probs.dtype).flip(-1).argmax(-1, keepdim=True)
    return passed.to(D.int64).minimum(last)


def _draw_without_replacement(probs: Tensor, num_samples: int, generator) -> Tensor:
    u = rand(probs.shape, generator=generator, dtype=probs.dtype, device=probs.device)
    # (R, C) standard exponential draws; u == 0 would give 0 and an infinite key (a nan one
    # where p == 0, which topk would rank first), so they are kept above float32's tiny
    exponential = (-(1 - u).log()).clamp_min(1e-37)
    keys = probs.log() - exponential.log()  # log(p) + Gumbel noise; -inf where p == 0
    return keys.topk(num_samples, dim=-1).indices

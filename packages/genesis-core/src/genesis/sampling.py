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
from genesis.ops.common import shape_arg, wrap
from genesis.random import resolve_generator
from genesis.tensor import Tensor


def _random_fill(shape, dtype, device, fill) -> Tensor:
    dev = placement(device)
    dtype = dtype or D.get_default_dtype()
    out = wrap(dev.backend.empty(shape, dtype, dev.index), dev)
    fill(out)
    return out


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


def normal_(t: Tensor, mean: float = 0.0, std: float = 1.0, *, generator=None) -> Tensor:
    """Fill ``t`` in place with N(mean, std²) samples."""
    _check_finite("normal_", mean, std)
    if std < 0:
        raise RuntimeError(f"normal expects std >= 0.0, but found std {std}")
    _random_check(t, "normal_")
    t._backend.normal_(t._data, float(mean), float(std), resolve_generator(generator, t.device))
    t._version_box[0] += 1
    return t


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

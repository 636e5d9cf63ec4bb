"""Activation checkpointing: trade compute for memory by re-running a block in backward.

``checkpoint(fn, *args)`` runs ``fn`` without recording a graph, so none of its
intermediate activations are kept: only ``args`` are saved. When the backward pass reaches
the block, ``fn`` runs again on the saved inputs with gradients on, from the random-number
state it first ran with (so dropout draws the same masks), and its own backward runs there,
accumulating into the parameters it uses and handing back the inputs' gradients.

Genesis has one mechanism for both of torch's variants (``use_reentrant``): the block is a
single autograd node whose backward re-runs it (torch's reentrant design). Parameters used
inside get their gradients through ``.grad`` (``backward()``); ``genesis.autograd.grad``
can differentiate with respect to the block's inputs, not its parameters.
"""

from __future__ import annotations

import contextlib
import warnings
from collections.abc import Callable
from typing import Any

import genesis
from genesis.autograd import Function
from genesis.nn import Sequential
from genesis.random import default_generator_for

__all__ = ["checkpoint", "checkpoint_sequential"]


class _Block:
    """What the checkpoint node keeps besides the inputs: the function, its keyword
    arguments, the RNG states and autocast state it first ran with, and where the
    non-tensor outputs go."""

    def __init__(self, function: Callable, kwargs: dict, preserve_rng_state: bool) -> None:
        self.function, self.kwargs = function, kwargs
        self.preserve_rng_state = preserve_rng_state
        self.rng_states: list = []
        self.autocast: list = []
        self.structure: Any = None  # the outputs, tensors replaced by their position


class _CheckpointFunction(Function):
    @staticmethod
    def forward(ctx, block: _Block, anchor, *args):
        devices = [genesis.device("cpu")] + list(dict.fromkeys(
            a.device for a in args if isinstance(a, genesis.Tensor) and a.device.type != "cpu"))
        if block.preserve_rng_state:
            block.rng_states = [(d, d.backend.get_generator_state(default_generator_for(d)))
                                for d in devices]
        block.autocast = [(d.type, genesis.get_autocast_dtype(d.type))
                          for d in devices if genesis.is_autocast_enabled(d.type)]
        ctx.block = block
        # per argument: the tensor's requires_grad (the tensor itself is saved), or the
        # non-tensor value, passed again as it is
        ctx.layout = [(True, a.requires_grad) if isinstance(a, genesis.Tensor) else (False, a)
                      for a in args]
        ctx.save_for_backward(*[a for a in args if isinstance(a, genesis.Tensor)])
        outputs = block.function(*args, **block.kwargs)  # (apply records nothing inside)
        tensors, block.structure = _flatten(outputs)
        return tensors[0] if block.structure is None else tuple(tensors)

    @staticmethod
    def backward(ctx, *grads):
        block = ctx.block
        saved = iter(ctx.saved_tensors)
        inputs = [next(saved).detach().requires_grad_(value) if is_tensor else value
                  for is_tensor, value in ctx.layout]
        with _replay_rng(block), _replay_autocast(block), genesis.enable_grad():
            outputs = block.function(*inputs, **block.kwargs)
        tensors, _ = _flatten(outputs)
        pairs = [(t, g) for t, g in zip(tensors, grads)
                 if t.requires_grad and g is not None]
        if pairs:
            genesis.autograd.backward([t for t, _ in pairs], [g for _, g in pairs])
        input_grads = tuple(x.grad if isinstance(x, genesis.Tensor) and x.requires_grad
                            else None for x in inputs)
        return (None, None) + input_grads


def _flatten(outputs) -> tuple[list, Any]:
    """The tensors among ``outputs`` (a tensor, or a tuple or list holding some) and the
    structure to rebuild it from them (None: a lone tensor)."""
    if isinstance(outputs, genesis.Tensor):
        return [outputs], None
    if not isinstance(outputs, (tuple, list)):
        raise TypeError(f"checkpoint: the function must return a Tensor or a tuple or list "
                        f"of values, got {type(outputs).__name__}")
    tensors, structure = [], []
    for value in outputs:
        if isinstance(value, genesis.Tensor):
            structure.append(len(tensors))
            tensors.append(value)
        else:
            structure.append(_Constant(value))
    if not tensors:
        raise TypeError("checkpoint: the function returned no Tensor")
    return tensors, (type(outputs), structure)


class _Constant:
    """A non-tensor output, carried through unchanged."""

    def __init__(self, value) -> None:
        self.value = value


def _unflatten(result, structure):
    if structure is None:
        return result
    kind, items = structure
    tensors = result if isinstance(result, tuple) else (result,)
    return kind(item.value if isinstance(item, _Constant) else tensors[item] for item in items)


@contextlib.contextmanager
def _replay_rng(block: _Block):
    """Run the recomputation from the forward's RNG states; the callers' streams are
    left as they were."""
    if not block.preserve_rng_state:
        yield
        return
    with genesis.fork_rng(devices=[d for d, _ in block.rng_states if d.type != "cpu"]):
        for device, state in block.rng_states:
            device.backend.set_generator_state(default_generator_for(device), state)
        yield


@contextlib.contextmanager
def _replay_autocast(block: _Block):
    with contextlib.ExitStack() as stack:
        for device_type, dtype in block.autocast:
            stack.enter_context(genesis.autocast(device_type, dtype))
        yield


def checkpoint(function: Callable, *args, use_reentrant: bool | None = None,
               preserve_rng_state: bool = True, **kwargs):
    """Run ``function(*args, **kwargs)`` keeping no activations; re-run it in backward.

    Args:
        function: the block to run (a module or any function of tensors). It must do the
            same thing when run again (no side effects that change its result).
        *args: its positional arguments; tensors among them are saved for the re-run.
        use_reentrant: torch's choice between two implementations; genesis has one and
            accepts both values. As in torch, ``True`` and ``None`` (its default) refuse
            keyword arguments for ``function``, and then the block's parameters get
            gradients only when some input requires grad.
        preserve_rng_state: re-run from the random state of the first run, so random ops
            (dropout) draw the same numbers (CPU and the inputs' devices).
        **kwargs: keyword arguments for ``function`` (with ``use_reentrant=False``).

    Returns:
        What ``function`` returns (a tensor, or a tuple or list of values).

    Example:
        >>> h = genesis.utils.checkpoint.checkpoint(block, x, use_reentrant=False)
        >>> h.sum().backward()        # block's activations are recomputed here
    """
    if kwargs and use_reentrant is not False:
        raise ValueError("Unexpected keyword arguments: " + ",".join(kwargs))
    if not genesis.is_grad_enabled():  # nothing will call backward: just run it
        return function(*args, **kwargs)
    if use_reentrant is False:
        # A leaf that requires grad makes the node record even when no input requires
        # grad, so the parameters inside still get gradients (as torch's non-reentrant).
        anchor = genesis.empty(0, requires_grad=True)
    elif any(isinstance(a, genesis.Tensor) and a.requires_grad for a in args):
        anchor = None
    else:
        warnings.warn("None of the inputs have requires_grad=True. Gradients will be None",
                      stacklevel=2)
        with genesis.no_grad():
            return function(*args)
    block = _Block(function, kwargs, preserve_rng_state)
    result = _CheckpointFunction.apply(block, anchor, *args)
    return _unflatten(result, block.structure)


def checkpoint_sequential(functions, segments: int, input, use_reentrant: bool | None = None,
                          **kwargs):
    """Run a sequence of modules in ``segments`` chunks, checkpointing all but the last.

    Args:
        functions: a ``genesis.nn.Sequential`` or a list of modules or functions, run in
            order, each on the previous one's output.
        segments: how many chunks to cut the sequence into.
        input: the first function's input (a tensor).
        use_reentrant: as in ``checkpoint``.
        **kwargs: only ``preserve_rng_state`` (as in ``checkpoint``).

    Returns:
        The last function's output.

    Example:
        >>> model = genesis.nn.Sequential(*[genesis.nn.Linear(64, 64) for _ in range(8)])
        >>> out = checkpoint_sequential(model, 4, x, use_reentrant=False)
    """
    preserve = kwargs.pop("preserve_rng_state", True)
    if kwargs:
        raise ValueError("Unexpected keyword arguments: " + ",".join(kwargs))
    if isinstance(functions, Sequential):
        functions = list(functions.children())
    functions = list(functions)
    if segments <= 0:
        raise ValueError(f"checkpoint_sequential: segments must be positive, got {segments}")

    def run(start: int, end: int) -> Callable:
        def forward(x):
            for fn in functions[start:end]:
                x = fn(x)
            return x
        return forward

    size = len(functions) // segments
    end = 0
    for start in range(0, size * (segments - 1), size):
        end = start + size
        input = checkpoint(run(start, end), input, use_reentrant=use_reentrant,
                           preserve_rng_state=preserve)
    return run(end, len(functions))(input)

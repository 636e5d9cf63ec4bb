"""``Function``: an op with its forward and backward side by side, and the graph nodes.

Calling ``SomeFunction.apply(*args)`` is the dispatcher: it hands the call to the active
``genesis.dispatch`` modes, applies autocast, runs ``forward`` without recording, then — if
grad mode is on and an input requires grad — makes a ``Node`` (which is also the ``ctx``
``forward`` saw) and hangs it on the floating outputs as their ``grad_fn``. Each Function is
an op of the registry (``genesis.dispatch.REGISTRY``) under its snake-case name.
"""

from __future__ import annotations

from types import MappingProxyType

from genesis.autograd import grad_mode
from genesis.autograd.back_references import (
    AccumulateGrad,
    SavedWithOutputs,
    hold_outputs_weakly,
)
from genesis.autograd.grad_mode import _state as _grad_state
from genesis.dispatch import OpHandle, intercept, op_name_of, register
from genesis.dispatch import _modes as _intercepting


class Node:
    """A recorded op in the graph: the ``ctx`` of ``forward`` and the ``grad_fn`` of its outputs.

    Each Function has its own subclass, ``<Function>Backward`` (``Function._backward_cls``,
    made with the Function, as torch's), whose ``_fn`` is the Function: making a node runs
    no ``__init__``.

    Attributes:
        next_functions: per forward input, ``(node, output_index)`` or ``None``.
        needs_input_grad: per forward input, whether a gradient is wanted.
    """

    # Class-level defaults: a node sets only what its op uses (recording an op is on the
    # host path of every training step). The hook tables are read-only until one is added.
    next_functions: tuple = ()
    needs_input_grad: tuple = ()
    _saved: tuple | None = None
    _saved_versions: tuple = ()
    _hooks = MappingProxyType({})  # output index -> hooks on that output's grad
    _post_hooks: tuple = ()
    _n_outputs = 1
    _output_meta: tuple = ()  # (shape, dtype, device) per output, for zero grads
    _dirty: tuple = ()
    _non_differentiable: tuple = ()
    materialize_grads = True
    _fn: type  # the Function, a class attribute of each Function's node class

    # -- ctx API used inside forward/backward
    def save_for_backward(self, *tensors) -> None:
        """Keep tensors for backward; editing one in place before backward is an error."""
        self._saved = tensors
        for t in tensors:
            if t is not None:  # (nothing but None, as add saves: the class's () stays)
                self._saved_versions = tuple([None if t is None else t._version_box[0]
                                              for t in tensors])
                return

    @property
    def saved_tensors(self) -> tuple:
        """The tensors given to ``save_for_backward``, checked against in-place edits."""
        saved = self._saved
        if saved is None:
            raise RuntimeError(
                "Trying to backward through the graph a second time (or directly access saved "
                "tensors after they have already been freed). Saved intermediate values of the "
                "graph are freed when you call .backward() or autograd.grad(). Specify "
                "retain_graph=True if you need to backward through the graph a second time.")
        for t, version in zip(saved, self._saved_versions):
            if t is not None and t._version_box[0] != version:
                raise RuntimeError(
                    "one of the variables needed for gradient computation has been modified by "
                    f"an inplace operation: [{t.dtype} {list(t.shape)}], which is output 0 of "
                    f"{self.name()}, is at version {t._version_box[0]}; expected version "
                    f"{version} instead.")
        if type(saved) is SavedWithOutputs:  # (a saved output held weakly: connect_saving)
            return saved.unpack(self)
        return saved

    def saved_values(self) -> tuple:
        """The saved tensors (outputs unpacked: see ``SavedOutput``) without the in-place
        check, for what inspects a graph (``genesis.autograd.saved``, the compiler's
        tracer); ``()`` once freed."""
        saved = self._saved
        return saved.unpack(self) if type(saved) is SavedWithOutputs else saved or ()

    def mark_dirty(self, *tensors) -> None:
        """Declare inputs that ``forward`` modified in place."""
        self._dirty = tensors

    def mark_non_differentiable(self, *tensors) -> None:
        """Declare outputs that never get a gradient (e.g. indices)."""
        self._non_differentiable = tensors

    def set_materialize_grads(self, value: bool) -> None:
        """Whether missing output grads reach backward as zeros (True) or None."""
        self.materialize_grads = value

    # -- graph API
    def name(self) -> str:
        return f"{self._fn.__name__}Backward"

    def register_hook(self, hook):
        """Call ``hook(grad_inputs, grad_outputs)`` after this node's backward runs."""
        if "_post_hooks" not in self.__dict__:
            self._post_hooks = []
        self._post_hooks.append(hook)
        return _RemovableHandle(self._post_hooks, hook)

    def hooks_at(self, idx: int) -> list:
        """The (mutable) list of hooks on output ``idx``'s gradient."""
        if "_hooks" not in self.__dict__:
            self._hooks = {}
        return self._hooks.setdefault(idx, [])

    def release(self) -> None:
        """Free saved tensors (after a backward without ``retain_graph``)."""
        # A node that saved no tensor (add, neg, ...) can run again, as in torch
        saved = self._saved
        if saved is not None:
            for t in saved:
                if t is not None:
                    self._saved = None
                    return

    def apply_backward(self, grads: tuple) -> tuple:
        backward = self._fn.backward  # (fixed arity for one gradient: see the engine's)
        result = backward(self, grads[0]) if len(grads) == 1 else backward(self, *grads)
        if not isinstance(result, tuple):
            result = (result,)
        return result

    def __repr__(self) -> str:
        return f"<{self.name()} object at {id(self):#x}>"


class _RemovableHandle:
    """Returned by ``register_hook``: ``handle.remove()`` unregisters the hook."""

    def __init__(self, hooks: list, hook):
        self._hooks, self._hook = hooks, hook

    def remove(self) -> None:
        if self._hook in self._hooks:
            self._hooks.remove(self._hook)


def grad_edge(t):
    """The ``(node, output_index)`` a gradient for tensor ``t`` flows into."""
    if t.grad_fn is not None:
        if t._base is not None and t.__dict__.get("_view_version", t._version_box[0]) \
                != t._version_box[0]:
            _regenerate_view_history(t)
        return (t.grad_fn, t._out_idx)
    try:
        return t._leaf_edge
    except AttributeError:  # the leaf's first graph: its edge is made once, for every op
        edge = t._leaf_edge = (AccumulateGrad(t), 0)
        return edge


def _regenerate_view_history(t) -> None:
    """A view whose base was edited in place since the view's history was recorded: its
    values changed, so its history becomes an as_strided of the base's current history
    (torch regenerates a view's grad_fn the same way)."""
    prev = _grad_state.enabled
    _grad_state.enabled = True
    try:  # (Tensor.as_strided: the views live in genesis.ops, above autograd)
        new = t._base.as_strided(tuple(t.shape), t.stride(), t.storage_offset())
    finally:
        _grad_state.enabled = prev
    if new.grad_fn is not None:
        t.grad_fn, t._out_idx = new.grad_fn, 0
    t._view_version = t._version_box[0]


class Function:
    """Base class for ops with a custom backward, as ``torch.autograd.Function``.

    Subclasses define ``forward(ctx, *args)`` returning a Tensor or a tuple of Tensors and
    ``backward(ctx, *grad_outputs)`` returning one gradient (or ``None``) per forward arg.
    Call them through ``apply``.

    Example:
        >>> class Square(Function):
        ...     @staticmethod
        ...     def forward(ctx, x):
        ...         ctx.save_for_backward(x)
        ...         return x * x
        ...     @staticmethod
        ...     def backward(ctx, g):
        ...         (x,) = ctx.saved_tensors
        ...         return 2 * x * g
        >>> y = Square.apply(genesis.tensor([3.0], requires_grad=True))
    """

    # Autocast category of the op (see genesis.autocast); None: inputs are left alone.
    autocast: str | None = None
    # False: the outputs never require grad (comparisons, floor_divide ...): nothing recorded
    differentiable = True
    # True: ``forward`` calls backend kernels and makes tensors, never an op (the declared
    # elementwise ops and reductions, the views): recording it needs no switch of grad mode,
    # which costs two thread-local writes per recorded op (test_dispatch checks the claim)
    kernel_forward = False
    # True: forward may save one of its own outputs (``ctx.save_for_backward(y)``). A
    # ``kernel_forward`` op's entry (genesis.autograd.entries) then records it with
    # ``connect_saving``, which holds such a tensor weakly; ``connect`` alone does not look
    # (the host path of add, mul, views). Other ops go through ``recorded``, which always
    # looks: they need not say.
    saves_output = False
    _backward_cls: type  # this Function's graph node class, ``<Function>Backward`` (see Node)
    op: OpHandle | None  # this Function's entry in the op registry (genesis.dispatch)
    # A class may set ``op_name`` (None: a base class, not an op); by default the registry
    # name is the class name in snake case.

    def __init_subclass__(cls, **kwargs):
        super().__init_subclass__(**kwargs)
        cls._backward_cls = type(f"{cls.__name__}Backward", (Node,),
                                 {"_fn": cls, "__module__": cls.__module__})
        name = cls.__dict__.get("op_name", op_name_of(cls.__name__))
        cls.op = None if name is None else register(OpHandle(name, cls.apply, cls))

    @staticmethod
    def forward(ctx, *args, **kwargs):
        raise TypeError("a genesis.autograd.Function subclass must define forward()")

    @staticmethod
    def backward(ctx, *grad_outputs):
        raise TypeError("this Function does not define backward()")

    @classmethod
    def apply(cls, *args, **kwargs):
        """The dispatcher: run the op, recording it when autograd needs it.

        In order: autocast casts the inputs of an op with an autocast category; active
        dispatch modes get the call (``genesis.dispatch``); with grad mode on and an input
        that requires grad, the op is recorded (``recorded``); otherwise ``forward`` runs
        alone. ``genesis.autograd.entries`` has the same steps for calls of a known arity.
        """
        # (the module-level flags first: reading a class attribute costs more than a global)
        if _autocast_anywhere.on and cls.autocast is not None and _autocast_state.enabled:
            args = _autocast_state.cast_args(cls.autocast, args)  # (modes see these casts)
        if _intercepting:
            return intercept(cls.op, args, kwargs)
        for a in args:  # (the thread-local grad mode is read only when it decides)
            if type(a) in _TENSOR_TYPES and a.requires_grad:
                if _grad_state.enabled and cls.differentiable:
                    return recorded(cls, args, kwargs)
                break
        return call_forward(cls.forward, _NO_GRAD_CTX, args, kwargs)  # (no graph)


def recorded(cls, args: tuple, kwargs: dict):
    """Run ``cls.forward`` with a new graph node as its ``ctx`` (its own ops unrecorded) and
    make the node the outputs' ``grad_fn``, holding a saved output weakly
    (``connect_saving``)."""
    ctx = cls._backward_cls()
    if cls.kernel_forward:  # (it runs no op: no grad mode to switch off, see Function)
        return connect_saving(ctx, args, call_forward(cls.forward, ctx, args, kwargs))
    # forward's own ops are not recorded: grad mode off meanwhile, written in this thread's
    # dict of the thread-local state (one thread-local lookup instead of two)
    grad_mode_of_thread = _grad_state.__dict__
    grad_mode_of_thread["enabled"] = False
    try:
        out = call_forward(cls.forward, ctx, args, kwargs)
    finally:
        grad_mode_of_thread["enabled"] = True
    return connect_saving(ctx, args, out)


def connect_saving(ctx: Node, args: tuple, out):
    """``connect`` (same arguments and result), then hold weakly each tensor ``ctx`` saved
    that is now one of its outputs (``hold_outputs_weakly``: otherwise output and node
    would be a reference cycle, freed only by Python's cyclic collector). ``recorded`` ends
    with it; the dispatcher's entries call it rather than ``connect`` for an op whose
    forward may save its output (``Function.saves_output``)."""
    connect(ctx, args, out)
    saved = ctx._saved
    if saved is not None:
        for t in saved:
            if t is not None and t.grad_fn is ctx:  # (an output, or an input edited in place)
                hold_outputs_weakly(ctx, saved)
                break
    return out


def connect(ctx: Node, args: tuple, out):
    """Record an op whose ``forward`` has run with ``ctx``: ``ctx`` joins the graph.

    Inputs ``forward`` marked dirty get their versions bumped first; then ``ctx`` gets its
    edges to the inputs' graph (``next_functions``, ``needs_input_grad``) and becomes the
    ``grad_fn`` of the floating outputs (of an input edited in place: its history is
    rebased). The dispatcher's entries call it after running with a new node the forward of a
    ``kernel_forward`` op that saves no output of its own; ``connect_saving`` calls it for the
    others.

    Args:
        ctx: the op's new node (``cls._backward_cls()``), the ``ctx`` forward ran with.
        args: the op's positional arguments, as forward got them.
        out: what forward returned (a tensor or a tuple).

    Returns:
        ``out``.

    Example:
        >>> ctx = Exp._backward_cls()
        >>> y = connect(ctx, (x,), Exp.forward(ctx, x))
    """
    special = ctx._non_differentiable or ctx._dirty  # (rare: sets only then)
    if special and ctx._dirty:
        _bump_versions(ctx._dirty)
    if len(args) == 2:  # (most ops: spelled out, it costs a third of the loop below)
        a, b = args
        ea = grad_edge(a) if type(a) in _TENSOR_TYPES and a.requires_grad else None
        eb = grad_edge(b) if type(b) in _TENSOR_TYPES and b.requires_grad else None
        ctx.next_functions = (ea, eb)
        ctx.needs_input_grad = (ea is not None, eb is not None)
    else:
        edges, needs = [], []
        for a in args:
            if type(a) in _TENSOR_TYPES and a.requires_grad:
                edges.append(grad_edge(a))
                needs.append(True)
            else:
                edges.append(None)
                needs.append(False)
        ctx.next_functions = tuple(edges)
        ctx.needs_input_grad = tuple(needs)
    if type(out) is not tuple:
        if not special and out.dtype.is_floating_point:  # the common case: one output
            # (no _output_meta: the engine runs a one-output node only with its gradient)
            out.requires_grad = True
            out.grad_fn = ctx
            out._out_idx = 0
            if out._base is not None:
                out._view_version = out._version_box[0]
            return out
        outs = (out,)
    else:
        outs = out
        ctx._n_outputs = len(outs)
        ctx._output_meta = tuple((o.shape, o.dtype, o.device) for o in outs)
    non_diff = {id(t) for t in ctx._non_differentiable} if special else ()
    dirty = {id(t) for t in ctx._dirty} if special else ()
    for i, o in enumerate(outs):
        if not o.dtype.is_floating_point:
            continue
        if special:
            if id(o) in non_diff:
                continue
            if id(o) in dirty:
                _rebase_inplace(ctx, o, i)
                continue
        o.requires_grad = True
        o.grad_fn = ctx
        o._out_idx = i
        if o._base is not None:  # a view: its history is valid until the base is edited
            o._view_version = o._version_box[0]
    return out


def call_forward(forward, ctx, args: tuple, kwargs: dict):
    """``forward(ctx, *args, **kwargs)``, as a call of fixed arity for one to four arguments
    and no keywords: CPython runs such a call in the caller's evaluation loop, where a call
    with ``*args`` re-enters the interpreter (about 0.15 µs, a tenth of a tiny op)."""
    if kwargs:
        return forward(ctx, *args, **kwargs)
    n = len(args)
    if n == 2:
        return forward(ctx, args[0], args[1])
    if n == 1:
        return forward(ctx, args[0])
    if n == 3:
        return forward(ctx, args[0], args[1], args[2])
    if n == 4:  # (the reductions: input, dims, keepdim, dtype)
        return forward(ctx, args[0], args[1], args[2], args[3])
    return forward(ctx, *args)


class _NoGradContext:
    """The ``ctx`` of ops that record nothing: saving is skipped, dirty inputs are bumped at
    once. Attributes forward sets on it are scratch values nobody reads back."""

    needs_input_grad = ()

    def save_for_backward(self, *tensors) -> None:
        pass

    def mark_dirty(self, *tensors) -> None:
        _bump_versions(tensors)

    def mark_non_differentiable(self, *tensors) -> None:
        pass

    def set_materialize_grads(self, value: bool) -> None:
        pass


_NO_GRAD_CTX = _NoGradContext()


def _bump_versions(tensors) -> None:
    for t in tensors:
        t._version_box[0] += 1


def check_inplace_allowed(t) -> None:
    """The torch errors for in-place edits of leaves (and their views) that need grad."""
    if t.grad_fn is None and t.requires_grad:
        raise RuntimeError(
            "a leaf Variable that requires grad is being used in an in-place operation.")
    base = t._base
    if base is not None and base.requires_grad and base.grad_fn is None:
        raise RuntimeError(
            "a view of a leaf Variable that requires grad is being used in an in-place "
            "operation.")


def check_inplace(t) -> None:
    """Refuse an in-place edit autograd cannot allow (only while grad mode is on)."""
    if _grad_state.enabled:
        check_inplace_allowed(t)


def _rebase_inplace(ctx: Node, t, idx: int) -> None:
    """Make an in-place-modified tensor's history go through ``ctx``."""
    check_inplace_allowed(t)
    base = t._base
    t.requires_grad = True
    t.grad_fn = ctx
    t._out_idx = idx
    if base is not None:  # (genesis.ops.views.rebase_view_history, attached to Tensor)
        base._rebase_view_history(t)


class _AutocastOff:
    """Placeholder of genesis.autocast's thread-local state until that module installs its
    own (avoids an import cycle)."""

    enabled = False


class AutocastCount:
    """How many threads have autocast on (``on``): while none has, the dispatcher skips
    reading the thread-local flag (a thread-local read costs twice a plain one). A thread
    counts itself before its flag goes on and uncounts after it goes off
    (``genesis.autocast._set_enabled``), so a zero count always means every thread's flag is
    off. The one instance, ``_autocast_anywhere``, lives here so the dispatcher reads it as
    a module global."""

    __slots__ = ("on",)

    def __init__(self) -> None:
        self.on = 0


_autocast_state = _AutocastOff()
_autocast_anywhere = AutocastCount()
_TENSOR_TYPES: set = set()  # Tensor and its subclasses register themselves


def once_differentiable(fn):
    """Mark a backward as not differentiable twice (it runs with grad recording off)."""

    def wrapper(ctx, *grads):
        create_graph = _grad_state.enabled
        with grad_mode.no_grad():
            result = fn(ctx, *grads)
        recorded = [g for g in grads if type(g) in _TENSOR_TYPES and g.requires_grad]
        if not create_graph or not recorded:
            return result
        # Under create_graph, as torch: differentiating these results again raises (rather
        # than silently giving zero second derivatives).
        outs = result if isinstance(result, tuple) else (result,)
        outs = tuple(_DelayedError.apply(o, *recorded)
                     if type(o) in _TENSOR_TYPES and o.dtype.is_floating_point else o
                     for o in outs)
        return outs if isinstance(result, tuple) else outs[0]

    wrapper.__name__ = fn.__name__
    wrapper.__doc__ = fn.__doc__
    return wrapper


class _DelayedError(Function):
    """Stands for a once_differentiable backward's result in a create_graph graph."""

    @staticmethod
    def forward(ctx, x, *grads):
        return x

    @staticmethod
    def backward(ctx, *grads):
        raise RuntimeError("trying to differentiate twice a function that was marked with "
                           "@once_differentiable")

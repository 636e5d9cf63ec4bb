"""The graph's two references back to tensors, held so that they make no reference cycle.

A tensor holds its ``grad_fn`` node, and the node holds the graph below it. Two kinds of
reference point the other way, from the graph back to a tensor that holds the graph:

* a node that saved one of its own outputs (exp, tanh, sigmoid, softmax ... keep ``y``:
  their gradient is a formula of it). ``y.grad_fn`` is the node; the node kept ``y``.
* a leaf's sink, ``AccumulateGrad``: the leaf keeps it (``t._leaf_edge``, made once so that
  every graph and every hook of the leaf meets the same sink), and the sink kept the leaf.

Each was a reference cycle, and CPython frees a cycle only when its cyclic collector runs,
not when the last outside reference goes: a graph that was never backwarded (a loss
computed and dropped, an evaluation without ``no_grad``, a ``create_graph`` formula's graph)
kept every tensor it saved — device memory, on a GPU — until then. torch breaks both the
same way as here: a saved output keeps its data but not its tensor (``SavedOutput``), and
the sink points at its leaf weakly.

Neither costs a recorded op anything unless it may save its own output: only then does
recording it look among its saved tensors (``connect_saving``: every op ``recorded`` records,
and the ops whose Function says ``saves_output`` that the dispatcher's entries record).
"""

from __future__ import annotations

import weakref


class SavedOutput:
    """What a node keeps of a saved tensor that is one of its own outputs: the tensor
    weakly; its memory, version counter and metadata strongly.

    ``unpack`` returns the output itself while anybody holds it (so identity holds for the
    compiler's tracer and for user code); after that, a new tensor over the same memory and
    version counter, with the node as its ``grad_fn`` (as torch's ``SavedVariable`` of an
    output): a ``create_graph`` backward differentiates the formula through it. The in-place
    check reads the shared version counter (``_version_box``) here as on a tensor.

    Args:
        t: the output, already connected (``t.grad_fn`` is the node, ``t._out_idx`` set).

    Example:
        >>> y = x.exp()
        >>> y.grad_fn._saved[1]
        <SavedOutput of Tensor output 0>
    """

    __slots__ = ("tensor", "_data", "_version_box", "_base", "shape", "dtype", "device",
                 "index", "cls")

    def __init__(self, t):
        self.tensor = weakref.ref(t)
        self._data, self._version_box, self._base = t._data, t._version_box, t._base
        self.shape, self.dtype, self.device = t.shape, t.dtype, t.device
        self.index, self.cls = t._out_idx, type(t)

    def unpack(self, node):
        """The output: the tensor itself if alive, else a new one over its memory whose
        ``grad_fn`` is ``node`` (the node holding this)."""
        t = self.tensor()
        if t is not None:
            return t
        t = self.cls._wrap(self._data, self.device, shape=self.shape, dtype=self.dtype)
        t._version_box, t._base = self._version_box, self._base
        t.requires_grad, t.grad_fn, t._out_idx = True, node, self.index
        if self._base is not None:  # (a view's history is valid at this version: see connect)
            t._view_version = self._version_box[0]
        return t

    def __repr__(self) -> str:
        return f"<SavedOutput of {self.cls.__name__} output {self.index}>"


class SavedWithOutputs(tuple):
    """A node's saved tensors (its ``_saved``) where a ``SavedOutput`` stands for each of its
    own outputs: the type tells ``Node.saved_tensors`` to unpack them, at the cost of one
    type check for every other node."""

    __slots__ = ()

    def unpack(self, node) -> tuple:
        """The saved tensors, each ``SavedOutput`` unpacked for ``node``."""
        return tuple([t.unpack(node) if type(t) is SavedOutput else t for t in self])


def hold_outputs_weakly(ctx, saved: tuple) -> None:
    """Replace in ``ctx``'s saved tensors (``saved``, its ``_saved``) each one whose
    ``grad_fn`` is ``ctx`` — an output of it — by a ``SavedOutput``."""
    ctx._saved = SavedWithOutputs([SavedOutput(t) if t is not None and t.grad_fn is ctx else t
                                   for t in saved])


class AccumulateGrad:
    """The graph's sink for a leaf tensor: adds incoming gradients into ``leaf.grad``.

    It holds the leaf weakly (the leaf holds it, for its lifetime: the hooks registered on
    the leaf live here, across graphs); ``variable`` is None once the leaf is gone, and a
    gradient reaching it then goes nowhere, as nothing could read it.

    Args:
        variable: the leaf tensor.

    Example:
        >>> (x * 2).grad_fn.next_functions[0][0].variable is x
        True
    """

    __slots__ = ("_variable", "_hooks", "_post_accumulate_hooks", "next_functions")

    def __init__(self, variable):
        self._variable = weakref.ref(variable)
        self._hooks: dict[int, list] = {}
        self._post_accumulate_hooks: list = []  # hook(leaf) after leaf.grad was updated
        self.next_functions = ()

    @property
    def variable(self):
        """The leaf, or None once nobody else holds it."""
        return self._variable()

    def name(self) -> str:
        return "AccumulateGrad"

    def hooks_at(self, idx: int) -> list:
        """The (mutable) list of hooks on the leaf's gradient."""
        return self._hooks.setdefault(idx, [])

    def __repr__(self) -> str:
        return f"<AccumulateGrad object at {id(self):#x}>"

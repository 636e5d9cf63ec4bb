"""Outputs of a replayed CUDA graph, handed out without copies: aliases of the pool memory.

A captured graph writes its outputs into its private memory pool, at the same addresses at
every replay. Copying each output out after every replay would cost a read and a write of
every activation the forward saves for backward (and the memory of a second copy). Instead
``PoolOutputs`` hands out tensors over the pool memory itself, each on an ``AliasStorage``:

* an ``AliasStorage`` points at the pool chunk of a captured output and keeps that chunk
  (its ``Storage``) alive, so the memory stays valid even after the graph is reset;
* before the graph is replayed again (``evacuate``), every alias still referenced by anyone
  (a loss kept in a Python variable, a second forward's activations before the first
  backward ran) is *moved*: its bytes are copied to ordinary memory and the alias takes
  that memory over, so every tensor viewing it keeps its values. In a training loop the
  saved activations are released by the backward before the next forward, so nothing is
  copied;
* a graph that reads another graph's outputs (the backward reads the forward's saved
  activations) sees them at the captured addresses and reads them in place
  (``is_pool_alias``); a moved one is at another address, which that graph detects.

Outputs that are views of the graph's inputs (not pool memory) are handed out as copies.

Example:
    >>> outs = PoolOutputs(static_outputs, g.pool())
    >>> outs.evacuate(); g.replay(); results = outs.hand_out()
"""

from __future__ import annotations

import weakref

import genesis
from genesis_cuda import driver, streams
from genesis_cuda.allocator import Storage
from genesis_cuda.array import new_array
from genesis_cuda.compiler.runner import empty_laid_out


class AliasStorage(Storage):
    """A ``Storage`` over another one's memory (a graph's pool chunk), until it is moved.

    While ``_source`` is set the memory belongs to the graph (``_chunk`` is None, so freeing
    the alias frees nothing); ``move_out`` gives it memory of its own with the same bytes.
    """

    __slots__ = ("_source",)

    def __init__(self, source: Storage):
        super().__init__(source.ptr, source.size, source.device, None, None)
        self._source = source

    def move_out(self, alloc) -> None:
        """Copy the bytes into newly allocated memory and own that memory from now on."""
        own = alloc.malloc(self.size)
        cu = driver.driver()
        with driver.using_device(self.device):
            driver.check(cu.cuMemcpyDtoDAsync(own.ptr, self.ptr, self.size,
                                              streams.current_handle(self.device)),
                         "cuMemcpyDtoDAsync")
        self.ptr, self._chunk, self._alloc = own.ptr, own._chunk, own._alloc
        own._chunk = None  # (the memory is the alias's now: ``own`` must not free it)
        self._source = None


def is_pool_alias(t) -> bool:
    """Whether tensor ``t`` is a handed-out graph output still at its captured address."""
    storage = getattr(t._data, "storage", None)
    return isinstance(storage, AliasStorage) and storage._source is not None


class PoolOutputs:
    """The captured outputs of one graph and the aliases handed out of them.

    Args:
        static_outputs: what the captured call returned (tensors and other values).
        pool: the graph's memory-pool handle: outputs whose chunk is in it are aliased.
    """

    def __init__(self, static_outputs: list, pool):
        self.static_outputs = static_outputs
        self.in_pool = [isinstance(o, genesis.Tensor) and _chunk_pool(o) == pool
                        for o in static_outputs]
        self.handed: list = []  # weak references to the aliases of the last hand-out

    def hand_out(self) -> list:
        """Tensors over the outputs' current values (call after each replay)."""
        aliases: dict = {}  # pool Storage id -> its alias (outputs may view one storage)
        out, self.handed = [], []
        for o, pooled in zip(self.static_outputs, self.in_pool):
            if not pooled:
                out.append(_copy_out(o) if isinstance(o, genesis.Tensor) else o)
                continue
            a = o._data
            alias = aliases.get(id(a.storage))
            if alias is None:
                alias = aliases[id(a.storage)] = AliasStorage(a.storage)
                self.handed.append(weakref.ref(alias))
            view = new_array(a.shape, a.strides, a.offset, a.dtype, alias, a.device)
            out.append(genesis.Tensor._wrap(view, o.device, shape=o.shape, dtype=o.dtype))
        return out

    def evacuate(self) -> int:
        """Move every alias still in use to memory of its own (call before a replay
        overwrites the pool). Returns how many were moved."""
        moved = 0
        for ref in self.handed:
            alias = ref()
            if alias is not None and alias._source is not None:
                alias.move_out(alias._source._alloc)
                moved += 1
        self.handed = []
        return moved


def _chunk_pool(t):
    """The pool (or stream) that the chunk under tensor ``t`` belongs to, if any."""
    chunk = getattr(t._data.storage, "_chunk", None)
    return None if chunk is None else chunk.stream


def _copy_out(o):
    """A copy of a captured output in ordinary memory, with the output's own layout: the
    graph that reads it next (the backward reads saved activations) was traced on that
    layout, and a view valid on a transposed output need not be valid on a C-order copy."""
    out = empty_laid_out(tuple(o.shape), tuple(o.stride()), o.dtype, o.device)
    with genesis.no_grad():
        out.copy_(o)
    return out


class SharedPool:
    """One private memory pool for the graphs of one compiled region (its forward and its
    backward), so the backward's temporaries reuse the forward's freed ones.

    A graph captured later in the pool may have put its outputs in memory an earlier graph
    wrote as temporaries (the backward's parameter gradients where the forward kept its
    intermediate products), so before a graph replays, the handed-out outputs of every
    graph captured after it — and its own — are moved out if still in use (``evacuate``).
    Outputs of graphs captured before it are in memory it never writes. Dropping one graph
    drops them all (``reset``): the next calls capture them again, in order.

    Args:
        handle: the pool's handle (``genesis_cuda.graphs.graph_pool_handle()``).
    """

    def __init__(self, handle):
        self.handle = handle
        self.members: list = []  # the Graphed callables captured into it, in capture order

    def captured(self, graphed) -> None:
        self.members.append(graphed)

    def before_replay(self, graphed) -> None:
        """Move out the outputs in use that replaying ``graphed`` could overwrite."""
        for m in self.members[self.members.index(graphed):]:
            m.outputs.evacuate()

    def reset(self) -> None:
        """Drop every graph of the pool (each is captured again by its next calls)."""
        members, self.members = self.members, []
        for m in members:
            m.drop_capture()

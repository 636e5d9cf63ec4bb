"""``fully_shard``: shard a module's parameters over the ranks (torch FSDP2's API).

Apply it to each block, then to the root::

    for layer in model.model.layers:
        fully_shard(layer)
    fully_shard(model)

Each call manages the parameters of its module that no earlier call took (an
``FSDPParamGroup``), and turns the module into an ``FSDPModule`` with forward hooks:

- before forward: wait for the block's all-gather (or run it), put the unsharded parameters
  in the modules, start the all-gather of the block that ran next in the first forward
  (*prefetch*), cast floating inputs to the policy's ``param_dtype``;
- after forward: put the sharded parameters back; unless ``reshard_after_forward`` is off,
  free the unsharded values and hook the outputs' gradients, so the block is all-gathered
  again (and the block before it prefetched) just before its backward;
- once backward has accumulated all of a block's gradients: reduce-scatter them into the
  sharded parameters' ``.grad`` and free the unsharded values. When the last block of the
  step has done so, the reductions are waited for, so ``.grad`` is ready after ``backward()``.

The first module whose forward runs becomes the *root*; it keeps its parameters unsharded
between forward and backward (they are needed first in backward anyway), as torch does.
"""

from __future__ import annotations

from dataclasses import dataclass

import genesis
from genesis import nn
from genesis.distributed.fsdp.param_group import FSDPParamGroup
from genesis.distributed.group import resolve
from genesis.distributed.reducer import _collect_tensors


@dataclass(frozen=True)
class MixedPrecisionPolicy:
    """The dtypes of FSDP's traffic (torch's ``MixedPrecisionPolicy``).

    Args:
        param_dtype: dtype of the all-gathered (unsharded) parameters that forward and
            backward compute with; the sharded parameters and the optimizer keep their own.
            None: the parameters' dtype.
        reduce_dtype: dtype in which gradients are reduce-scattered (averaged); None:
            ``param_dtype``.
        output_dtype: cast the floating-point tensors a sharded module's forward returns
            (alone, or in a tuple or list) to this dtype; None: leave them.
        cast_forward_inputs: cast floating-point tensor arguments of each sharded module's
            forward to ``param_dtype``.

    Example:
        >>> policy = MixedPrecisionPolicy(param_dtype=genesis.bfloat16,
        ...                               reduce_dtype=genesis.float32)
        >>> fully_shard(block, mp_policy=policy)
    """

    param_dtype: object = None
    reduce_dtype: object = None
    output_dtype: object = None
    cast_forward_inputs: bool = True


class FSDPModule:
    """The class a ``fully_shard``'ed module becomes part of (``isinstance(m, FSDPModule)``).

    Example:
        >>> fully_shard(model)
        >>> model.unshard()          # all-gather now (e.g. before a forward outside training)
        >>> model.reshard()
    """

    def unshard(self) -> None:
        """All-gather this module's parameters and keep the whole values registered in it
        until ``reshard()``: forwards then need no communication (evaluation on ranks with
        different numbers of batches), and ``state_dict()`` holds whole tensors (saving
        from one rank). A collective: every rank calls it."""
        state = self._fsdp_state
        state.held = True
        if state.group is not None:
            state.group.finish_unshard()
            state.group.use_unsharded()

    def reshard(self) -> None:
        """Free the whole values and register the sharded parameters again."""
        state = self._fsdp_state
        state.held = False
        if state.group is not None:
            state.group.use_sharded()
            state.group.reshard()


class _Tree:
    """What the FSDP modules under one root share during a step."""

    def __init__(self, root: _State, states: list[_State]) -> None:
        self.root = root
        self.states = states
        self.order: list[_State] = []  # forward order, recorded in the first forward
        self.order_known = False
        self.position: dict | None = None  # id(state) -> its index in order, once known
        self.expecting: set = set()  # states whose gradients this backward still reduces
        self.backward_started = False  # a block reduced its gradients since the forward
        self.pending: list = []  # reduce-scatter works to wait for at the end of backward

    def neighbour(self, state: _State, step: int) -> _State | None:
        """The state ``step`` places after ``state`` in forward order (None at the ends)."""
        if not self.order_known:
            return None
        if self.position is None:  # (the order is fixed once known: indexed once)
            self.position = {id(s): i for i, s in reversed(list(enumerate(self.order)))}
        i = self.position.get(id(state))
        if i is None:
            return None
        i += step
        return self.order[i] if 0 <= i < len(self.order) else None


class _State:
    """One fully_shard call: its module, parameter group and options."""

    def __init__(self, module, group: FSDPParamGroup | None, reshard_after_forward: bool,
                 mp_policy: MixedPrecisionPolicy) -> None:
        self.module = module
        self.group = group
        self.reshard_after_forward = reshard_after_forward
        self.mp_policy = mp_policy
        self.tree: _Tree | None = None
        self.held = False  # unshard() keeps the whole parameters until reshard()
        if group is not None:
            group.on_grads_ready = lambda _group: self.post_backward()

    # ------------------------------------------------------------------- forward
    def pre_forward(self, module, args: tuple, kwargs: dict):
        if self.tree is None:
            self._become_root()
        tree = self.tree
        grad = genesis.is_grad_enabled()
        if self is tree.root:
            self._check_previous_backward()
            tree.expecting = set()
            tree.backward_started = False
            for state in tree.states:  # a prefetch the last step did not use (a block it
                if state.group is not None:  # skipped) predates the optimizer's step
                    state.group.discard_prefetch()
        if not tree.order_known:
            tree.order.append(self)
        if self.group is not None:
            self.group.finish_unshard()
            self.group.use_unsharded()
            if grad and self.group.trainable:
                self.group.reset_backward()
                tree.expecting.add(self)
        following = tree.neighbour(self, +1)
        if following is not None and following.group is not None:
            following.group.start_unshard()
        dtype = self.mp_policy.param_dtype
        if dtype is not None and self.mp_policy.cast_forward_inputs:
            args = tuple(_cast(a, dtype) for a in args)
            kwargs = {k: _cast(v, dtype) for k, v in kwargs.items()}
        return args, kwargs

    def post_forward(self, module, args: tuple, output):
        tree = self.tree
        if self is tree.root:
            tree.order_known = True
        dtype = self.mp_policy.output_dtype
        if dtype is not None:
            output = (type(output)(_cast(o, dtype) for o in output)
                      if isinstance(output, (tuple, list)) else _cast(output, dtype))
        if self.group is None or self.held:
            return output
        self.group.use_sharded()
        grad = genesis.is_grad_enabled()
        if not grad or (self.reshard_after_forward and self is not tree.root):
            self.group.reshard()
            if grad and self.group.trainable:
                for t in _collect_tensors(output, []):
                    if t.requires_grad:
                        t.register_hook(self._pre_backward)
        return output

    def _become_root(self) -> None:
        states = [m._fsdp_state for m in self.module.modules() if isinstance(m, FSDPModule)]
        tree = _Tree(self, states)
        for state in states:
            if state.tree is not None:
                raise RuntimeError(
                    f"fully_shard: {type(state.module).__name__} already ran forward under "
                    f"another root; run forward from the outermost fully_shard'ed module")
            state.tree = tree

    def _check_previous_backward(self) -> None:
        """Raise if the last backward left gradients unreduced; after a forward that had no
        backward at all (a loss computed with gradients on, then dropped), free what it
        gathered instead: the shards may have changed since."""
        tree = self.tree
        if not tree.expecting:
            return
        started = tree.backward_started or any(s.group.grads_pending() for s in tree.expecting)
        if not started:
            tree.expecting = set()
            for state in tree.states:
                if state.group is not None and not state.held:
                    state.group.use_sharded()
                    state.group.reshard()
            return
        missing = [f"{type(s.module).__name__}: {', '.join(s.group.missing_grads())}"
                   for s in tree.expecting]
        tree.expecting = set()
        raise RuntimeError(
            "fully_shard: the previous backward did not give a gradient to every "
            "parameter of the sharded modules, so their gradients were never "
            f"reduce-scattered ({'; '.join(missing)}). Every trainable parameter must "
            "take part in the loss (or set requires_grad=False before fully_shard)")

    # ------------------------------------------------------------------ backward
    def _pre_backward(self, grad):
        group = self.group
        if not group.is_unsharded:
            group.finish_unshard()
            earlier = self.tree.neighbour(self, -1)
            if earlier is not None and earlier.group is not None:
                earlier.group.start_unshard()
        return None

    def post_backward(self) -> None:
        tree = self.tree
        tree.backward_started = True
        # one reduce-scatter stays in flight while the next block computes. The older one is
        # waited for before this group packs (on NCCL the host does not block: the compute
        # stream waits, for a collective that ran beside this block's backward), so its
        # packed gradients are freed first and two groups' never coexist (torch FSDP2's order)
        while tree.pending:
            tree.pending.pop(0).wait()
        frozen = len(self.group.trainable) != len(self.group.params)
        tree.pending.append(self.group.start_reduce(reshard=not frozen and not self.held))
        tree.expecting.discard(self)
        if not tree.expecting:
            while tree.pending:
                tree.pending.pop(0).wait()
            for state in tree.states:
                if state.group is not None and not state.held:
                    state.group.reshard()


def _cast(value, dtype):
    if isinstance(value, genesis.Tensor) and value.dtype.is_floating_point:
        return value.to(dtype)
    return value


def _managed_parameters(module) -> list:
    """``[(name, parameter, owners)]``: ``module``'s parameters that no fully_shard'ed
    submodule manages, each once, with every (module, attribute) it is registered as."""
    found: dict[int, tuple] = {}
    stack = [("", module)]
    while stack:
        prefix, m = stack.pop()
        for attr, p in m._parameters.items():
            if p is None:
                continue
            entry = found.get(id(p))
            if entry is None:
                found[id(p)] = (prefix + attr, p, [(m, attr)])
            else:
                entry[2].append((m, attr))
        children = [(prefix + name + ".", child) for name, child in m._modules.items()
                    if child is not None and not isinstance(child, FSDPModule)]
        stack.extend(reversed(children))
    return list(found.values())


def fully_shard(module, *, reshard_after_forward: bool = True,
                mp_policy: MixedPrecisionPolicy | None = None, process_group=None):
    """Shard ``module``'s parameters on dim 0 over the ranks (torch's FSDP2 ``fully_shard``).

    Call it on each block first, then on the root. The module's parameters become
    ``ShardedParameter``s (this rank's rows; ``to_local()``, ``full_tensor()``), so an
    optimizer made afterwards steps on the shards only, and ``state_dict()`` is sharded.
    Forward and backward all-gather a block's parameters just in time and free them after;
    gradients are averaged over the ranks by a reduce-scatter.

    Args:
        module: the ``nn.Module`` to shard (on every rank, built identically).
        reshard_after_forward: free the all-gathered parameters after forward and gather
            them again for backward (less memory, one more all-gather per step); the root
            keeps them regardless, as torch does.
        mp_policy: a ``MixedPrecisionPolicy`` (default: no casts).
        process_group: the ranks to shard over (default: the world).

    Returns:
        ``module``, now also an ``FSDPModule``.

    Example:
        >>> dist.init_process_group("gloo")
        >>> model = nn.Sequential(nn.Linear(8, 8), nn.ReLU(), nn.Linear(8, 2))
        >>> fully_shard(model[0]); fully_shard(model[2]); fully_shard(model)
        >>> opt = genesis.optim.AdamW(model.parameters(), lr=1e-3)
        >>> model(x).sum().backward(); opt.step()
    """
    if not isinstance(module, nn.Module):
        raise TypeError(f"fully_shard takes an nn.Module, got {type(module).__name__}")
    if isinstance(module, FSDPModule):
        raise ValueError(f"fully_shard was already applied to this module "
                         f"({type(module).__name__})")
    group = resolve(process_group)
    if group is None:
        raise ValueError("fully_shard: this rank is not in process_group")
    policy = MixedPrecisionPolicy() if mp_policy is None else mp_policy
    if not isinstance(policy, MixedPrecisionPolicy):
        raise TypeError(f"mp_policy must be a MixedPrecisionPolicy, got "
                        f"{type(policy).__name__}")
    _check_same_model(module, group)
    named = _managed_parameters(module)
    params = FSDPParamGroup(named, group, policy.param_dtype, policy.reduce_dtype) \
        if named else None
    if params is not None:
        params.use_sharded()
    state = _State(module, params, reshard_after_forward, policy)
    module.__class__ = _fsdp_class(type(module))
    object.__setattr__(module, "_fsdp_state", state)
    module.register_forward_pre_hook(state.pre_forward, prepend=True, with_kwargs=True)
    module.register_forward_hook(state.post_forward)
    return module


_FSDP_CLASSES: dict[type, type] = {}


def _fsdp_class(cls: type) -> type:
    """``FSDP<cls>``: ``cls`` with ``FSDPModule``'s methods (one class per module class)."""
    made = _FSDP_CLASSES.get(cls)
    if made is None:
        made = _FSDP_CLASSES[cls] = type(f"FSDP{cls.__name__}", (FSDPModule, cls), {})
    return made


def _check_same_model(module, group) -> None:
    """Raise on every rank if any rank's parameters differ from rank 0's (where a mismatch
    would otherwise hang or shard wrong rows)."""
    mine = [(n, tuple(p.shape), str(p.dtype)) for n, p in module.named_parameters()]
    everyone = group.exchange_objects(mine, "fully_shard")
    for group_rank, theirs in enumerate(everyone):
        if theirs != everyone[0]:
            diff = next((a, b) for a, b in zip(everyone[0] + [None], theirs + [None])
                        if a != b)
            raise RuntimeError(
                f"fully_shard: rank {group.ranks[group_rank]}'s parameters differ from rank "
                f"{group.ranks[0]}'s (first difference: {diff[1]} vs {diff[0]}); every rank "
                "must shard the same model")

"""``FusedLinear``: q/k/v as one matmul in inference, always with the layers' current weights.

The layers' parameters are views of one stacked buffer; when they are given memory of their
own (a ``.data`` swap: FSDP's all-gather before each evaluation does it), the fused call
keeps a stacked copy. That copy must be made again whenever a part changes, also when the
swapped-in array sits at the old array's address with the same version (an allocator hands
a freed block out again): it was keyed by address and version, and so FSDP's second
evaluation in a run computed q/k/v with the weights of the first (seen as a resumed
``genesis-sft --fsdp`` run whose final eval loss differed from the uninterrupted run's).
"""

from __future__ import annotations

import weakref

import numpy as np
import torch

import genesis
import genesis.models.fused_weights as fused_weights
from genesis import nn
from genesis.models.fused_weights import FusedLinear


def layers(seed: int = 0):
    genesis.manual_seed(seed)
    return [nn.Linear(8, n, bias=True) for n in (8, 4, 4)]


def separate(linears, x):
    with genesis.no_grad():
        return np.concatenate([lin(x).numpy() for lin in linears], axis=-1)


def own_memory(linears) -> genesis.Tensor:
    """Give the layers' weights memory of their own: views of one new (16, 8) buffer,
    which is returned (the state FSDP's unshard leaves them in)."""
    buf = genesis.cat([lin.weight.detach() for lin in linears], dim=0).clone()  # (16, 8)
    start = 0
    for lin in linears:
        lin.weight.data = buf[start:start + lin.out_features]
        start += lin.out_features
    return buf


def test_the_fused_output_is_the_layers_outputs_side_by_side():
    linears = layers()
    fused = FusedLinear(linears, copy=True)
    x = genesis.randn(3, 8)
    with genesis.no_grad():
        np.testing.assert_allclose(fused.output(x).numpy(), separate(linears, x), rtol=1e-6,
                                   atol=1e-6)
        own_memory(linears)  # the stacked copy's path
        np.testing.assert_allclose(fused.output(x).numpy(), separate(linears, x), rtol=1e-6,
                                   atol=1e-6)


def test_a_new_array_at_the_old_address_is_not_taken_for_the_old_one():
    linears = layers()
    fused = FusedLinear(linears, copy=True)
    x = genesis.randn(3, 8)
    with genesis.no_grad():
        buf = own_memory(linears)
        fused.output(x)  # makes the stacked copy of these weights
        # the allocator hands the same memory out again, with other values: a new array
        # (another object, version 0) at the very same address, swapped in with .data
        again = torch.from_dlpack(buf)
        again.copy_(torch.randn(16, 8, generator=torch.Generator().manual_seed(1)))
        swapped = genesis.from_dlpack(again)
        start = 0
        for lin in linears:
            old_ptr = lin.weight.data_ptr()
            lin.weight.data = swapped[start:start + lin.out_features]
            assert lin.weight.data_ptr() == old_ptr  # the same address ...
            start += lin.out_features
        got = fused.output(x).numpy()
    # ... but the new values: the copy was made again
    np.testing.assert_allclose(got, separate(linears, x), rtol=1e-6, atol=1e-6)


def test_without_weak_references_the_copy_is_made_at_every_call(monkeypatch):
    """A backend array that takes no weak reference cannot be told from a new one at its
    address: the stacked copy is then never reused (correct, if slower)."""
    linears = layers()
    fused = FusedLinear(linears, copy=True)
    x = genesis.randn(3, 8)
    with genesis.no_grad():
        own_memory(linears)

        def no_weakref(obj):
            raise TypeError(f"cannot create weak reference to {type(obj).__name__!r}")

        monkeypatch.setattr(fused_weights.weakref, "ref", no_weakref)
        fused.output(x)
        cats = []
        real_cat = genesis.cat
        monkeypatch.setattr(genesis, "cat", lambda *a, **k: cats.append(1) or real_cat(*a, **k))
        np.testing.assert_allclose(fused.output(x).numpy(), separate(linears, x), rtol=1e-6,
                                   atol=1e-6)
        assert len(cats) == 2  # weights and biases stacked again


def test_an_in_place_change_of_a_part_is_seen():
    linears = layers()
    fused = FusedLinear(linears, copy=True)
    x = genesis.randn(3, 8)
    with genesis.no_grad():
        own_memory(linears)
        fused.output(x)
        linears[1].weight.mul_(2.0)  # an optimizer step: the parameter's version moves
        np.testing.assert_allclose(fused.output(x).numpy(), separate(linears, x), rtol=1e-6,
                                   atol=1e-6)


class _ReusingEmpty:
    """Stands for ``genesis`` in FSDP's param_group: ``empty`` gives the memory of a buffer
    it gave before, once nothing uses that buffer any more, as a new array at the same
    address (what a caching allocator does with a freed block of the size asked for);
    everything else is genesis's."""

    def __init__(self) -> None:
        self.slabs: dict = {}  # (shape, dtype) -> [(memory, weak ref to the array given)]
        self.reused = 0

    def __getattr__(self, name):
        return getattr(genesis, name)

    def empty(self, *shape, dtype=None, device=None):
        slabs = self.slabs.setdefault((shape, dtype), [])
        free = [i for i, (_, given) in enumerate(slabs) if given() is None]
        if free:
            memory = slabs[free[0]][0]
            self.reused += 1
        else:
            memory = torch.from_dlpack(genesis.empty(*shape, dtype=dtype, device=device))
            slabs.append((memory, None))
            free = [len(slabs) - 1]
        array = memory.view(memory.shape)  # another torch tensor over the same memory
        slabs[free[0]] = (memory, weakref.ref(array))
        return genesis.from_dlpack(array)


def test_fsdp_evaluations_see_the_current_weights(monkeypatch):
    """Two evaluations of a sharded Qwen3 with an optimizer-like step between them: the
    second one's all-gather buffers sit where the first one's were (forced here), and its
    logits must be those of the updated weights, not q/k/v of the first evaluation."""
    import datetime

    from torch import distributed as tdist

    import genesis.distributed as dist
    from genesis.distributed.fsdp import param_group
    from genesis.models import Qwen3Config, QwenForCausalLM
    from genesis.models.apps import sft_fsdp

    config = Qwen3Config(vocab_size=50, hidden_size=16, intermediate_size=24,
                         num_hidden_layers=2, num_attention_heads=2, num_key_value_heads=1,
                         head_dim=8, max_position_embeddings=64)
    ids = genesis.tensor([[3, 1, 4, 1, 5, 9, 2, 6]])
    genesis.manual_seed(0)
    plain = QwenForCausalLM(config).eval()
    dist.init_process_group("gloo", store=tdist.HashStore(), rank=0, world_size=1,
                            timeout=datetime.timedelta(seconds=30))
    try:
        genesis.manual_seed(0)
        model = sft_fsdp.shard_model(QwenForCausalLM(config)).eval()
        reusing = _ReusingEmpty()
        monkeypatch.setattr(param_group, "genesis", reusing)

        def evaluate():
            sft_fsdp.gather(model)
            with genesis.no_grad():
                logits = model(ids).logits.numpy()
            sft_fsdp.release(model)
            return logits

        with genesis.no_grad():
            np.testing.assert_allclose(evaluate(), plain(ids).logits.numpy(), rtol=1e-5,
                                       atol=1e-5)
            for m in (model, plain):  # a step between the evaluations
                for p in m.parameters():
                    p.mul_(0.5)
            np.testing.assert_allclose(evaluate(), plain(ids).logits.numpy(), rtol=1e-5,
                                       atol=1e-5)
        assert reusing.reused >= 3  # (each group's second all-gather reused its memory)
    finally:
        dist.destroy_process_group()

"""Bodies of the FSDP tests (tests/distributed/test_fsdp*.py), run by dist_harness.run_ranks.

Every rank also trains an unsharded copy of the same model on the whole batch, so each
worker returns both loss curves; the tests compare them.
"""

from __future__ import annotations

import copy
import os
import time

import numpy as np

BATCH, IN, HIDDEN, CLASSES = 12, 6, 13, 3  # 13 and 3 rows split unevenly over 2 and 3 ranks


def make_model(device: str = "cpu"):
    """A stem, two residual blocks (13-row hidden layers) and a 3-class head."""
    import genesis
    from genesis import nn

    class Block(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.up = nn.Linear(8, HIDDEN)
            self.down = nn.Linear(HIDDEN, 8)
            self.scale = nn.Parameter(genesis.ones(()))  # 0-d: one row over every world

        def forward(self, x):
            return x + self.scale * self.down(genesis.tanh(self.up(x)))

    genesis.manual_seed(0)
    return nn.Sequential(nn.Linear(IN, 8), Block(), Block(), nn.Linear(8, CLASSES)).to(device)


def batch(device: str = "cpu"):
    import genesis

    rng = np.random.default_rng(1)
    x = genesis.tensor(rng.standard_normal((BATCH, IN)).astype(np.float32)).to(device)
    y = genesis.tensor(rng.integers(0, CLASSES, BATCH)).to(device)
    return x, y


def _np(t) -> np.ndarray:
    return t.detach().cpu().numpy()


def shard(model, mp_policy=None, reshard_after_forward=True):
    from genesis.distributed.fsdp import fully_shard

    for block in (model[1], model[2]):
        fully_shard(block, mp_policy=mp_policy, reshard_after_forward=reshard_after_forward)
    return fully_shard(model, mp_policy=mp_policy)


def _train(model, x, y, steps: int, clip: float, average_loss: bool) -> tuple[list, list]:
    import genesis
    import genesis.distributed as dist
    from genesis import nn

    opt = genesis.optim.AdamW(model.parameters(), lr=0.05, weight_decay=0.1)
    losses, norms = [], []
    for _ in range(steps):
        opt.zero_grad()
        loss = nn.functional.cross_entropy(model(x).float(), y)
        loss.backward()
        norms.append(float(nn.utils.clip_grad_norm_(model.parameters(), clip)))
        opt.step()
        seen = loss.detach().clone()
        if average_loss:
            dist.all_reduce(seen, op=dist.ReduceOp.AVG)
        losses.append(float(seen))
    return losses, norms


def training(rank: int, n: int, mp: bool = False, reshard_after_forward: bool = True,
             device: str = "cpu") -> dict:
    """FSDP on this rank's rows of the batch beside one process on the whole batch."""
    import genesis
    from genesis.distributed.fsdp import MixedPrecisionPolicy

    x, y = batch(device)
    reference = make_model(device)
    model = copy.deepcopy(reference)
    policy = MixedPrecisionPolicy(param_dtype=genesis.bfloat16,
                                  reduce_dtype=genesis.float32) if mp else None
    shard(model, policy, reshard_after_forward)
    rows = slice(rank * BATCH // n, (rank + 1) * BATCH // n)
    ref_losses, ref_norms = _train(reference, x, y, 4, 0.5, False)
    losses, norms = _train(model, x[rows], y[rows], 4, 0.5, True)
    params = {name: _np(p.full_tensor()) for name, p in model.named_parameters()}
    wanted = {name: _np(p) for name, p in reference.named_parameters()}
    return {"losses": losses, "ref_losses": ref_losses, "norms": norms,
            "ref_norms": ref_norms, "params": params, "ref_params": wanted}


def holdings(rank: int, n: int) -> dict:
    """What each rank stores: shard shapes, gradients, optimizer state, local rows."""
    import genesis
    from genesis import nn
    from genesis.distributed.fsdp import FSDPModule, ShardedParameter

    model = shard(make_model())
    x, y = batch()
    opt = genesis.optim.AdamW(model.parameters(), lr=0.01)
    gathered = []  # inside block 2's forward: is block 1 gathered, and block 2?
    model[2].down.register_forward_pre_hook(lambda m, args: gathered.append(
        (_unsharded(model[1])[0].numel(), model[2].up.weight.numel())))
    loss = nn.functional.cross_entropy(model(x), y)
    after_forward = [u.numel() for u in _unsharded(model[1])]
    loss.backward()
    after_backward = [u.numel() for m in model.modules() if isinstance(m, FSDPModule)
                      for u in _unsharded(m)]
    opt.step()
    out = {"is_fsdp": isinstance(model[1], FSDPModule), "params": {},
           "gathered_in_block2": gathered, "after_forward": after_forward,
           "after_backward": after_backward}
    with genesis.no_grad():  # unshard() keeps whole parameters (no traffic) until reshard()
        before = model(x)
        fsdp_modules = [m for m in model.modules() if isinstance(m, FSDPModule)]
        for m in fsdp_modules:
            m.unshard()
        out["held_shapes"] = {k: tuple(v.shape) for k, v in model.state_dict().items()}
        out["held_diff"] = float((model(x) - before).abs().max())
        out["held_after_forward"] = [u.numel() for u in _unsharded(model[1])]
        for m in fsdp_modules:
            m.reshard()
        out["resharded"] = type(model.state_dict()["1.up.weight"]).__name__
    out["output_dtype"] = str(_output_dtype_model()(x).dtype)
    for name, p in model.named_parameters():
        state = opt.state[p]
        out["params"][name] = {
            "sharded": isinstance(p, ShardedParameter),
            "global": tuple(p.global_shape), "local": tuple(p.shape),
            "owned": tuple(p.to_local().shape),
            "grad": tuple(p.grad.shape),
            "exp_avg": tuple(state["exp_avg"].shape),
            "padding_zero": bool((p.detach()[p.to_local().shape[0]:] == 0).all()) if
            p.ndim else True,
        }
    return out


def _unsharded(module) -> list:
    return [fp.unsharded for fp in module._fsdp_state.group.params]


def _step(model, opt, x, y) -> float:
    import genesis.distributed as dist
    from genesis import nn

    opt.zero_grad()
    loss = nn.functional.cross_entropy(model(x), y)
    loss.backward()
    nn.utils.clip_grad_norm_(model.parameters(), 0.5)
    opt.step()
    seen = loss.detach().clone()
    dist.all_reduce(seen, op=dist.ReduceOp.AVG)
    return float(seen)


def checkpoint_save(rank: int, n: int, directory: str, device: str = "cpu") -> dict:
    """Train 2 steps, save a sharded checkpoint, train 2 more (the curve a resume must
    repeat); also: state_dict() is sharded and load_state_dict takes it back."""
    import genesis
    from genesis.distributed.fsdp import ShardedTensor, save_sharded_checkpoint

    model = shard(make_model(device))
    x, y = batch(device)
    rows = slice(rank * BATCH // n, (rank + 1) * BATCH // n)
    opt = genesis.optim.AdamW(model.parameters(), lr=0.05, weight_decay=0.1)
    for _ in range(2):
        _step(model, opt, x[rows], y[rows])
    sd = model.state_dict()
    kinds = {k: type(v).__name__ for k, v in sd.items()}
    saved = {k: _np(v.full_tensor()) for k, v in sd.items() if isinstance(v, ShardedTensor)}
    kept = {k: genesis.Tensor.detach(v).clone() for k, v in sd.items()}
    save_sharded_checkpoint(directory, model, opt, extra={"step": 2}, config={"note": "x"})
    after = [_step(model, opt, x[rows], y[rows]) for _ in range(2)]
    changed = max(float((genesis.Tensor.detach(v) - kept[k]).abs().max()) for k, v in
                  sd.items())
    for k, v in sd.items():  # load_state_dict takes a sharded state dict back
        genesis.Tensor.detach(v).copy_(kept[k])
    model.load_state_dict(model.state_dict())
    restored = {k: _np(p.full_tensor()) for k, p in model.named_parameters()}
    return {"kinds": kinds, "saved": saved, "after": after, "changed": changed,
            "restored": restored}


def checkpoint_resume(rank: int, n: int, directory: str, device: str = "cpu") -> dict:
    """Load the checkpoint (saved by another world size) and train the same 2 steps."""
    import genesis
    from genesis.distributed.fsdp import load_sharded_checkpoint

    model = shard(make_model(device))
    x, y = batch(device)
    rows = slice(rank * BATCH // n, (rank + 1) * BATCH // n)
    opt = genesis.optim.AdamW(model.parameters(), lr=0.05, weight_decay=0.1)
    extra = load_sharded_checkpoint(directory, model, opt)
    loaded = {k: _np(p.full_tensor()) for k, p in model.named_parameters()}
    after = [_step(model, opt, x[rows], y[rows]) for _ in range(2)]
    return {"extra": extra, "loaded": loaded, "after": after}


def resave_killed(rank: int, n: int, directory: str) -> dict:
    """Save a checkpoint, change the weights and save again into the same directory; rank
    n - 1 dies in the second save once its file is written, before the index is."""
    import genesis
    from genesis.distributed.fsdp import save_sharded_checkpoint
    from genesis.distributed.group import ProcessGroup

    model = shard(make_model())
    save_sharded_checkpoint(directory, model, extra={"step": 1})
    first = {k: _np(v.full_tensor()) for k, v in model.state_dict().items()}
    with genesis.no_grad():
        for p in model.parameters():
            p.mul_(2.0)
    if rank == n - 1:
        real = ProcessGroup.exchange_objects

        def dying(self, obj, what):
            if what == "save_sharded_checkpoint":  # (the exchange after the files)
                os._exit(3)
            return real(self, obj, what)

        ProcessGroup.exchange_objects = dying
    try:
        save_sharded_checkpoint(directory, model, extra={"step": 2})
        return {"first": first, "error": None}
    except RuntimeError as exc:
        return {"first": first, "error": str(exc)}


def tiny_qwen(tied: bool = True):
    """A tiny genesis Qwen2 model (seeded), float32."""
    import genesis
    from genesis.models import Qwen2Config, QwenForCausalLM

    genesis.manual_seed(0)
    config = Qwen2Config(vocab_size=37, hidden_size=16, intermediate_size=24,
                         num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
                         tie_word_embeddings=tied)
    return QwenForCausalLM(config)


def qwen_training_and_save(rank: int, n: int, directory: str) -> dict:
    """A sharded tiny Qwen (per layer, then the root; tied embeddings) trains as the
    unsharded one on the whole batch, then saves a checkpoint with its config."""
    import genesis
    from genesis.distributed.fsdp import fully_shard, save_sharded_checkpoint

    reference = tiny_qwen()
    model = copy.deepcopy(reference)
    model.lm_head.weight = model.model.embed_tokens.weight  # (deepcopy keeps the tie too)
    for layer in model.model.layers:
        fully_shard(layer)
    fully_shard(model)
    ids = genesis.tensor(np.random.default_rng(2).integers(0, 37, (2 * n, 9)))
    mine = ids[rank * 2:(rank + 1) * 2]
    curves = []
    for net, tokens, average in ((reference, ids, False), (model, mine, True)):
        opt = genesis.optim.AdamW(net.parameters(), lr=0.01)
        losses = []
        for _ in range(3):
            opt.zero_grad()
            loss = net(tokens, labels=tokens).loss
            loss.backward()
            opt.step()
            seen = loss.detach().clone()
            if average:
                import genesis.distributed as dist
                dist.all_reduce(seen, op=dist.ReduceOp.AVG)
            losses.append(float(seen))
        curves.append(losses)
    config = model.config.to_dict()
    config["dtype"] = "float32"
    save_sharded_checkpoint(directory, model, config=config)
    full = {k: _np(v.full_tensor()) for k, v in model.state_dict().items()}
    return {"ref_losses": curves[0], "losses": curves[1], "full": full}


def killed_mid_step(rank: int, n: int, device: str) -> dict:
    """Rank n - 1 dies in the middle of a forward; the others must fail with a clear error
    (the group's timeout bounds the wait) instead of hanging."""
    import genesis.distributed as dist
    from genesis import nn

    model = shard(make_model(device))
    x, y = batch(device)
    nn.functional.cross_entropy(model(x), y).backward()
    dist.barrier()
    if rank == n - 1:
        model[2].register_forward_pre_hook(lambda m, args: os._exit(3))
    start = time.monotonic()
    try:
        for _ in range(3):
            nn.functional.cross_entropy(model(x), y).backward()
            dist.barrier()
        return {"error": None}
    except dist.DistBackendError as exc:
        return {"error": str(exc), "seconds": time.monotonic() - start}
    finally:
        dist.destroy_process_group()


def sft_run(rank: int, n: int, settings: dict) -> dict:
    """One rank of ``genesis-sft`` (as under torchrun: RANK and WORLD_SIZE set)."""
    from genesis.models.apps.sft import SFTConfig, train

    os.environ.update(RANK=str(rank), WORLD_SIZE=str(n), LOCAL_RANK=str(rank))
    record = train(SFTConfig(**settings))
    return {"history": record["history"], "finished": record["finished"],
            "steps": record["steps"]}


def _output_dtype_model():
    """bf16 compute, float32 out of the root: MixedPrecisionPolicy(output_dtype=...)."""
    import genesis
    from genesis.distributed.fsdp import MixedPrecisionPolicy, fully_shard

    model = make_model()
    for block in (model[1], model[2]):
        fully_shard(block, mp_policy=MixedPrecisionPolicy(param_dtype=genesis.bfloat16))
    return fully_shard(model, mp_policy=MixedPrecisionPolicy(
        param_dtype=genesis.bfloat16, output_dtype=genesis.float32))


def _error(fn) -> str | None:
    try:
        fn()
    except Exception as exc:  # noqa: BLE001 - the message is what the test checks
        return f"{type(exc).__name__}: {exc}"
    return None


def bad_inputs(rank: int, n: int, directory: str) -> dict:
    """Each misuse fails with an error naming what was wrong (and never hangs)."""
    import genesis
    from genesis import nn
    from genesis.distributed.fsdp import (
        fully_shard,
        load_sharded_checkpoint,
        save_sharded_checkpoint,
    )

    out = {}
    out["not_a_module"] = _error(lambda: fully_shard(genesis.zeros(3)))
    out["policy"] = _error(lambda: fully_shard(nn.Linear(2, 2), mp_policy={"dtype": 1}))
    twice = fully_shard(nn.Linear(2, 2))
    out["twice"] = _error(lambda: fully_shard(twice))
    mixed = nn.Linear(2, 2)
    mixed.bias = nn.Parameter(genesis.zeros(2, dtype=genesis.float64))
    out["mixed_dtypes"] = _error(lambda: fully_shard(mixed))
    # rank 1's model is wider: named on every rank, instead of a hang or wrong rows
    out["mismatch"] = _error(lambda: fully_shard(nn.Linear(4, 3 + rank)))
    # a block run on its own first became a root: the outer module then says so
    x = genesis.ones(2, 3)
    model = nn.Sequential(nn.Linear(3, 3), nn.Linear(3, 3))
    fully_shard(model[0])
    fully_shard(model)
    model[0](x)
    out["separate_root"] = _error(lambda: model(x))
    # a parameter without a gradient: the next forward names it
    two = nn.Module()
    two.a, two.b = nn.Linear(3, 2), nn.Linear(3, 2)
    two.forward = lambda x: (two.a(x), two.b(x))
    fully_shard(two.a)
    fully_shard(two)
    first, _ = two(x)
    first.sum().backward()  # b (the root's own) is left out of the loss
    out["no_grad_for"] = _error(lambda: two(x))
    # checkpoints: a model of another shape, JSON-less extras
    saved = shard(make_model())
    save_sharded_checkpoint(directory, saved)
    other = nn.Sequential(nn.Linear(IN, 9), nn.Linear(9, CLASSES))
    fully_shard(other)
    out["load_mismatch"] = _error(lambda: load_sharded_checkpoint(directory, other))
    out["extra_not_json"] = _error(
        lambda: save_sharded_checkpoint(directory, saved, extra={"f": object()}))
    out["no_optimizer"] = _error(lambda: load_sharded_checkpoint(
        directory, saved, genesis.optim.AdamW(saved.parameters())))
    return out


def skipped_block(rank: int, n: int) -> dict:
    """A forward that skips a block leaves that block's prefetched all-gather unused, and a
    forward with gradients on but no backward leaves the root gathered; after the shards
    change, the next forward must use neither."""
    import genesis
    from genesis import nn
    from genesis.distributed.fsdp import fully_shard

    class Net(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.stem, self.b1, self.b2 = nn.Linear(4, 4), nn.Linear(4, 4), nn.Linear(4, 4)

        def forward(self, x, skip: bool = False):
            h = self.b1(self.stem(x))
            return h if skip else self.b2(h)

    genesis.manual_seed(0)
    reference = Net()
    model = copy.deepcopy(reference)
    fully_shard(model.b1)
    fully_shard(model.b2)
    fully_shard(model)
    x = genesis.ones(2, 4)
    with genesis.no_grad():
        model(x)  # records the order stem/b1 -> b2
        model(x, skip=True)  # b1's forward prefetches b2, which does not run
        for p in (*model.b2.parameters(), *reference.b2.parameters()):
            p.mul_(2.0)  # (the sharded ones: this rank's rows)
        diff = float((model(x) - reference(x)).abs().max())
    model(x)  # with gradients on, but no backward: the root stays gathered ...
    with genesis.no_grad():
        for p in (*model.parameters(), *reference.parameters()):
            p.mul_(0.5)  # ... while its shards change
    again = model(x)  # no error about missing gradients, and no stale values
    return {"diff": diff, "diff_after_change": float((again - reference(x)).abs().max())}

"""CUDA graphs on a real GPU: capture/replay equals eager, private pools, memory back to its
baseline, the capture errors, make_graphed_callables, and whole training steps.

Results are compared for exact equality: a replay runs the very kernels (same
configurations, same inputs) that the eager run launches, and none of them uses atomics.
"""

from __future__ import annotations

import gc

import numpy as np
import pytest

pytestmark = pytest.mark.cuda

DEV = "cuda"


@pytest.fixture(scope="module")
def G():
    import genesis
    import genesis.nn  # noqa: F401 - used as genesis.nn
    import genesis.optim  # noqa: F401 - used as genesis.optim

    genesis.ones(1, device=DEV)  # lazy init
    return genesis


def host(t) -> np.ndarray:
    return t.detach().cpu().numpy()


def same(a, b) -> None:
    np.testing.assert_array_equal(host(a), host(b))


# ------------------------------------------------------------------ capture / replay
def _math(G, x, w):
    y = (x @ w).relu() * 2.0 + 1.0
    return y.sum(dim=1), y.amax(), (y - y.mean()).pow(2).mean(dim=0), G.softmax(y, dim=-1)


def test_replay_equals_eager(G):
    x = G.randn(64, 32, device=DEV)
    w = G.randn(32, 48, device=DEV)
    _math(G, x, w)  # warm-up: compiles and autotunes outside the capture
    g = G.cuda.CUDAGraph()
    with G.cuda.graph(g):
        static = _math(G, x, w)
    for _ in range(3):
        new = G.randn(64, 32, device=DEV)
        x.copy_(new)
        g.replay()
        for got, want in zip(static, _math(G, new, w)):
            same(got, want)


def test_replay_on_a_user_stream_and_graph_pool(G):
    x = G.randn(16, 16, device=DEV)
    _ = (x @ x).tanh()  # warm-up
    g = G.cuda.CUDAGraph()
    s = G.cuda.Stream()
    with G.cuda.graph(g, stream=s):
        y = (x @ x).tanh()
    assert isinstance(g.pool(), tuple)
    with G.cuda.stream(s):
        g.replay()
    s.synchronize()
    same(y, (x @ x).tanh())


def test_host_data_is_a_constant_of_the_graph(G):
    """Tensors made from host data during capture (the optimizers' pointer tables, say) are
    copied from a pinned buffer the graph owns, at every replay."""
    x = G.randn(3, device=DEV)
    _ = x + G.tensor([1.0, 2.0, 3.0], device=DEV)  # warm-up
    g = G.cuda.CUDAGraph()
    with G.cuda.graph(g):
        y = x + G.tensor([1.0, 2.0, 3.0], device=DEV)
    for _ in range(2):
        new = G.randn(3, device=DEV)
        x.copy_(new)
        g.replay()
        same(y, new + G.tensor([1.0, 2.0, 3.0], device=DEV))


def test_capture_on_legacy_default_stream_is_refused(G):
    g = G.cuda.CUDAGraph()
    with pytest.raises(RuntimeError, match="legacy default stream"):
        g.capture_begin()


# ------------------------------------------------------------------ memory
def test_pool_shared_between_graphs_reuses_memory(G):
    x = G.randn(256, 256, device=DEV)
    _ = x + 1.0  # warm-up
    g1, g2 = G.cuda.CUDAGraph(), G.cuda.CUDAGraph()
    with G.cuda.graph(g1):
        y1 = x + 1.0
    ptr = y1.data_ptr()
    del y1  # its memory goes back to g1's pool, not to ordinary allocations
    ordinary = G.empty(256, 256, device=DEV)
    assert ordinary.data_ptr() != ptr
    with G.cuda.graph(g2, pool=g1.pool()):
        y2 = x + 2.0
    assert y2.data_ptr() == ptr
    g2.replay()
    same(y2, x + 2.0)


def test_memory_returns_to_baseline_after_del(G):
    x = G.randn(512, 512, device=DEV)
    w = G.randn(512, 512, device=DEV)
    _math(G, x, w)
    gc.collect()
    G.cuda.synchronize()
    G.cuda.empty_cache()
    allocated, reserved = G.cuda.memory_allocated(), G.cuda.memory_reserved()
    g = G.cuda.CUDAGraph()
    with G.cuda.graph(g):
        outs = _math(G, x, w)
    g.replay()
    assert G.cuda.memory_allocated() > allocated
    del outs, g
    gc.collect()
    assert G.cuda.memory_allocated() == allocated
    assert G.cuda.memory_reserved() == reserved


def test_outputs_held_after_graph_deleted_stay_valid(G):
    x = G.randn(128, device=DEV)
    _ = x * 3.0  # warm-up
    g = G.cuda.CUDAGraph()
    with G.cuda.graph(g):
        y = x * 3.0
    g.replay()
    del g
    gc.collect()
    z = G.randn(128, device=DEV) * 0.0  # ordinary allocations must not overwrite y
    same(y, x * 3.0)
    del y, z


# ------------------------------------------------------------------ errors
def _capture_error_cases(G, x):
    return [
        ("item", lambda: x.sum().item(), "cannot read a tensor's value"),
        ("numpy", lambda: x.cpu(), "cannot copy a tensor to the host"),
        ("synchronize", lambda: G.cuda.synchronize(), "cannot synchronize the device"),
        ("stream sync", lambda: G.cuda.current_stream().synchronize(),
         "cannot synchronize a stream"),
        ("nonzero", lambda: G.nonzero(x > 0), "cannot compute nonzero"),
        ("mask index", lambda: x[x > 0], "cannot (compute nonzero|read a tensor's value)"),
        ("empty_cache", lambda: G.cuda.empty_cache(), "cannot empty the CUDA memory cache"),
    ]


def test_host_synchronising_ops_raise_during_capture(G):
    x = G.randn(64, device=DEV)
    _ = (x * 2.0, x > 0)  # warm-up
    for name, op, message in _capture_error_cases(G, x):
        g = G.cuda.CUDAGraph()
        with pytest.raises(G.cuda.GraphCaptureError, match=message):
            with G.cuda.graph(g):
                y = x * 2.0
                op()
        assert not G.cuda.is_current_stream_capturing(), name
        with pytest.raises(RuntimeError, match="replay"):
            g.replay()
    same(x * 2.0, G.tensor(host(x) * 2.0, device=DEV))  # the device is still usable
    del y


def test_random_fills_draw_new_numbers_at_every_replay(G):
    # the captured fills read seed and offset from the device; replay() advances them
    def work():
        return (G.rand(1000, device=DEV),
                G.nn.functional.dropout(G.ones(1000, device=DEV), 0.5, training=True))

    G.manual_seed(7)
    work()  # warm-up: compiles the kernels (the device-state variants too)
    g = G.cuda.CUDAGraph()
    with G.cuda.graph(g):
        u, d = work()
    G.manual_seed(11)
    draws = []
    for _ in range(3):
        g.replay()
        draws.append((host(u).copy(), host(d).copy()))
    assert not np.array_equal(draws[0][0], draws[1][0])
    assert not np.array_equal(draws[1][1], draws[2][1])
    # replay k draws what eager draws from the same generator state
    G.manual_seed(11)
    for uu, dd in draws:
        eu, ed = work()
        same(eu, G.tensor(uu, device=DEV))
        same(ed, G.tensor(dd, device=DEV))
    del g, u, d


def test_nested_capture_is_refused(G):
    x = G.randn(8, device=DEV)
    _ = x + 1.0  # warm-up
    outer = G.cuda.CUDAGraph()
    with pytest.raises(G.cuda.GraphCaptureError, match="cannot be nested"):
        with G.cuda.graph(outer):
            _ = x + 1.0
            with G.cuda.graph(G.cuda.CUDAGraph()):
                pass
    assert not G.cuda.is_current_stream_capturing()


# ------------------------------------------------------------------ make_graphed_callables
def _mlp(G):
    nn = G.nn
    return nn.Sequential(nn.Linear(16, 32), nn.GELU(), nn.Linear(32, 8)).to(DEV)


def test_make_graphed_callables_module_forward_backward(G):
    G.manual_seed(0)
    eager = _mlp(G)
    G.manual_seed(0)
    graphed = _mlp(G)
    sample = G.randn(4, 16, device=DEV, requires_grad=True)
    graphed = G.cuda.make_graphed_callables(graphed, (sample,))
    for _ in range(3):
        xg = G.randn(4, 16, device=DEV).requires_grad_()
        xe = xg.detach().clone().requires_grad_()
        out_g, out_e = graphed(xg), eager(xe)
        same(out_g, out_e)
        (out_g * out_g).sum().backward()
        (out_e * out_e).sum().backward()
        same(xg.grad, xe.grad)
        for pg, pe in zip(graphed.parameters(), eager.parameters()):
            same(pg.grad, pe.grad)
            pg.grad = pe.grad = None


def test_make_graphed_callables_functions(G):
    w = G.randn(16, 16, device=DEV, requires_grad=True)

    def f(a):
        return (a @ w).tanh()

    def h(a, b):
        return a * b + a, (a - b).sum(dim=0)

    samples = [G.randn(8, 16, device=DEV, requires_grad=True) for _ in range(3)]
    gf, gh = G.cuda.make_graphed_callables((f, h), ((samples[0],), tuple(samples[1:])))
    for _ in range(2):
        a = G.randn(8, 16, device=DEV, requires_grad=True)
        b = G.randn(8, 16, device=DEV, requires_grad=True)
        a2, b2 = a.detach().clone().requires_grad_(), b.detach().clone().requires_grad_()
        y, s = gh(gf(a), b)
        ye, se = h(f(a2), b2)
        same(y, ye)
        same(s, se)
        (y.sum() + s.sum()).backward()
        (ye.sum() + se.sum()).backward()
        same(a.grad, a2.grad)
        same(b.grad, b2.grad)
    with pytest.raises(ValueError, match="must match the sample"):
        gf(G.randn(4, 16, device=DEV, requires_grad=True))


# ------------------------------------------------------------------ whole training steps
class _Block:
    """A pre-norm attention block (causal SDPA, head dim 64) with an MLP."""

    @staticmethod
    def make(G):
        nn, F = G.nn, G.nn.functional

        class Block(nn.Module):
            def __init__(self, d=128, heads=2):
                super().__init__()
                self.heads = heads
                self.ln1, self.ln2 = nn.LayerNorm(d), nn.LayerNorm(d)
                self.qkv, self.proj = nn.Linear(d, 3 * d), nn.Linear(d, d)
                self.fc1, self.fc2 = nn.Linear(d, 4 * d), nn.Linear(4 * d, d)

            def forward(self, x):
                b, s, d = x.shape
                q, k, v = self.qkv(self.ln1(x)).chunk(3, dim=-1)
                q, k, v = (t.reshape(b, s, self.heads, d // self.heads).transpose(1, 2)
                           for t in (q, k, v))
                a = F.scaled_dot_product_attention(q, k, v, is_causal=True)
                x = x + self.proj(a.transpose(1, 2).reshape(b, s, d))
                return x + self.fc2(F.gelu(self.fc1(self.ln2(x))))

        return Block().to(DEV)


def _train_step(G, model, opt, x, y):
    opt.zero_grad(set_to_none=True)
    loss = G.nn.functional.mse_loss(model(x), y)
    loss.backward()
    G.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
    opt.step()
    return loss


def _sgd(G, params, capturable):
    return G.optim.SGD(params, lr=0.05, momentum=0.9)


def _adamw(G, params, capturable, **kwargs):
    return G.optim.AdamW(params, lr=1e-3, weight_decay=0.1, capturable=capturable, **kwargs)


def _check_training_step_capture(G, make_model, x_shape, y_shape, make_opt=_sgd, warmup=3,
                                 replays=5):
    """torch's static-input pattern: warm up on a side stream, capture one whole step
    (forward, backward, clip_grad_norm_, optimizer step), replay on new data; the graphed
    model must follow the eager one (the same optimizer, capturable) exactly, and an eager
    model with a non-capturable optimizer to within 1e-6 (issue 9's bound; the capturable
    step computes the same float64 bias corrections from a device count)."""
    models = []
    for _ in range(3):
        G.manual_seed(0)
        models.append(make_model(G))
    graphed, eager, plain = models
    opt_g = make_opt(G, graphed.parameters(), True)
    opt_e = make_opt(G, eager.parameters(), True)
    opt_p = make_opt(G, plain.parameters(), False)
    data = [(G.randn(*x_shape, device=DEV), G.randn(*y_shape, device=DEV))
            for _ in range(warmup + replays)]
    static_x, static_y = data[0][0].clone(), data[0][1].clone()

    side = G.cuda.Stream()
    side.wait_stream(G.cuda.current_stream())
    with G.cuda.stream(side):
        for x, y in data[:warmup]:
            static_x.copy_(x)
            static_y.copy_(y)
            _train_step(G, graphed, opt_g, static_x, static_y)
    G.cuda.current_stream().wait_stream(side)
    for x, y in data[:warmup]:
        _train_step(G, eager, opt_e, x, y)
        _train_step(G, plain, opt_p, x, y)

    g = G.cuda.CUDAGraph()
    opt_g.zero_grad(set_to_none=True)  # grads are then allocated from the graph's pool
    with G.cuda.graph(g):
        static_loss = _train_step(G, graphed, opt_g, static_x, static_y)
    for x, y in data[warmup:]:
        static_x.copy_(x)
        static_y.copy_(y)
        g.replay()
        loss = _train_step(G, eager, opt_e, x, y)
        _train_step(G, plain, opt_p, x, y)
        same(static_loss, loss)
        for pg, pe, pp in zip(graphed.parameters(), eager.parameters(), plain.parameters()):
            same(pg, pe)
            np.testing.assert_allclose(host(pg), host(pp), rtol=0, atol=1e-6)
    for p in graphed.parameters():  # the count advanced on the device at every replay
        step = opt_g.state[p].get("step")
        if step is not None:
            assert float(step) == warmup + replays


def test_training_step_capture_mlp(G):
    _check_training_step_capture(G, _mlp, (32, 16), (32, 8))


def test_training_step_capture_attention_block(G):
    _check_training_step_capture(G, _Block.make, (2, 16, 128), (2, 16, 128))


@pytest.mark.parametrize("kwargs", [{}, {"amsgrad": True}, {"foreach": False}],
                         ids=["multi-tensor", "amsgrad", "single-tensor"])
def test_training_step_capture_with_capturable_adamw(G, kwargs):
    _check_training_step_capture(
        G, _mlp, (32, 16), (32, 8), lambda G, ps, cap: _adamw(G, ps, cap, **kwargs))


def test_training_step_capture_attention_block_adamw(G):
    _check_training_step_capture(G, _Block.make, (2, 16, 128), (2, 16, 128), _adamw)


def test_capturable_adamw_reads_a_tensor_lr_at_every_replay(G):
    G.manual_seed(0)
    graphed = _mlp(G)
    G.manual_seed(0)
    eager = _mlp(G)
    lr = G.tensor(1e-3, device=DEV)
    opt_g = G.optim.AdamW(graphed.parameters(), lr=lr, capturable=True)
    opt_e = G.optim.AdamW(eager.parameters(), lr=1e-3, capturable=True)
    x, y = G.randn(32, 16, device=DEV), G.randn(32, 8, device=DEV)
    _train_step(G, graphed, opt_g, x, y)
    _train_step(G, eager, opt_e, x, y)
    g = G.cuda.CUDAGraph()
    opt_g.zero_grad(set_to_none=True)
    with G.cuda.graph(g):
        _train_step(G, graphed, opt_g, x, y)
    for new_lr in (1e-3, 5e-4, 2e-4):  # a schedule: written into the tensor between replays
        lr.fill_(new_lr)
        opt_e.param_groups[0]["lr"] = float(lr.item())
        g.replay()
        _train_step(G, eager, opt_e, x, y)
        for pg, pe in zip(graphed.parameters(), eager.parameters()):
            same(pg, pe)


def test_non_capturable_adam_step_is_refused_during_capture(G):
    model = _mlp(G)
    x, y = G.randn(32, 16, device=DEV), G.randn(32, 8, device=DEV)
    for cls in (G.optim.Adam, G.optim.AdamW):
        opt = cls(model.parameters(), lr=1e-3)
        _train_step(G, model, opt, x, y)  # warm-up: the state exists
        before = [host(p) for p in model.parameters()]
        with pytest.raises(G.cuda.GraphCaptureError,
                           match=f"{cls.__name__} with capturable=False.*capturable=True"):
            with G.cuda.graph(G.cuda.CUDAGraph()):
                _train_step(G, model, opt, x, y)
        assert not G.cuda.is_current_stream_capturing()
        for p, b in zip(model.parameters(), before):  # nothing ran
            np.testing.assert_array_equal(host(p), b)
    _train_step(G, model, opt, x, y)  # the device and the optimizer still work


def test_capturable_adam_without_warm_up_is_refused_during_capture(G):
    model = _mlp(G)
    x, y = G.randn(32, 16, device=DEV), G.randn(32, 8, device=DEV)
    warm = G.optim.AdamW(model.parameters(), lr=1e-3, capturable=True)
    _train_step(G, model, warm, x, y)  # compiles every kernel; ``opt`` below has no state
    opt = G.optim.AdamW(model.parameters(), lr=1e-3, capturable=True)
    with pytest.raises(G.cuda.GraphCaptureError, match="warm-up"):
        with G.cuda.graph(G.cuda.CUDAGraph()):
            _train_step(G, model, opt, x, y)
    assert not opt.state


def test_capturable_adam_with_an_lr_tensor_on_the_cpu_is_refused_during_capture(G):
    model = _mlp(G)
    x, y = G.randn(32, 16, device=DEV), G.randn(32, 8, device=DEV)
    opt = G.optim.AdamW(model.parameters(), lr=G.tensor(1e-3), capturable=True)
    _train_step(G, model, opt, x, y)  # eager: the CPU lr is read on the host
    with pytest.raises(G.cuda.GraphCaptureError, match="lr a tensor on cpu"):
        with G.cuda.graph(G.cuda.CUDAGraph()):
            _train_step(G, model, opt, x, y)

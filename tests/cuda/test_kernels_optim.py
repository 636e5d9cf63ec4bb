"""genesis_cuda's multi-tensor optimizer kernels against torch.optim's fused steps.

Runs under the Triton interpreter on the CPU too (``TRITON_INTERPRET=1``), at small sizes
(chunks shrunk so every tensor spans several programs).
"""

from __future__ import annotations

import pytest
import torch

from genesis import dtypes as D

pytestmark = pytest.mark.cuda
pytest.importorskip("triton")

from kernel_arrays import DEV, INTERPRET, TORCH, dev, host, wrap  # noqa: E402

from genesis_cuda.kernels import optim  # noqa: E402

SHAPES = [(40, 3), (5,), (), (0, 4), (130,)]
STEPS = 3


@pytest.fixture(autouse=True)
def _small_chunks(monkeypatch):
    monkeypatch.setattr(optim, "BLOCK", 32)
    monkeypatch.setattr(optim, "CHUNK", 64)
    monkeypatch.setattr(optim, "_tables", {})
    if INTERPRET:  # the table goes to a torch-backed view instead of the GPU
        monkeypatch.setattr(optim, "upload", lambda host, device: wrap(torch.from_numpy(host)))


def _tensors(dtype, seed):
    g = torch.Generator().manual_seed(seed)
    return [torch.randn(s, generator=g).to(TORCH[dtype]).to(DEV) for s in SHAPES]


def _tol(dtype):
    # The reference rounds float64 math once per stored value; the kernel rounds float32
    # math (and Triton's interpreter truncates float32 -> bf16 instead of rounding): a
    # stored half value may land one ulp (2**-7 relative for bf16) away each step, and the
    # next step starts from it: up to STEPS ulps.
    return {} if dtype is D.float32 else {"rtol": STEPS * 2**-7, "atol": 1e-2}


def _reference(params, opt_cls, **kwargs):
    """torch.optim in float64 on copies of ``params``; ``step(grads)`` steps it and then
    rounds the parameters and the state to the parameters' dtype, as a kernel that keeps
    them in that dtype stores them. (torch's own fused CPU step is not the reference:
    for bf16 SGD it is off by far more than rounding.)"""
    dtype = params[0].dtype
    ref = [p.double().requires_grad_() for p in params]
    opt = opt_cls(ref, foreach=False, **kwargs)

    def step(grads):
        for r, g in zip(ref, grads):
            r.grad = g.double()
        opt.step()
        with torch.no_grad():
            for r in ref:
                r.copy_(r.to(dtype))
                for v in opt.state[r].values():
                    if isinstance(v, torch.Tensor) and v.is_floating_point() and v.ndim == r.ndim:
                        v.copy_(v.to(dtype))

    return ref, opt, step


@pytest.mark.parametrize("dtype", [D.float32, D.bfloat16, D.float16], ids=str)
@pytest.mark.parametrize("amsgrad,maximize,decoupled,wd",
                         [(False, False, True, 0.1), (True, True, True, 0.0),
                          (False, False, False, 0.05), (True, False, False, 0.0)])
def test_adam_step_matches_torch(dtype, amsgrad, maximize, decoupled, wd):
    params = _tensors(dtype, 0)
    cls = torch.optim.AdamW if decoupled else torch.optim.Adam
    ref, opt, ref_step = _reference(params, cls, lr=0.01, betas=(0.9, 0.99), weight_decay=wd,
                                    amsgrad=amsgrad, maximize=maximize)
    ms = [torch.zeros_like(p) for p in params]
    vs = [torch.zeros_like(p) for p in params]
    mx = [torch.zeros_like(p) for p in params] if amsgrad else None
    for step in range(1, STEPS + 1):
        grads = _tensors(dtype, step)
        ref_step(grads)
        optim.adam_step([dev(p) for p in params], [dev(g) for g in grads],
                        [dev(m) for m in ms], [dev(v) for v in vs],
                        None if mx is None else [dev(x) for x in mx], step, 0.01, 0.9, 0.99,
                        1e-8, wd, decoupled, maximize)
        if DEV == "cuda":
            torch.cuda.synchronize()
        for p, r in zip(params, ref):
            torch.testing.assert_close(p, r.detach().to(p.dtype), **_tol(dtype))
    for m, v, r in zip(ms, vs, ref):
        torch.testing.assert_close(m, opt.state[r]["exp_avg"].to(m.dtype), **_tol(dtype))
        torch.testing.assert_close(v, opt.state[r]["exp_avg_sq"].to(v.dtype), **_tol(dtype))


@pytest.mark.parametrize("dtype", [D.float32, D.bfloat16], ids=str)
@pytest.mark.parametrize("momentum,dampening,nesterov,wd,maximize",
                         [(0.0, 0.0, False, 0.0, False), (0.9, 0.0, True, 0.01, False),
                          (0.9, 0.3, False, 0.0, True)])
def test_sgd_step_matches_torch(dtype, momentum, dampening, nesterov, wd, maximize):
    params = _tensors(dtype, 0)
    ref, _, ref_step = _reference(params, torch.optim.SGD, lr=0.05, momentum=momentum,
                                  dampening=dampening, nesterov=nesterov, weight_decay=wd,
                                  maximize=maximize)
    bufs = [None] * len(params)
    for step in range(1, STEPS + 1):
        grads = _tensors(dtype, step)
        ref_step(grads)
        bufs = optim.sgd_step([dev(p) for p in params], [dev(g) for g in grads], bufs, 0.05,
                              momentum, dampening, wd, nesterov, maximize)
        assert len(bufs) == len(params)
        assert all((b is None) == (momentum == 0) for b in bufs)
    if DEV == "cuda":  # the kernels run on genesis's stream: finish before reading back
        torch.cuda.synchronize()
    for p, r in zip(params, ref):
        torch.testing.assert_close(p, r.detach().to(p.dtype), **_tol(dtype))


def test_strided_arrays_take_the_composite():
    from genesis_cuda.kernels import optim as k

    assert not k._usable([dev(torch.zeros(4, 4, device=DEV).t())])
    assert not k._usable([dev(torch.zeros(4, device=DEV, dtype=torch.float64))])
    assert k._usable([dev(torch.zeros(4, device=DEV))])


# ---------------------------------------------- multi-tensor norm, scale, GradScaler unscale
@pytest.mark.parametrize("dtype", [D.float32, D.bfloat16], ids=str)
@pytest.mark.parametrize("norm_type", [2.0, float("inf")])
def test_multi_tensor_norm(dtype, norm_type):
    from genesis_cuda.kernels import multi_tensor as mt

    arrays = _tensors(dtype, 5)
    got = host(mt.multi_tensor_norm([dev(a) for a in arrays], norm_type))
    assert got.dtype is torch.float32 and got.shape == ()
    flat = torch.cat([a.double().reshape(-1) for a in arrays])
    torch.testing.assert_close(got.double(), torch.linalg.vector_norm(flat, norm_type),
                               rtol=1e-6, atol=0)
    arrays[1][2] = float("nan")
    assert torch.isnan(host(mt.multi_tensor_norm([dev(a) for a in arrays], norm_type)))


@pytest.mark.parametrize("dtype", [D.float32, D.bfloat16], ids=str)
def test_multi_tensor_scale_and_unscale(dtype):
    from genesis_cuda.kernels import multi_tensor as mt

    arrays = _tensors(dtype, 6)
    want = [(a.float() * 0.3).to(a.dtype) for a in arrays]
    mt.multi_tensor_scale_([dev(a) for a in arrays], dev(torch.tensor(0.3, device=DEV)))
    exact = {"rtol": 0, "atol": 0} if dtype is D.float32 else {}  # (bf16: interpreter
    for a, w in zip(arrays, want):                                 # truncation, one ulp)
        torch.testing.assert_close(a, w, **exact)
    found = torch.zeros((), device=DEV)
    inv = torch.tensor(0.25, device=DEV)
    mt.amp_unscale_([dev(a) for a in arrays], dev(inv), dev(found))
    assert float(found) == 0.0
    arrays[4][7] = float("inf")
    mt.amp_unscale_([dev(a) for a in arrays], dev(inv), dev(found))
    assert float(found) == 1.0
    torch.testing.assert_close(arrays[0], (want[0].float() * 0.0625).to(arrays[0].dtype))


def test_unaligned_arrays_give_the_same_step():
    # a parameter starting 4 bytes into its storage: the kernel drops its vector-load hints
    base = torch.randn(131, device=DEV)
    aligned_p, unaligned_p = base[1:].clone(), base.clone()[1:]
    assert unaligned_p.data_ptr() % 16 and not optim._table([[dev(unaligned_p)]], 0)[2]
    g = torch.randn(130, device=DEV)
    for p in (aligned_p, unaligned_p):
        m, v = torch.zeros(130, device=DEV), torch.zeros(130, device=DEV)
        optim.adam_step([dev(p)], [dev(g)], [dev(m)], [dev(v)], None, 1, 0.1, 0.9, 0.999, 1e-8,
                        0.01, True, False)
    torch.testing.assert_close(unaligned_p, aligned_p, rtol=0, atol=0)


# ---------------------------------------------- capturable: step counts in device memory
@pytest.mark.parametrize("dtype", [D.float32, D.bfloat16], ids=str)
@pytest.mark.parametrize("amsgrad,decoupled,wd,lr_array",
                         [(False, True, 0.1, False), (True, True, 0.1, True),
                          (True, False, 0.05, False), (False, False, 0.0, True)])
def test_adam_step_with_device_counts_equals_host_steps(dtype, amsgrad, decoupled, wd,
                                                        lr_array):
    # Both ways compute the bias corrections in the kernel from the count (an argument, or
    # each tensor's float32 count read from device memory): the same bits.
    lr = torch.tensor(0.01, device=DEV)
    runs = []
    for device_counts in (False, True):
        params = _tensors(dtype, 0)
        ms = [torch.zeros_like(p) for p in params]
        vs = [torch.zeros_like(p) for p in params]
        mx = [torch.zeros_like(p) for p in params] if amsgrad else None
        counts = [torch.zeros((), device=DEV) for _ in params]
        for step in range(1, STEPS + 1):
            grads = _tensors(dtype, step)
            optim.adam_step([dev(p) for p in params], [dev(g) for g in grads],
                            [dev(m) for m in ms], [dev(v) for v in vs],
                            None if mx is None else [dev(x) for x in mx],
                            [dev(c) for c in counts] if device_counts else step,
                            dev(lr) if lr_array and device_counts else float(lr), 0.9, 0.99,
                            1e-8, wd, decoupled, False)
        if DEV == "cuda":
            torch.cuda.synchronize()
        runs.append((params, ms, vs, mx or [], counts))
    (p0, m0, v0, x0, _), (p1, m1, v1, x1, counts) = runs
    for a, b in zip(p0 + m0 + v0 + x0, p1 + m1 + v1 + x1):
        torch.testing.assert_close(b, a, rtol=0, atol=0)
    assert [float(c) for c in counts] == [float(STEPS)] * len(counts)


def test_adam_step_with_device_counts_matches_torch_capturable():
    params = _tensors(D.float32, 0)
    ref, opt, ref_step = _reference(params, torch.optim.AdamW, lr=0.01, betas=(0.9, 0.99),
                                    weight_decay=0.1)
    ms = [torch.zeros_like(p) for p in params]
    vs = [torch.zeros_like(p) for p in params]
    counts = [torch.zeros((), device=DEV) for _ in params]
    for step in range(1, STEPS + 1):
        grads = _tensors(D.float32, step)
        ref_step(grads)
        optim.adam_step([dev(p) for p in params], [dev(g) for g in grads], [dev(m) for m in ms],
                        [dev(v) for v in vs], None, [dev(c) for c in counts], 0.01, 0.9, 0.99,
                        1e-8, 0.1, True, False)
    if DEV == "cuda":
        torch.cuda.synchronize()
    for p, r in zip(params, ref):
        torch.testing.assert_close(p, r.detach().float())


def test_device_counts_of_another_dtype_take_the_composite():
    assert optim._device_scalars([dev(torch.zeros((), device=DEV))], 0)
    assert not optim._device_scalars([dev(torch.zeros((), device=DEV, dtype=torch.float64))],
                                     0)
    assert not optim._device_scalars([dev(torch.zeros(2, device=DEV))], 0)


def test_table_layout_lists_every_chunk_of_every_tensor():
    """The address-free part of the table: element counts, then each chunk's tensor and
    start (CHUNK is 64 here), zero-size tensors owning no chunk."""
    shapes = ((130,), (0, 4), (), (64,), (2, 65))
    layout = optim._layout(shapes)
    sizes = [130, 0, 1, 64, 130]
    owner = [0, 0, 0, 2, 3, 4, 4, 4]
    starts = [0, 64, 128, 0, 0, 0, 64, 128]
    assert layout.tolist() == sizes + owner + starts
    assert optim._layout(shapes) is layout  # cached by the shapes

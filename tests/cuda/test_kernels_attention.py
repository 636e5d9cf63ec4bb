"""Flash attention kernels (``genesis_cuda.kernels.attention``) against torch.

The kernel-level tests feed torch tensors through ``kernel_arrays.dev`` (no copy) and also run
under the Triton interpreter on the CPU (``TRITON_INTERPRET=1``, small shapes). The tests at
the bottom go through ``genesis.nn.functional.scaled_dot_product_attention`` on a GPU.

Tolerances: the reference is torch's attention in float32 on the same half-precision inputs.
A flash kernel rounds the attention weights P (and dS in the backward) to the input dtype
before its P.V (dS.K, dS^T.Q) products, as every flash kernel does, so an element's error is
about one rounding of the weights times the size of the tensor it multiplies, not of the
element itself: we compare normwise, allowing 2e-2 (bfloat16, 8 mantissa bits) or 5e-3
(float16, 11 bits) of the largest reference value (at least 1) per element. Measured: about
2.5x the error of torch's own CPU bfloat16 attention against the same reference (which keeps
its weights in float32).
"""

from __future__ import annotations

import pytest
import torch

pytestmark = pytest.mark.cuda
triton = pytest.importorskip("triton")  # the kernels are Triton code; CI machines may lack it

import triton.language as tl  # noqa: E402
from kernel_arrays import DEV, INTERPRET, dev, host, sync  # noqa: E402

from genesis_cuda.generator import PhiloxGenerator  # noqa: E402
from genesis_cuda.kernels import attention as A  # noqa: E402
from genesis_cuda.kernels import attention_backward as AB  # noqa: E402
from genesis_cuda.kernels import attention_decode as AD  # noqa: E402

TOL = {torch.bfloat16: 2e-2, torch.float16: 5e-3}
TF = torch.nn.functional


def _inputs(b, hq, hk, n_q, n_k, d, dtype, seed=0):
    g = torch.Generator().manual_seed(seed)
    q, k, v = (torch.randn(b, h, n, d, generator=g).to(dtype).to(DEV)
               for h, n in ((hq, n_q), (hk, n_k), (hk, n_k)))
    return q, k, v


def _reference(q, k, v, mask=None, causal=False, scale=None, grad=None, keep=None, p=0.0):
    """torch in float32 (dropout: the given keep mask): output and (dq, dk, dv)."""
    qf, kf, vf = (t.detach().float().requires_grad_(True) for t in (q, k, v))
    rep = q.shape[1] // k.shape[1]
    kr, vr = kf.repeat_interleave(rep, 1), vf.repeat_interleave(rep, 1)
    s = qf @ kr.transpose(-2, -1) * (q.shape[-1] ** -0.5 if scale is None else scale)
    if causal:
        n_q, n_k = q.shape[2], k.shape[2]
        s = s.masked_fill(torch.ones(n_q, n_k, dtype=torch.bool, device=q.device)
                          .tril().logical_not(), float("-inf"))
    if mask is not None:
        s = s.masked_fill(mask.logical_not(), float("-inf")) if mask.dtype is torch.bool \
            else s + mask.float()
    dead = (s == float("-inf")).all(-1, keepdim=True)
    w = torch.where(dead, 0.0, torch.softmax(torch.where(dead, 0.0, s), -1))
    if keep is not None:
        w = w * keep / (1.0 - p)
    out = w @ vr
    if grad is None:
        return out, None
    out.backward(grad.float())
    return out.detach(), (qf.grad, kf.grad, vf.grad)


def _run(q, k, v, mask=None, causal=False, scale=None, p=0.0, gen=None, grad=None):
    scale = q.shape[-1] ** -0.5 if scale is None else scale
    res = A.scaled_dot_product_attention(dev(q), dev(k), dev(v),
                                         None if mask is None else dev(mask), p, causal, scale,
                                         gen)
    assert res is not None
    out, lse, rng = res
    grads = None
    if grad is not None:
        grads = AB.scaled_dot_product_attention_backward(
            dev(grad), dev(q), dev(k), dev(v), out, lse, None if mask is None else dev(mask),
            p, causal, scale, rng)
        grads = tuple(host(x) for x in grads)
    return host(out), host(lse), grads


def _close(got, ref, dtype, msg=None):
    tol = TOL[dtype]
    ref = ref.float().cpu()
    size = max(1.0, ref.abs().max().item()) if ref.numel() else 1.0
    torch.testing.assert_close(got.float().cpu(), ref, atol=tol * size, rtol=tol, msg=msg)


# (B, Hq, Hk, L, S, D): odd lengths, L != S, GQA 2:1 and 4:1, a single row
SHAPES = [(1, 2, 2, 20, 20, 32), (2, 4, 2, 33, 33, 64), (1, 4, 1, 17, 40, 32),
          (1, 2, 1, 70, 45, 16), (1, 1, 1, 1, 9, 64)]
if not INTERPRET:
    SHAPES += [(2, 8, 2, 1000, 1000, 128), (1, 16, 4, 1031, 1031, 64),
               (2, 4, 4, 300, 777, 128)]


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16], ids=str)
@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("shape", SHAPES, ids=str)
def test_forward_backward(shape, causal, dtype):
    b, hq, hk, n_q, n_k, d = shape
    q, k, v = _inputs(b, hq, hk, n_q, n_k, d, dtype, seed=n_q)
    grad = torch.randn(b, hq, n_q, d, generator=torch.Generator().manual_seed(1)).to(dtype)
    grad = grad.to(DEV)
    out, lse, grads = _run(q, k, v, causal=causal, grad=grad)
    ref, ref_grads = _reference(q, k, v, causal=causal, grad=grad)
    assert out.dtype == dtype and tuple(out.shape) == (b, hq, n_q, d)
    _close(out, ref, dtype, "out")
    # the logsumexp of each row's scaled scores, in float32
    s = q.float() @ k.float().repeat_interleave(hq // hk, 1).transpose(-2, -1) * d ** -0.5
    if causal:
        s = s.masked_fill(torch.ones(n_q, n_k, dtype=torch.bool, device=s.device).tril()
                          .logical_not(), float("-inf"))
    torch.testing.assert_close(lse.cpu(), torch.logsumexp(s, -1).cpu(), atol=1e-3, rtol=1e-3)
    for name, got, want, like in zip("qkv", grads, ref_grads, (q, k, v)):
        assert got.dtype == dtype and got.shape == like.shape, name
        _close(got, want, dtype, f"d{name}")


def test_strided_inputs_and_scale():
    """q/k/v as transposed views of (B, S, H, D) projections, as a model makes them."""
    b, n, hq, hk, d = 2, 37, 4, 2, 32
    g = torch.Generator().manual_seed(5)
    q = torch.randn(b, n, hq, d, generator=g).to(torch.bfloat16).to(DEV).transpose(1, 2)
    k = torch.randn(b, n, hk, d, generator=g).to(torch.bfloat16).to(DEV).transpose(1, 2)
    v = torch.randn(b, n, hk, d, generator=g).to(torch.bfloat16).to(DEV).transpose(1, 2)
    grad = torch.randn(b, n, hq, d, generator=g).to(torch.bfloat16).to(DEV).transpose(1, 2)
    out, _, grads = _run(q, k, v, causal=True, scale=0.3, grad=grad)
    ref, ref_grads = _reference(q, k, v, causal=True, scale=0.3, grad=grad)
    _close(out, ref, torch.bfloat16)
    for got, want in zip(grads, ref_grads):
        _close(got, want, torch.bfloat16)


def test_output_lies_query_major():
    """The (B, H, L, D) output lies in memory as (B, L, H, D), so the output projection's
    input ``out.transpose(1, 2).reshape(B, L, H * D)`` is a view; the backward reads it with
    those strides (the other tests' gradients)."""
    b, hq, hk, n, d = 2, 4, 2, 19, 32
    q, k, v = _inputs(b, hq, hk, n, n, d, torch.bfloat16, seed=4)
    out, _, _ = A.scaled_dot_product_attention(dev(q), dev(k), dev(v), None, 0.0, True,
                                               d ** -0.5, None)
    assert out.shape == (b, hq, n, d)
    assert out.strides == (n * hq * d, d, hq * d, 1)
    _close(host(out), _reference(q, k, v, causal=True)[0], torch.bfloat16)


@pytest.mark.parametrize("query_major", ["", "qkv", "v", "qk"])
def test_gradients_lie_as_their_inputs(query_major):
    """dq, dk and dv lie in memory as q, k and v do: query-major where the input is a
    transposed view of a (B, S, H, D) projection (its gradient then flows back into the
    projection as a view), head-major otherwise; mixed too, as a model with a composite
    rotary embedding has them (q and k rotated into new head-major tensors, v a view)."""
    b, hq, hk, n, d = 2, 4, 2, 23, 32
    g = torch.Generator().manual_seed(6)

    def make(h, name):
        if name in query_major:
            return torch.randn(b, n, h, d, generator=g).to(torch.bfloat16).to(DEV).transpose(1, 2)
        return torch.randn(b, h, n, d, generator=g).to(torch.bfloat16).to(DEV)

    q, k, v, grad = make(hq, "q"), make(hk, "k"), make(hk, "v"), make(hq, "")
    out, lse, rng = A.scaled_dot_product_attention(dev(q), dev(k), dev(v), None, 0.0, True,
                                                   d ** -0.5, None)
    grads = AB.scaled_dot_product_attention_backward(dev(grad), dev(q), dev(k), dev(v), out,
                                                    lse, None, 0.0, True, d ** -0.5, rng)
    _, ref_grads = _reference(q, k, v, causal=True, grad=grad)
    for got, like, want in zip(grads, (q, k, v), ref_grads):
        assert got.shape == tuple(like.shape) and got.strides == like.stride()
        _close(host(got), want, torch.bfloat16)


@pytest.mark.parametrize("kind", ["key_padding", "bool", "float", "dead_rows"])
def test_masks(kind):
    b, hq, hk, n_q, n_k, d = 2, 4, 2, 19, 29, 32
    dtype = torch.float16
    q, k, v = _inputs(b, hq, hk, n_q, n_k, d, dtype, seed=3)
    g = torch.Generator().manual_seed(4)
    if kind == "key_padding":  # (B, 1, 1, S): the last keys of sequence 1 are padding
        pad = torch.zeros(b, n_k, dtype=torch.bool)
        pad[1, 20:] = True
        mask = pad.logical_not()[:, None, None, :]
    elif kind == "bool":  # (L, S), broadcast over batch and heads
        mask = torch.rand(n_q, n_k, generator=g) > 0.3
        mask[:, 0] = True
    elif kind == "float":  # (B, Hq, L, S) additive, with some -inf
        mask = torch.randn(b, hq, n_q, n_k, generator=g)
        mask[..., 3] = float("-inf")
        mask = mask.to(dtype)
    else:  # rows 2 and 5 may attend nowhere: zeros out, zero gradients
        mask = torch.ones(b, 1, n_q, n_k, dtype=torch.bool)
        mask[:, :, 2] = False
        mask[0, :, 5] = False
    mask = mask.to(DEV)
    full = mask.expand(b, hq, n_q, n_k)  # what genesis passes: a zero-stride view
    grad = torch.randn(b, hq, n_q, d, generator=g).to(dtype).to(DEV)
    out, lse, grads = _run(q, k, v, mask=full, grad=grad)
    ref, ref_grads = _reference(q, k, v, mask=full, grad=grad)
    _close(out, ref, dtype, "out")
    for name, got, want in zip("qkv", grads, ref_grads):
        _close(got, want, dtype, f"d{name}")
    if kind == "dead_rows":
        assert (out[:, :, 2] == 0).all() and (grads[0][:, :, 2] == 0).all()
        assert torch.isinf(lse[:, :, 2]).all() and not torch.isnan(out).any()


# (forward, dK/dV, dQ) tiles that make the small shapes span many blocks, with BM != BN both
# ways round: every loop (left of the diagonal, on it, the ragged end) and its masking runs;
# each kernel both through TMA descriptors and through pointers, dK/dV in both orientations
T = A.Tile
TILES = [(T(16, 32, 4, 2, tma=True), T(16, 32, 4, 2, trans=True), T(32, 16, 4, 2, tma=True)),
         (T(32, 16, 4, 2), T(32, 16, 4, 2, tma=True), T(16, 32, 4, 2)),
         (T(32, 16, 4, 2), T(16, 32, 4, 2, tma=True, trans=True), T(16, 32, 4, 2, tma=True)),
         (T(16, 32, 4, 2, tma=True, maxnreg=128), T(32, 16, 4, 2), T(32, 16, 4, 2))]


@pytest.mark.parametrize("case", ["causal", "causal_L<S", "full_L>S", "bool_mask", "float_mask",
                                  "dropout"])
@pytest.mark.parametrize("tiles", TILES, ids=["a", "b", "c", "d"])
def test_tile_shapes(tiles, case, monkeypatch):
    d = 32
    for table, tile in zip((A.FWD_TILES, AB.DKDV_TILES, AB.DQ_TILES), tiles):
        monkeypatch.setitem(table, d, tile)
    b, hq, hk, n_q, n_k = 2, 4, 2, 70, 70
    if case == "causal_L<S":
        n_q, n_k = 45, 77
    elif case == "full_L>S":
        n_q, n_k = 77, 45
    dtype = torch.bfloat16
    q, k, v = _inputs(b, hq, hk, n_q, n_k, d, dtype, seed=n_q + n_k)
    g = torch.Generator().manual_seed(9)
    grad = torch.randn(b, hq, n_q, d, generator=g).to(dtype).to(DEV)
    causal = case in ("causal", "causal_L<S", "bool_mask", "dropout")
    mask = keep = gen = None
    p = 0.0
    if case == "bool_mask":
        mask = (torch.rand(b, 1, n_q, n_k, generator=g) > 0.2).to(DEV).expand(b, hq, n_q, n_k)
    elif case == "float_mask":
        mask = torch.randn(b, hq, n_q, n_k, generator=g).to(dtype).to(DEV)
    elif case == "dropout":
        p, gen = 0.25, PhiloxGenerator(0, 77)
        n = b * hq * n_q * n_k
        keep = torch.empty(n, dtype=torch.int8, device=DEV)
        _keep_mask[(triton.cdiv(n, 1024),)](keep, 77, 0, p, n)
        sync()
        keep = keep.view(b, hq, n_q, n_k).bool()
    out, _, grads = _run(q, k, v, mask=mask, causal=causal, p=p, gen=gen, grad=grad)
    ref, ref_grads = _reference(q, k, v, mask=mask, causal=causal, grad=grad, keep=keep, p=p)
    _close(out, ref, dtype, "out")
    for name, got, want in zip("qkv", grads, ref_grads):
        _close(got, want, dtype, f"d{name}")


@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("d", [64, 128])
def test_tma_path_at_the_table_tiles(d, causal, monkeypatch):
    """The shipped tiles of each head dim with every kernel reading through TMA, on
    (B, S, H, D) projections seen as (B, H, S, D) (row stride H * D) with ragged lengths."""
    for table in (A.FWD_TILES, AB.DKDV_TILES, AB.DQ_TILES):
        monkeypatch.setitem(table, d, table[d]._replace(tma=True))
    b, hq, hk, n = (1, 2, 1, 45) if INTERPRET else (2, 8, 2, 1000)
    g = torch.Generator().manual_seed(d)
    q, grad = (torch.randn(b, n, hq, d, generator=g).to(torch.bfloat16).to(DEV).transpose(1, 2)
               for _ in range(2))
    k, v = (torch.randn(b, n, hk, d, generator=g).to(torch.bfloat16).to(DEV).transpose(1, 2)
            for _ in range(2))
    out, _, grads = _run(q, k, v, causal=causal, grad=grad)
    ref, ref_grads = _reference(q, k, v, causal=causal, grad=grad)
    _close(out, ref, torch.bfloat16, "out")
    for name, got, want in zip("qkv", grads, ref_grads):
        _close(got, want, torch.bfloat16, f"d{name}")


@triton.jit
def _keep_mask(out, seed, base, p, n):
    """The documented dropout stream: keep (b, h, i, j) iff philox(seed, base + flat index)
    >= p, flat index ((b*H + h)*L + i)*S + j of the (B, H, L, S) scores."""
    idx = tl.program_id(0).to(tl.int64) * 1024 + tl.arange(0, 1024)
    keep = tl.rand(seed, base + idx) >= p
    tl.store(out + idx, keep.to(tl.int8), mask=idx < n)


@pytest.mark.parametrize("causal,seed", [(False, 1234), (True, 2**63 + 5)])
def test_dropout_follows_the_philox_stream(causal, seed):
    b, hq, hk, n_q, n_k, d, p = 1, 2, 1, 24, 24, 32, 0.3
    dtype = torch.bfloat16
    q, k, v = _inputs(b, hq, hk, n_q, n_k, d, dtype, seed=7)
    grad = torch.randn(b, hq, n_q, d, generator=torch.Generator().manual_seed(8)).to(dtype)
    grad = grad.to(DEV)
    gen = PhiloxGenerator(0, seed)
    gen.next_offset(100)  # a stream that does not start at 0
    out, _, grads = _run(q, k, v, causal=causal, p=p, gen=gen, grad=grad)
    assert gen.offset == 100 + b * hq * n_q * n_k  # the counters it reserved
    n = b * hq * n_q * n_k
    keep = torch.empty(n, dtype=torch.int8, device=DEV)
    _keep_mask[(triton.cdiv(n, 1024),)](keep, seed, 100, p, n)
    sync()
    keep = keep.view(b, hq, n_q, n_k).bool()
    assert 0.6 < keep.float().mean().item() < 0.8
    ref, ref_grads = _reference(q, k, v, causal=causal, grad=grad, keep=keep, p=p)
    _close(out, ref, dtype, "out")
    for name, got, want in zip("qkv", grads, ref_grads):
        _close(got, want, dtype, f"d{name}")
    again, _, _ = _run(q, k, v, causal=causal, p=p, gen=PhiloxGenerator(0, seed))
    assert not torch.equal(again, out)  # another part of the stream: other weights dropped


def test_declines_what_it_does_not_cover():
    q, k, v = _inputs(1, 2, 2, 8, 8, 32, torch.float16)
    assert A.scaled_dot_product_attention(dev(q.float()), dev(k.float()), dev(v.float()),
                                          None, 0.0, False, 1.0, None) is NotImplemented
    q48 = torch.randn(1, 2, 8, 48, dtype=torch.float16, device=DEV)
    assert A.scaled_dot_product_attention(dev(q48), dev(q48), dev(q48), None, 0.0, False, 1.0,
                                          None) is NotImplemented
    assert A.scaled_dot_product_attention(dev(q), dev(k.bfloat16()), dev(v), None, 0.0, False,
                                          1.0, None) is NotImplemented
    for scale in (-0.5, float("nan")):  # the kernels take the block max of unscaled scores
        assert A.scaled_dot_product_attention(dev(q), dev(k), dev(v), None, 0.0, False, scale,
                                              None) is NotImplemented


# ------------------------------------------------------------------------ decode
def _decode_reference(q, kc, vc, lens, starts, causal):
    """Row by row: torch over the valid slots ``[start, len)`` of each cache row."""
    n_q = q.shape[2]
    outs = []
    for i, n in enumerate(lens.tolist()):
        lo = 0 if starts is None else int(starts[i])
        slots = torch.arange(lo, n, device=DEV)
        mask = torch.ones(n_q, n - lo, dtype=torch.bool, device=DEV)
        if causal:  # query row r sits at position n - n_q + r
            mask = slots[None, :] <= (n - n_q + torch.arange(n_q, device=DEV))[:, None]
        ref, _ = _reference(q[i:i + 1], kc[i:i + 1, :, lo:n], vc[i:i + 1, :, lo:n], mask=mask)
        outs.append(ref)
    return torch.cat(outs)


@pytest.mark.parametrize("n_q", [1, 3, 16])
@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("with_starts", [False, True])
def test_decode_reads_the_cache(n_q, causal, with_starts):
    b, hq, hk, s_max, d = 3, 4, 2, 80, 64
    dtype = torch.bfloat16
    g = torch.Generator().manual_seed(n_q)
    q = torch.randn(b, hq, n_q, d, generator=g).to(dtype).to(DEV)
    kc = torch.randn(b, hk, s_max, d, generator=g).to(dtype).to(DEV)
    vc = torch.randn(b, hk, s_max, d, generator=g).to(dtype).to(DEV)
    lens = torch.tensor([n_q, 45, 80], dtype=torch.int32, device=DEV)
    starts = torch.tensor([0, 7, 70], dtype=torch.int64, device=DEV) if with_starts else None
    out = host(AD.attention_decode(dev(q), dev(kc), dev(vc), dev(lens), causal=causal,
                                  key_starts=None if starts is None else dev(starts)))
    _close(out, _decode_reference(q, kc, vc, lens, starts, causal), dtype, "decode")


def test_decode_splits_a_long_cache_across_programs(monkeypatch):
    """One row, one KV head: the cache is cut into parts merged by the combine kernel
    (forced to 5 parts: part 4 is past every length, so empty parts are merged too)."""
    monkeypatch.setattr(AD, "_decode_splits", lambda *a: 5)
    b, hq, hk, s_max, d = 2, 2, 1, 320, 32
    dtype = torch.float16
    g = torch.Generator().manual_seed(7)
    q = torch.randn(b, hq, 1, d, generator=g).to(dtype).to(DEV)
    kc = torch.randn(b, hk, s_max, d, generator=g).to(dtype).to(DEV)
    vc = torch.randn(b, hk, s_max, d, generator=g).to(dtype).to(DEV)
    lens = torch.tensor([200, 9], dtype=torch.int64, device=DEV)
    starts = torch.tensor([70, 0], dtype=torch.int64, device=DEV)
    out = host(AD.attention_decode(dev(q), dev(kc), dev(vc), dev(lens), key_starts=dev(starts)))
    _close(out, _decode_reference(q, kc, vc, lens, starts, True), dtype, "split decode")


@pytest.mark.parametrize("n_q", [1, 4])
def test_decode_kernel_matches_the_contract_composite(n_q):
    """The kernel against the ``attention_decode`` row's composite (run on the CPU backend,
    which has no kernel of that name, on the same values)."""
    from genesis.backends import get_backend
    from genesis.nn.fused_declarations import ATTENTION_DECODE

    b, hq, hk, s_max, d = 2, 6, 2, 90, 32
    g = torch.Generator().manual_seed(11)
    q, kc, vc = (torch.randn(b, h, n, d, generator=g).to(torch.bfloat16)
                 for h, n in ((hq, n_q), (hk, s_max), (hk, s_max)))
    k_new, v_new = (torch.randn(b, hk, n_q, d, generator=g).to(torch.bfloat16)
                    for _ in range(2))
    lens, starts = torch.tensor([90, 40]), torch.tensor([3, 0])
    ref_k, ref_v = kc.clone(), vc.clone()
    want = ATTENTION_DECODE.composite(get_backend("cpu"), q, ref_k, ref_v, lens, starts, k_new,
                                      v_new, d ** -0.5)
    kc, vc = kc.to(DEV), vc.to(DEV)
    got = host(AD.attention_decode(*(dev(t.to(DEV)) for t in (q,)), dev(kc), dev(vc),
                                  dev(lens.to(DEV)), key_starts=dev(starts.to(DEV)),
                                  k_new=dev(k_new.to(DEV)),
                                  v_new=dev(v_new.to(DEV).transpose(2, 3).contiguous()
                                            .transpose(2, 3))))
    assert torch.equal(kc.cpu(), ref_k) and torch.equal(vc.cpu(), ref_v)  # the same writes
    _close(got, want.to(DEV), torch.bfloat16, "kernel vs composite")


def test_decode_splits_only_when_the_gpu_would_idle():
    sms = A._launch.sm_count(0)
    assert AD._decode_splits(4 * sms, 4096, 64, 0) == 1  # enough (batch, head) programs
    assert AD._decode_splits(2, 64, 64, 0) == 1  # a short cache
    assert AD._decode_splits(2, 4096, 64, 0) > 1


def test_decode_errors_name_the_shapes():
    q = torch.randn(1, 4, 17, 64, dtype=torch.bfloat16, device=DEV)
    kc = torch.randn(1, 2, 32, 64, dtype=torch.bfloat16, device=DEV)
    lens = torch.tensor([20], dtype=torch.int32, device=DEV)
    with pytest.raises(ValueError, match="1..16"):
        AD.attention_decode(dev(q), dev(kc), dev(kc), dev(lens))
    with pytest.raises(TypeError, match="cache_lens"):
        AD.attention_decode(dev(q[:, :, :2]), dev(kc), dev(kc), dev(lens.float()))


# ------------------------------------------------------------------ through genesis (GPU)
def _genesis_pair(t, device="cuda"):
    import genesis

    return genesis.tensor(t.detach().float().cpu().numpy(), device=device).to(
        getattr(genesis, str(t.dtype).split(".")[1]))


@pytest.mark.skipif(INTERPRET, reason="genesis CUDA tensors need a GPU")
@pytest.mark.parametrize("gqa", [False, True])
def test_functional_uses_the_fused_kernel(gqa):
    import genesis
    import genesis.nn.functional as F

    b, hq, n, d = 2, 8, 129, 64
    hk = 2 if gqa else hq
    q, k, v = _inputs(b, hq, hk, n, n, d, torch.bfloat16, seed=11)
    grad = torch.randn(b, hq, n, d, device=DEV).to(torch.bfloat16)
    gq, gk, gv = (_genesis_pair(t).requires_grad_(True) for t in (q, k, v))
    out = F.scaled_dot_product_attention(gq, gk, gv, is_causal=True, enable_gqa=gqa)
    assert out.grad_fn.name() == "_FusedAttentionBackward"
    out.backward(_genesis_pair(grad))
    ref, ref_grads = _reference(q, k, v, causal=True, grad=grad)
    to_t = lambda t: torch.from_numpy(t.float().cpu().numpy())  # noqa: E731
    _close(to_t(out.detach()), ref, torch.bfloat16)
    for got, want in zip((gq.grad, gk.grad, gv.grad), ref_grads):
        _close(to_t(got), want, torch.bfloat16)
    with genesis.autocast("cuda", dtype=genesis.bfloat16):  # float32 inputs go in as bf16
        x = genesis.randn(1, 2, 16, 64, device="cuda")
        assert F.scaled_dot_product_attention(x, x, x).dtype is genesis.bfloat16


@pytest.mark.skipif(INTERPRET, reason="the allocator's peak is a GPU statistic")
def test_no_quadratic_memory():
    """Forward + backward at S = 8192 stay far below one (S x S) bf16 score matrix per head."""
    import genesis
    import genesis.nn.functional as F

    b, h, s, d = 1, 4, 8192, 64
    q, k, v = (genesis.randn(b, h, s, d, device="cuda").to(genesis.bfloat16)
               .requires_grad_(True) for _ in range(3))
    genesis.cuda.synchronize()
    base = genesis.cuda.memory_allocated()
    genesis.cuda.reset_peak_memory_stats()
    out = F.scaled_dot_product_attention(q, k, v, is_causal=True)
    out.backward(genesis.ones_like(out))
    genesis.cuda.synchronize()
    extra = genesis.cuda.max_memory_allocated() - base
    scores = b * h * s * s * 2  # one bf16 score matrix for every head: 512 MiB
    operand = b * h * s * d * 2  # 4 MiB
    assert extra <= 12 * operand, (extra, scores)
    assert q.grad is not None and q.grad.shape == q.shape


@pytest.mark.skipif(not INTERPRET, reason="the interpreter stand-in for the CUDA backend")
def test_functional_autograd_under_the_interpreter(monkeypatch):
    """genesis.nn.functional.scaled_dot_product_attention's fused path (the autograd wrapper,
    GQA, masks, 3-d inputs, autocast) with the CPU backend answering through these kernels."""
    import genesis
    import genesis.nn.functional as F

    backend = genesis.device("cpu").backend

    def forward(q, k, v, mask, p, causal, scale, gen):
        res = A.scaled_dot_product_attention(dev(q), dev(k), dev(v),
                                             None if mask is None else dev(mask), p, causal,
                                             scale, gen)
        return res if res is NotImplemented else (host(res[0]), host(res[1]), res[2])

    def backward(grad, q, k, v, out, lse, mask, p, causal, scale, rng):
        return tuple(host(x) for x in AB.scaled_dot_product_attention_backward(
            dev(grad), dev(q), dev(k), dev(v), dev(out), dev(lse),
            None if mask is None else dev(mask), p, causal, scale, rng))

    kernels = type(backend)._kernels  # the CPU backend's kernels of the fused ops, by name
    monkeypatch.setitem(kernels, "scaled_dot_product_attention", forward)
    monkeypatch.setitem(kernels, "scaled_dot_product_attention_backward", backward)
    b, hq, hk, n, d = 2, 4, 2, 21, 32
    q, k, v = _inputs(b, hq, hk, n, n, d, torch.bfloat16, seed=2)
    grad = torch.randn(b, hq, n, d, generator=torch.Generator().manual_seed(3)).bfloat16()
    pad = torch.ones(b, 1, 1, n, dtype=torch.bool)
    pad[1, ..., 15:] = False
    for mask, causal in ((None, True), (pad, False)):
        gq, gk, gv = (genesis.from_numpy(t.float().numpy()).to(genesis.bfloat16)
                      .requires_grad_(True) for t in (q, k, v))
        gmask = None if mask is None else genesis.from_numpy(mask.numpy())
        out = F.scaled_dot_product_attention(gq, gk, gv, attn_mask=gmask, is_causal=causal,
                                             enable_gqa=True)
        assert out.grad_fn.name() == "_FusedAttentionBackward"
        out.backward(genesis.from_numpy(grad.float().numpy()).to(genesis.bfloat16))
        ref, ref_grads = _reference(q, k, v, mask=mask, causal=causal, grad=grad)
        to_t = lambda t: torch.from_numpy(t.float().cpu().numpy())  # noqa: E731
        _close(to_t(out.detach()), ref, torch.bfloat16, "out")
        for name, got, want in zip("qkv", (gq.grad, gk.grad, gv.grad), ref_grads):
            assert tuple(got.shape) == tuple(want.shape), name
            _close(to_t(got), want, torch.bfloat16, f"d{name}")
    x = genesis.randn(2, 9, 32)  # (H, L, E) float32 under bf16 autocast
    with genesis.autocast("cpu", dtype=genesis.bfloat16):
        y = F.scaled_dot_product_attention(x, x, x)
    assert y.dtype is genesis.bfloat16 and tuple(y.shape) == (2, 9, 32)
    ref, _ = _reference(*(torch.from_numpy(x.numpy()).bfloat16()[None],) * 3)
    _close(torch.from_numpy(y.float().numpy()), ref[0], torch.bfloat16)

"""F.attention_decode against torch's masked attention over each row's valid cache slots.

float32/float64 (the contract's composite, on every device) compare at torch's default
tolerances; bfloat16 within the bound its arithmetic allows (``_assert_matches``).
"""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as TF
from device_params import to_genesis, to_torch
from torch.testing import assert_close

import genesis
import genesis.nn.functional as F


def _reference(q, kc, vc, lens, starts):
    """Row by row and query by query: torch's attention over slots [start, len - n_q + i]."""
    b, hq, n_q, d = q.shape
    rep = hq // kc.shape[1]
    out = torch.zeros(q.shape, dtype=torch.float64)
    for row in range(b):
        k = kc[row].double().repeat_interleave(rep, 0)  # (Hq, S, D)
        v = vc[row].double().repeat_interleave(rep, 0)
        for i in range(n_q):
            lo, hi = int(starts[row]), int(lens[row]) - n_q + i + 1
            if hi <= lo:
                continue  # nothing to see: zeros
            out[row, :, i] = TF.scaled_dot_product_attention(
                q[row, :, i:i + 1].double(), k[:, lo:hi], v[:, lo:hi])[:, 0]
    return out


def _assert_matches(out, q, kc, vc, lens, starts):
    """``out`` against the float64 reference.

    float32/float64: torch's default tolerances (at ``out``'s dtype, the reference rounded
    to it). Half precision: the CUDA kernel, as flash kernels, rounds the softmax weights p
    to the value dtype before the p @ V product (the row sum stays float32), and rounds
    its output once. With u = eps/2 (2^-8 for bfloat16) each weight carries a relative
    error of at most u, so the sum sum_i w_i v_i is off by at most u * sum_i w_i |v_i|,
    which is not proportional to the output where the values cancel (1-ulp-of-|v|
    differences on outputs near 0: ~3% of the elements here); rounding the result and the
    reference adds at most eps * |reference|. Bound per element:
    ``(u + 2^-14) * sum_i w_i |v_i| + eps * |reference|``, the 2^-14 covering u^2 and the
    float32 scores, exponentials and sums (relative errors ~1e-6). A worst case, not a fit:
    a float32 emulation of the kernel reaches 0.66 of it over 160 random cases of _case."""
    ref = _reference(q, kc, vc, lens, starts)
    got = to_torch(out)
    if q.dtype.itemsize > 2:
        assert_close(got, ref.to(q.dtype))
        return
    eps = torch.finfo(q.dtype).eps
    weighted_abs = _reference(q, kc, vc.abs(), lens, starts)  # sum_i w_i |v_i|
    bound = (eps / 2 + 2 ** -14) * weighted_abs + eps * ref.abs()
    diff = (got.double() - ref.to(q.dtype).double()).abs()
    worst = (diff - bound).argmax()
    assert (diff <= bound).all(), (
        f"{int((diff > bound).sum())} of {diff.numel()} elements past the bound; worst: "
        f"|{got.flatten()[worst].item()} - {ref.flatten()[worst].item()}| = "
        f"{diff.flatten()[worst].item():.3g} > {bound.flatten()[worst].item():.3g}")


def _case(dtype, b=3, hq=4, hk=2, n_q=1, s_max=24, d=16, seed=0):
    g = torch.Generator().manual_seed(seed)
    q = torch.randn(b, hq, n_q, d, generator=g).to(dtype)
    kc = torch.randn(b, hk, s_max, d, generator=g).to(dtype)
    vc = torch.randn(b, hk, s_max, d, generator=g).to(dtype)
    return q, kc, vc


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.bfloat16], ids=str)
@pytest.mark.parametrize("n_q", [1, 3])
@pytest.mark.parametrize("with_starts", [False, True])
def test_matches_attention_over_the_valid_slots(device, dtype, n_q, with_starts):
    q, kc, vc = _case(dtype, n_q=n_q)
    lens = torch.tensor([n_q, 13, 24])
    starts = torch.tensor([0, 5, 20]) if with_starts else torch.zeros(3, dtype=torch.long)
    gq, gk, gv = (to_genesis(t, device) for t in (q, kc, vc))
    out = F.attention_decode(gq, gk, gv, to_genesis(lens, device),
                             to_genesis(starts, device) if with_starts else None)
    assert out.dtype is gq.dtype and tuple(out.shape) == tuple(q.shape)
    _assert_matches(out, q, kc, vc, lens, starts)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=str)
def test_key_and_value_are_written_to_their_slots_first(device, dtype):
    q, kc, vc = _case(dtype, n_q=2)
    g = torch.Generator().manual_seed(5)
    k_new, v_new = (torch.randn(3, 2, 2, 16, generator=g).to(dtype) for _ in range(2))
    lens, starts = torch.tensor([2, 13, 24]), torch.tensor([0, 3, 9])
    gk, gv = to_genesis(kc, device), to_genesis(vc, device)
    before = gk._version
    # the values as a strided view (as a fused q/k/v projection hands them over)
    v_arg = to_genesis(v_new.transpose(1, 2).contiguous(), device).transpose(1, 2)
    out = F.attention_decode(to_genesis(q, device), gk, gv, to_genesis(lens, device),
                             to_genesis(starts, device), key=to_genesis(k_new, device),
                             value=v_arg)
    for row, n in enumerate(lens.tolist()):
        kc[row, :, n - 2:n], vc[row, :, n - 2:n] = k_new[row], v_new[row]
    assert_close(to_torch(gk), kc)
    assert_close(to_torch(gv), vc)
    assert gk._version > before
    _assert_matches(out, q, kc, vc, lens, starts)


def test_a_query_with_no_slot_gets_zeros(device):
    q, kc, vc = _case(torch.float32, b=2)
    lens, starts = torch.tensor([10, 10]), torch.tensor([10, 3])  # row 0: [10, 10) is empty
    out = F.attention_decode(*(to_genesis(t, device) for t in (q, kc, vc, lens, starts)))
    assert (to_torch(out)[0] == 0).all()
    _assert_matches(out, q, kc, vc, lens, starts)


def test_errors_name_the_shapes():
    q, kc, vc = (to_genesis(t, "cpu") for t in _case(torch.float32))
    lens = genesis.tensor([1, 2, 3])
    with pytest.raises(RuntimeError, match=r"Hk dividing 4"):
        F.attention_decode(q, kc[:, :, :, :8], vc[:, :, :, :8], lens)
    with pytest.raises(RuntimeError, match="cache_lens must be an int32/int64"):
        F.attention_decode(q, kc, vc, lens.to(genesis.float32))
    with pytest.raises(RuntimeError, match="one floating dtype"):
        F.attention_decode(q, kc.to(genesis.float64), vc, lens)
    with pytest.raises(RuntimeError, match="key and value must both be given"):
        F.attention_decode(q, kc, vc, lens, key=kc[:, :, :1])
    with pytest.raises(RuntimeError, match="no gradient"):
        F.attention_decode(q.requires_grad_(), kc, vc, lens)


def test_compiled_step_replays_the_op_and_its_cache_writes(device):
    """attention_decode (and swiglu_linear, the other inference-only fused op of a decode
    step) are dispatched ops: genesis.compile records them, so every replay attends over the
    cache as it is then and writes the new key and value again; a trace that missed them
    would bake in the first call's output."""
    q, kc, vc = _case(torch.float32, b=2)
    gk, gv = to_genesis(kc, device), to_genesis(vc, device)
    lens = to_genesis(torch.tensor([4, 9]), device)
    g = torch.Generator().manual_seed(6)
    weight = to_genesis(torch.randn(5, 8, generator=g), device)

    def step(query, key, value, gate_up):
        out = F.attention_decode(query, gk, gv, lens, key=key, value=value)
        lens.add_(1)  # the next call's slot
        return out, F.swiglu_linear(gate_up, weight)

    compiled = genesis.compile(step)
    with genesis.no_grad():
        for _ in range(3):  # traced, then replayed
            query, key, value = (to_genesis(torch.randn(*s, generator=g), device)
                                 for s in ((2, 4, 1, 16), (2, 2, 1, 16), (2, 2, 1, 16)))
            gate_up = to_genesis(torch.randn(3, 16, generator=g), device)
            expect_k, expect_v = to_torch(gk).clone(), to_torch(gv).clone()
            n = to_torch(lens).clone()
            out, down = compiled(query, key, value, gate_up)
            for row in range(2):
                expect_k[row, :, n[row] - 1] = to_torch(key)[row, :, 0]  # the last slot
                expect_v[row, :, n[row] - 1] = to_torch(value)[row, :, 0]
            assert_close(to_torch(gk), expect_k)
            assert_close(to_torch(gv), expect_v)
            _assert_matches(out, to_torch(query), expect_k, expect_v, n,
                            torch.zeros(2, dtype=torch.int64))
            gu = to_torch(gate_up)
            assert_close(to_torch(down), TF.linear(TF.silu(gu[:, :8]) * gu[:, 8:],
                                                   to_torch(weight)))
    ops = [node.op for node in compiled.graphs()[0].nodes]
    assert "attention_decode" in ops and "swiglu_linear" in ops

"""Every collective on 3 local Gloo processes against a numpy reference (all dtypes/ops)."""

from __future__ import annotations

import numpy as np
import pytest
from dist_harness import run_ranks
from dist_workers import DTYPES, OPS, collectives, rank_values

N = 3
# Half-precision results are reduced in their own dtype (as torch's Gloo does): compare at
# torch's default tolerances for them.
TOL = {"float16": dict(rtol=1e-3, atol=1e-5), "bfloat16": dict(rtol=1.6e-2, atol=1e-5)}


@pytest.fixture(scope="module")
def results():
    return run_ranks(collectives, N)


def cast(values: np.ndarray, dtype: str) -> np.ndarray:
    if dtype == "bool":
        return values > 1
    return values.astype(np.float64 if dtype in ("float16", "bfloat16") else dtype)


def reduce_ref(stack: np.ndarray, op: str, dtype: str) -> np.ndarray:
    if dtype == "bool":
        return stack.any(0) if op in ("SUM", "MAX") else stack.all(0)
    if op == "AVG":
        mean = stack.sum(0) / len(stack)
        return np.trunc(mean) if np.issubdtype(stack.dtype, np.integer) else mean
    return {"SUM": np.sum, "PRODUCT": np.prod, "MIN": np.min, "MAX": np.max}[op](stack, 0)


def check(got, want, dtype: str) -> None:
    np.testing.assert_allclose(np.asarray(got, dtype=np.float64),
                               np.asarray(want, dtype=np.float64), **TOL.get(dtype, {}))


def test_ranks_and_backend(results):
    assert [(r["rank"], r["size"], r["backend"]) for r in results] == \
        [(r, N, "gloo") for r in range(N)]


@pytest.mark.parametrize(("dtype", "op"), [(d, o) for d in DTYPES for o in OPS
                                           if (d, o) != ("bool", "AVG")])  # an error: below
def test_all_reduce(results, dtype, op):
    stack = np.stack([cast(rank_values(r), dtype) for r in range(N)])
    want = reduce_ref(stack, op, dtype)
    for r in range(N):
        check(results[r][f"all_reduce/{dtype}/{op}"], want, dtype)


@pytest.mark.parametrize("dtype", ["float32", "bfloat16", "int64", "int16"])
def test_rooted_and_gathering_collectives(results, dtype):
    inputs = [cast(rank_values(r, (4, 2)), dtype) for r in range(N)]
    for r in range(N):
        got = results[r]
        check(got[f"broadcast/{dtype}"], inputs[N - 1], dtype)
        if r == 1:  # other ranks' tensors are scratch space after reduce (as in torch)
            check(got[f"reduce/{dtype}"], sum(inputs), dtype)
        check(got[f"all_gather/{dtype}"], np.stack(inputs), dtype)
        check(got[f"all_gather_into_tensor/{dtype}"], np.concatenate(inputs), dtype)
        check(got[f"all_gather_into_tensor_stacked/{dtype}"], np.stack(inputs), dtype)


@pytest.mark.parametrize("dtype", ["float32", "bfloat16", "int64", "int16"])
def test_scattering_collectives(results, dtype):
    big = np.stack([cast(rank_values(r, (N * 2, 3)), dtype) for r in range(N)])
    alltoall_in = [cast(rank_values(r, (N * 2, 2)), dtype) for r in range(N)]
    for r in range(N):
        got = results[r]
        check(got[f"reduce_scatter_tensor/{dtype}"], big.sum(0)[2 * r:2 * r + 2], dtype)
        check(got[f"reduce_scatter/{dtype}"], big.max(0)[2 * r:2 * r + 2], dtype)
        check(got[f"all_to_all_single/{dtype}"],
              np.concatenate([x[2 * r:2 * r + 2] for x in alltoall_in]), dtype)


def test_all_to_all_single_uneven_splits(results):
    size = sum(j + 1 for j in range(N))
    sources = [np.arange(size, dtype=np.float32) + 100 * j for j in range(N)]
    for r in range(N):
        start = sum(k + 1 for k in range(r))
        want = np.concatenate([s[start:start + r + 1] for s in sources])
        np.testing.assert_array_equal(results[r]["all_to_all_uneven"], want)


def test_async_work_handles(results):
    want = np.stack([rank_values(r) for r in range(N)]).mean(0)
    for r in range(N):
        got = results[r]
        assert got["async_all_reduce_work"] == "Work"
        assert got["async_completed"] is True
        np.testing.assert_allclose(got["async_all_reduce"], want, rtol=1e-6)
        np.testing.assert_array_equal(got["async_all_gather"],
                                      np.repeat(np.arange(N, dtype=np.float32)[:, None], 3, 1))


def test_point_to_point(results):
    for r in range(N):
        left = (r - 1) % N
        sender, values = results[r]["recv"]
        assert sender == left
        np.testing.assert_array_equal(values, np.full(5, left, dtype=np.float32))
        np.testing.assert_array_equal(results[r]["irecv"], np.full(5, left, dtype=np.float32))
        np.testing.assert_array_equal(results[r]["irecv_int16"], np.full(5, left))
    assert results[0]["recv_any"] == list(range(1, N))


def test_new_group_and_non_members(results):
    members = [r for r in range(N) if r % 2 == 0]
    total = sum(r + 1 for r in members)
    for r in range(N):
        rank, size, values = results[r]["subgroup"]
        assert results[r]["subgroup_result"] is None
        if r in members:
            assert (rank, size) == (members.index(r), len(members))
            np.testing.assert_array_equal(values, [total, total])
        else:  # outside the group: -1, and the collective leaves the tensor alone
            assert (rank, size) == (-1, -1)
            np.testing.assert_array_equal(values, [r + 1, r + 1])


def test_empty_tensors_and_bad_input(results):
    for r in range(N):
        got = results[r]
        assert got["empty"] == (0,)
        errors = got["errors"]
        assert "contiguous" in errors["non_contiguous"] and "(4,)" in errors["non_contiguous"]
        assert "(3,)" in errors["gather_size"] and "(2,)" in errors["gather_size"]
        assert "ReduceOp" in errors["op"]
        assert "AVG" in errors["bool_avg"] and "bool" in errors["bool_avg"]
        assert f"global rank {N}" in errors["src"]

"""Host time per tiny op: genesis vs torch, side by side (benchmark, not a test).

    python tools/bench/overhead.py [--device cpu|cuda] [--iters N] [--repeats R] [--json PATH]
                                   [--clock wall|cpu]

Each row times a loop of one op on 16-element tensors (CUDA: synchronised once at the end
of the loop, so the figure is the host cost per launch when the GPU keeps up). A row's
figure is the median over ``--repeats`` short timed loops, the ops taking turns, with the
garbage collector paused as in ``timeit`` (on a machine shared with other work the median
of short loops is stable where one long loop is not). ``--clock cpu`` times the loops in
the thread's CPU time instead of wall time: on a machine whose cores other work takes
turns on, the time a loop spends descheduled is then not counted.

A second table splits genesis's time per op into stages, each the difference of two
measured calls:

* launch — the backend kernel alone, on the raw arrays (torch's own cost on the CPU);
* dispatch — the op's ``Function.forward`` with no graph (promotion, broadcasting, kernel
  lookup, wrapping the result) minus launch;
* wrapper — the public call (``a + b``, ``a.view(4, 4)``) with grad off minus forward: the
  Python function, argument parsing and ``Function.apply``'s checks. Ops with a host path
  (plain operands: no promotion, no ``Function.apply``) skip ``forward`` altogether, so
  there this figure is small or negative: the call costs less than the general forward;
* autograd record — the same call on an input that requires grad minus the call without:
  making the graph node and saving tensors;
* floor — not a stage but a bound: the leanest Python function that still does the op's
  job, timed alone. It takes the public call's arguments, reads the tensor fields it needs,
  calls the same backend kernel and makes the result Tensor (a view or slice looks its
  result's geometry up in one dict), with no checks, no autograd and no observers. It is
  entered as the public call is: the operator rows (``a + b``, ``a * 2.0``, ``m @ m``,
  ``a[2:10]``) call it through a tensor type's operator slot, which CPython enters from C
  and does not specialise as it does a direct call. Its ratio to torch's time is as low as
  a host path written in Python around this backend's kernel can go.
"""

from __future__ import annotations

import argparse
import gc
import json
import platform
import statistics
import time

import torch

import genesis


def _time_loops(fns: list, iters: int, syncs: list, repeats: int = 7,
                clock=time.perf_counter) -> list:
    """Median µs per call of each ``fns[i]`` (``None`` stays None), timed with ``clock``. The
    functions take turns within every repeat, so a change in the machine's load hits all of
    them alike."""
    live = [(i, f, s) for i, (f, s) in enumerate(zip(fns, syncs)) if f is not None]
    for _, fn, sync in live:
        for _ in range(max(10, iters // 10)):  # warm-up: caches, kernel compilation
            fn()
        sync()
    times: dict = {i: [] for i, _, _ in live}
    gc.collect()
    gc.disable()  # as timeit: a collection landing in one loop is not the op's cost
    try:
        for _ in range(repeats):
            for i, fn, sync in live:
                start = clock()
                for _ in range(iters):
                    fn()
                sync()
                times[i].append((clock() - start) / iters)
    finally:
        gc.enable()
    out = [None] * len(fns)
    for i, ts in times.items():
        out[i] = statistics.median(ts) * 1e6
    return out


def _stage_cases(device):
    """Per op: (launch, forward without graph, public call, public call recording a graph,
    floor); None where a stage does not exist for the op."""
    from genesis.autograd.function import _NO_GRAD_CTX as nog
    from genesis.ops import declared_reductions, elementwise, linalg, reshaping, strided
    from genesis.ops.common import wrap
    from genesis.tensor import Size, Tensor, new_tensor

    a = genesis.ones(16, device=device)
    b = genesis.ones(16, device=device)
    m = genesis.ones(4, 4, device=device)
    w = genesis.ones(16, device=device, requires_grad=True)
    wm = genesis.ones(4, 4, device=device, requires_grad=True)
    be = a._backend
    fn = elementwise.DECLARED
    add, mul, exp = fn["add"].function, fn["mul"].function, fn["exp"].function
    k_add, k_mul, k_exp = (f.kernels[be] for f in (add, mul, exp))
    k_add_ = be.inplace_kernel("add")
    ad, bd, md = a._data, b._data, m._data
    f32 = a.dtype
    scalar, by_4x4 = Size(()), Size((4, 4))
    products = {(m.shape, m.shape): by_4x4}
    view_plans = {(a.shape, (4, 4)): (by_4x4, (4, 1))}
    slice_plans = {(a.shape, 2, 10, None): (Size((8,)), (1,), 2)}

    # the floors (see the module docstring)
    def add_floor(x, y):
        return new_tensor(k_add(x._data, y._data), x.device, x._backend, x.shape, x.dtype)

    def mul_floor(x, y):
        return new_tensor(k_mul(x._data, y), x.device, x._backend, x.shape, x.dtype)

    def exp_floor(x):
        return new_tensor(k_exp(x._data), x.device, x._backend, x.shape, x.dtype)

    def sum_floor(x):
        return new_tensor(be.sum(x._data, (0,), False, x.dtype), x.device, x._backend,
                          scalar, x.dtype)

    def matmul_floor(x, y):
        return new_tensor(x._backend.matmul(x._data, y._data), x.device, x._backend,
                          products[(x.shape, y.shape)], x.dtype)

    def view_floor(x, *shape):
        size, strides = view_plans[(x.shape, shape)]
        return wrap(x._backend.view(x._data, size, strides), x.device, x, size, x.dtype)

    def slice_floor(x, k):
        size, strides, offset = slice_plans[(x.shape, k.start, k.stop, k.step)]
        return wrap(x._backend.as_strided(x._data, size, strides, offset), x.device, x, size,
                    x.dtype)

    def add__floor(x, y):
        k_add_(x._data, y._data)
        x._version_box[0] += 1
        return x

    class Floors(Tensor):
        """Tensors whose operators are the floors: ``a + b`` and ``a[k]`` enter a Python
        host path as genesis's do, through the type's slot, which CPython calls from C (the
        subscript ``a[2:10]`` is not specialised as a direct call is)."""

        __slots__ = ()
        __add__, __mul__, __matmul__, __getitem__ = add_floor, mul_floor, matmul_floor, \
            slice_floor

    fa, fb, fm = (Tensor._make_subclass(Floors, t) for t in (a, b, m))

    return {
        "add (a + b)": (lambda: k_add(ad, bd), lambda: add.forward(nog, a, b),
                        lambda: a + b, lambda: w + b, lambda: fa + fb),
        "mul by scalar (a * 2.0)": (lambda: k_mul(ad, 2.0), lambda: mul.forward(nog, a, 2.0),
                                    lambda: a * 2.0, lambda: w * 2.0,
                                    lambda: fa * 2.0),
        "exp": (lambda: k_exp(ad), lambda: exp.forward(nog, a), lambda: a.exp(),
                lambda: w.exp(), lambda: exp_floor(a)),
        "sum()": (lambda: be.sum(ad, (0,), False, f32),
                  lambda: declared_reductions.sum.function.forward(nog, a, (0,), False, None),
                  lambda: a.sum(), lambda: w.sum(), lambda: sum_floor(a)),
        "matmul 4x4": (lambda: be.matmul(md, md), lambda: linalg.Matmul.forward(nog, m, m),
                       lambda: m @ m, lambda: wm @ m, lambda: fm @ fm),
        "view/reshape": (lambda: be.view(ad, (4, 4), (4, 1)),
                         lambda: reshaping.View.forward(nog, a, (4, 4)),
                         lambda: a.view(4, 4), lambda: w.view(4, 4),
                         lambda: view_floor(a, 4, 4)),
        "slice a[2:10]": (lambda: be.as_strided(ad, (8,), (1,), 2),
                          lambda: strided.Slice.forward(nog, a, (slice(2, 10),)),
                          lambda: a[2:10], lambda: w[2:10], lambda: fa[2:10]),
        "in-place add_": (lambda: k_add_(ad, bd), None, lambda: a.add_(b), None,
                          lambda: add__floor(a, b)),
    }


def _stages(device, iters: int, sync_g, sync_t, repeats: int, clock) -> list:
    """The stage table's rows. Torch's own call takes turns with the stages, so the floor's
    ratio compares two figures of the same loops."""
    rows = []
    torch_cases = _cases(torch, device)
    for name, fns in _stage_cases(device).items():
        t_launch, t_fwd, t_call, t_rec, t_floor, t_torch = _time_loops(
            [*fns, torch_cases[name]], iters, [sync_g] * 5 + [sync_t], repeats, clock)
        inner = t_fwd if t_fwd is not None else t_launch
        rows.append({"op": name, "launch_us": round(t_launch, 2),
                     "dispatch_us": None if t_fwd is None else round(t_fwd - t_launch, 2),
                     "wrapper_us": round(t_call - inner, 2),
                     "autograd_record_us": None if t_rec is None else round(t_rec - t_call, 2),
                     "total_us": round(t_call, 2), "floor_us": round(t_floor, 2),
                     "floor_over_torch": round(t_floor / t_torch, 2)})
    return rows


def _show(v) -> str:
    return "-" if v is None else f"{v:.2f}"


def _cases(lib, device):
    a = lib.ones(16, device=device)
    b = lib.ones(16, device=device)
    m = lib.ones(4, 4, device=device)
    w = lib.ones(16, device=device, requires_grad=True)
    return {
        "add (a + b)": lambda: a + b,
        "mul by scalar (a * 2.0)": lambda: a * 2.0,
        "exp": lambda: a.exp(),
        "sum()": lambda: a.sum(),
        "matmul 4x4": lambda: m @ m,
        "view/reshape": lambda: a.view(4, 4),
        "slice a[2:10]": lambda: a[2:10],
        "in-place add_": lambda: a.add_(b),
        "add, graph recorded": lambda: w + b,
        "forward+backward (w*b).sum()": lambda: (w * b).sum().backward(),
    }


def _layout_and_indexing_cases(lib, device):
    """``--layout-indexing``: ops whose CUDA kernels key their launch from their arguments
    (``Launcher.__call__``); not among the host-path targets above."""
    x = lib.ones(16, device=device)
    m = lib.ones(4, 4, device=device)
    idx = lib.tensor([0, 3, 5, 7], device=device)
    rows = lib.tensor([[0, 1, 2, 3]] * 4, device=device)
    return {
        "arange(16)": lambda: lib.arange(16, device=device),
        "m.gather(1, rows)": lambda: m.gather(1, rows),
        "x.index_select(0, idx)": lambda: x.index_select(0, idx),
        "x[idx]": lambda: x[idx],
        "x.sort()": lambda: x.sort(),
        "m.flip(0)": lambda: m.flip(0),
        "m.tril()": lambda: m.tril(),
        "x.uniform_()": lambda: x.uniform_(),
    }


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--iters", type=int, default=200)
    parser.add_argument("--repeats", type=int, default=21,
                        help="timed loops per row; the median is reported")
    parser.add_argument("--no-stages", action="store_true", help="skip the stage breakdown")
    parser.add_argument("--layout-indexing", action="store_true",
                        help="add rows for arange, gather, index_select, x[idx], sort, flip, "
                             "tril and uniform_")
    parser.add_argument("--json", default=None, help="also write the table as JSON here")
    parser.add_argument("--clock", choices=("wall", "cpu"), default="wall",
                        help="cpu: time in this thread's CPU time (time.thread_time), which "
                             "time spent descheduled does not count: for a machine shared "
                             "with other work (a CUDA run's figures then leave out waits)")
    args = parser.parse_args(argv)
    clock = time.thread_time if args.clock == "cpu" else time.perf_counter

    if args.device.startswith("cuda"):
        sync_g, sync_t = genesis.cuda.synchronize, torch.cuda.synchronize
    else:
        sync_g = sync_t = lambda: None
    g_cases, t_cases = _cases(genesis, args.device), _cases(torch, args.device)
    if args.layout_indexing:
        g_cases.update(_layout_and_indexing_cases(genesis, args.device))
        t_cases.update(_layout_and_indexing_cases(torch, args.device))
    rows = []
    for name in g_cases:
        tg, tt = _time_loops([g_cases[name], t_cases[name]], args.iters, [sync_g, sync_t],
                             args.repeats, clock)
        rows.append({"op": name, "genesis_us": round(tg, 2), "torch_us": round(tt, 2),
                     "genesis_over_torch": round(tg / tt, 2)})
    print(f"host time per op (median of {args.repeats} loops of {args.iters}, {args.clock} "
          f"clock), device={args.device}, torch {torch.__version__}, "
          f"{platform.processor() or platform.machine()}")
    print(f"| {'op':<30} | genesis µs | torch µs | genesis/torch |")
    print(f"|{'-' * 32}|-----------:|---------:|--------------:|")
    for r in rows:
        print(f"| {r['op']:<30} | {r['genesis_us']:>10.2f} | {r['torch_us']:>8.2f} | "
              f"{r['genesis_over_torch']:>13.2f} |")
    stages = [] if args.no_stages else _stages(args.device, args.iters, sync_g, sync_t,
                                               args.repeats, clock)
    if stages:
        print("\ngenesis host time by stage, µs, and the floor (see the module docstring)")
        print(f"| {'op':<30} | launch | dispatch | wrapper | autograd record | total "
              "| floor | floor/torch |")
        print(f"|{'-' * 32}|-------:|---------:|--------:|----------------:|------:"
              "|------:|------------:|")
        for r in stages:
            print(f"| {r['op']:<30} | {_show(r['launch_us']):>6} | {_show(r['dispatch_us']):>8} "
                  f"| {_show(r['wrapper_us']):>7} | {_show(r['autograd_record_us']):>15} "
                  f"| {_show(r['total_us']):>5} | {_show(r['floor_us']):>5} "
                  f"| {_show(r['floor_over_torch']):>11} |")
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"device": args.device, "torch": torch.__version__, "rows": rows,
                       "stages": stages}, f, indent=2)


if __name__ == "__main__":
    main()

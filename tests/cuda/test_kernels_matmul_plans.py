"""The host side of the matmul plans, without a GPU: what a TMA plan holds between calls.

A TMA plan builds its host tensor descriptors once and points them at each call's arrays.
The kernels are replaced by a recorder (nothing is compiled or launched) and the arrays by
weakly referenceable stand-ins, so the test sees both what a launch was given and whether
the plan still holds the operands afterwards: a plan that kept them would keep their memory
alive, the logits of a language model's head among them (1.69 GiB of a 0.2B decoder's
training step did stay allocated between steps that way).
"""

from __future__ import annotations

import gc
import weakref

import pytest

pytest.importorskip("triton")
mm = pytest.importorskip("genesis_cuda.kernels.matmul")

from genesis import dtypes as D  # noqa: E402
from genesis_cuda.kernels import _launch  # noqa: E402

# a weight gradient's shape (1024 x 1024 over 8k tokens): it has split-K candidates too
M, N, K = 1024, 1024, 8192


class _Operand:
    """An array stand-in: an address and a dtype, weakly referenceable."""

    def __init__(self, ptr: int):
        self.ptr = ptr
        self.dtype = D.bfloat16
        self.device = 0

    def data_ptr(self) -> int:
        return self.ptr


_launches: list = []  # (kernel name, descriptor bases) of each launch


def _record_launch(site, variant, device, g0, g1, args, objs=None, tail=()):
    """Stands in for ``Site.launch``: records the addresses the descriptors point at per
    launch (nothing is compiled or launched)."""
    bases = [a.base.data_ptr() for a in args if hasattr(a, "block_shape")]
    _launches.append((site.launcher.fn.__name__, bases))


@pytest.fixture
def tma_binder(monkeypatch):
    monkeypatch.setattr(_launch.Site, "launch", _record_launch)
    monkeypatch.setattr(mm, "sm_count", lambda device: 132)
    monkeypatch.setattr(_launch, "empty", lambda shape, dtype, device: _Operand(1 << 40))
    _launches.clear()
    binder = mm._tma_binder(D.bfloat16, M, N, K, 1, (K, 1), (N, 1), False, 0, 0)
    assert binder is not None, "these operands should take the TMA path"
    return binder


def _kinds(cands) -> dict:
    """One candidate per kind of TMA plan: plain tiles, split-K ('s'), persistent ('p')."""
    out = {}
    for cfg in cands:
        out.setdefault(cfg[0] if isinstance(cfg[0], str) else "tiles", cfg)
    return out


def test_every_kind_of_tma_plan_is_covered(tma_binder):
    assert set(_kinds(tma_binder[2])) == {"tiles", "s", "p"}


@pytest.mark.parametrize("kind", ["tiles", "s", "p"])
def test_tma_plan_keeps_no_operand_alive(tma_binder, kind):
    bind, _, cands, _ = tma_binder
    go = bind(_kinds(cands)[kind])
    a, b, c = _Operand(0x1000), _Operand(0x2000), _Operand(0x3000)
    refs = [weakref.ref(x) for x in (a, b, c)]
    go(a, b, c, None)
    # the launch saw the operands through its descriptors ...
    assert [bases for _, bases in _launches if bases] == [[0x1000, 0x2000, 0x3000]]
    del a, b, c
    gc.collect()
    # ... and the plan holds none of them afterwards
    assert [r() for r in refs] == [None, None, None]

"""Out-of-range indices on a real GPU, through genesis tensors: with the host value checks off
(the default off the CPU), the kernels skip the bad index and the next synchronising point
(item(), cpu(), synchronize()) raises IndexError naming the op, the index and the dim size;
the process goes on. Also under CUDA-graph capture: a replay's bad index is reported too.
"""

from __future__ import annotations

import pytest

pytestmark = pytest.mark.cuda

DEV = "cuda"


@pytest.fixture
def G(monkeypatch):
    import genesis
    import genesis.ops.common

    # the kernels' own check is under test, not the optional host read (GENESIS_DEVICE_CHECKS)
    monkeypatch.setattr(genesis.ops.common, "DEVICE_VALUE_CHECKS", False)
    genesis.cuda.synchronize()  # nothing pending from earlier tests
    return genesis


def test_gather_raises_at_item_and_the_process_goes_on(G):
    x = G.arange(5.0, device=DEV)
    y = x.gather(0, G.tensor([1, 7], device=DEV))  # queued, not checked on the host
    with pytest.raises(IndexError, match=r"gather: index 7 is out of bounds for dimension "
                                         r"with size 5"):
        y.sum().item()
    assert x.sum().item() == 10.0
    assert x.gather(0, G.tensor([4, 0], device=DEV)).tolist() == [4.0, 0.0]


def test_embedding_raises_at_cpu(G):
    import genesis.nn.functional as F

    w = G.randn(4, 3, device=DEV)
    out = F.embedding(G.tensor([[0, 4]], device=DEV), w)
    with pytest.raises(IndexError, match=r"index_select: index 4 .*size 4"):
        out.cpu()


def test_advanced_index_and_setitem_raise_at_synchronize(G):
    x = G.arange(6.0, device=DEV).view(2, 3)
    assert x[:, G.tensor([-1, 0], device=DEV)].tolist() == [[2.0, 0.0], [5.0, 3.0]]
    x[:, G.tensor([-1, 3], device=DEV)]
    with pytest.raises(IndexError, match=r"index: index 3 .*size 3"):
        G.cuda.synchronize()
    x[G.tensor([2], device=DEV)] = 1.0
    with pytest.raises(IndexError, match=r"index_put_: index 2 .*size 2"):
        G.cuda.synchronize()
    assert x.tolist() == [[0.0, 1.0, 2.0], [3.0, 4.0, 5.0]]  # nothing written


def test_scatter_add_and_index_add_raise(G):
    x = G.zeros(3, device=DEV)
    x.scatter_add(0, G.tensor([0, -1], device=DEV), G.ones(2, device=DEV))
    with pytest.raises(IndexError, match=r"scatter: index -1 .*size 3"):
        G.cuda.synchronize()
    x.index_add(0, G.tensor([3], device=DEV), G.ones(1, device=DEV))
    with pytest.raises(IndexError, match=r"index_add: index 3 .*size 3"):
        G.cuda.current_stream().synchronize()


def test_captured_index_select_reports_on_replay(G):
    x = G.arange(5.0, device=DEV)
    idx = G.tensor([0, 1], device=DEV)
    x.index_select(0, idx)  # warm-up: compiles outside the capture
    g = G.cuda.CUDAGraph()
    with G.cuda.graph(g):
        y = x.index_select(0, idx)
    g.replay()
    assert y.tolist() == [0.0, 1.0]
    idx.copy_(G.tensor([2, 9], device=DEV))
    g.replay()
    with pytest.raises(IndexError, match=r"index_select: index 9 .*size 5"):
        G.cuda.synchronize()
    idx.copy_(G.tensor([3, 4], device=DEV))
    g.replay()
    assert y.tolist() == [3.0, 4.0]


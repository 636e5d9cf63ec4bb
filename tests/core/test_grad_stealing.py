"""A leaf's first gradient becomes ``.grad`` without a copy when nothing else can see it
(torch's AccumulateGrad steals it the same way); every shared, viewed or differently laid
out gradient is still copied, so editing ``.grad`` never changes another tensor."""

from __future__ import annotations

import weakref

import genesis
from genesis.autograd import Function


def _returning(make):
    """A Function whose backward gives ``make(grad_output, saved_input)`` to its input."""

    class F(Function):
        @staticmethod
        def forward(ctx, x):
            ctx.save_for_backward(x)
            return x * 1.0

        @staticmethod
        def backward(ctx, g):
            (x,) = ctx.saved_tensors
            return make(g, x)

    return F


def test_fresh_gradient_is_stolen():
    refs = []

    def fresh(g, x):
        out = g * 3.0
        refs.append(weakref.ref(out))
        return out

    w = genesis.ones(4, 3, requires_grad=True)
    _returning(fresh).apply(w).sum().backward()
    assert refs[0]() is w.grad  # no copy
    assert w.grad.tolist() == [[3.0] * 3] * 4


def test_gradient_held_elsewhere_is_copied():
    kept = []

    def held(g, x):
        out = g * 3.0
        kept.append(out)
        return out

    w = genesis.ones(4, requires_grad=True)
    _returning(held).apply(w).sum().backward()
    assert w.grad is not kept[0]
    kept[0].add_(1.0)
    assert w.grad.tolist() == [3.0] * 4


def test_alias_of_the_leaf_and_views_are_copied():
    w = genesis.ones(4, requires_grad=True)
    _returning(lambda g, x: x.detach()).apply(w).sum().backward()  # shares w's array
    w.grad.add_(1.0)
    assert w.tolist() == [1.0] * 4 and w.grad.tolist() == [2.0] * 4

    v = genesis.ones(2, 3, requires_grad=True)
    _returning(lambda g, x: (g * 2.0).t().contiguous().t()).apply(v).sum().backward()
    assert v.grad.is_contiguous()  # a transposed layout is not the leaf's: copied
    assert v.grad.tolist() == [[2.0] * 3] * 2

    u = genesis.ones(2, 3, requires_grad=True)
    (u * 1.0).sum().backward()  # sum's backward expands a scalar: zero strides, copied
    assert u.grad.stride() == (3, 1)


def test_one_gradient_for_two_leaves_and_user_gradients_are_not_shared():
    a = genesis.ones(3, requires_grad=True)
    b = genesis.ones(3, requires_grad=True)
    user = genesis.full((3,), 5.0)
    (a + b).backward(user)  # add's backward hands the same tensor to both
    assert a.grad is not b.grad and a.grad is not user and b.grad is not user
    a.grad.add_(1.0)
    user.add_(1.0)
    assert a.grad.tolist() == [6.0] * 3 and b.grad.tolist() == [5.0] * 3


def test_stolen_gradient_accumulates_in_place_afterwards():
    w = genesis.ones(3, requires_grad=True)
    (w * 2.0).sum().backward()
    first = w.grad
    (w * 2.0).sum().backward()
    assert w.grad is first and w.grad.tolist() == [4.0] * 3

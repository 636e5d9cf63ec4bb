"""model.compile() of the Qwen families for training: the eager loss and gradients (CPU)."""

import numpy as np
import pytest
from tiny_qwen import FAMILIES, make_checkpoint, one_cpu_thread  # noqa: F401 - autouse

import genesis
from genesis.models import AutoModelForCausalLM


@pytest.fixture(scope="module", params=list(FAMILIES))
def checkpoint(request, tmp_path_factory):
    path = tmp_path_factory.mktemp(request.param)
    make_checkpoint(request.param, path)
    return request.param, path


def _batch(vocab: int):
    """Two rows, the second right-padded (mask 0, labels -100), as genesis-sft makes them."""
    genesis.manual_seed(0)
    ids = genesis.randint(0, vocab, (2, 12))
    mask = genesis.ones((2, 12), dtype=genesis.int64)
    mask[1, 9:] = 0
    return ids, mask, ids.masked_fill(mask == 0, -100)


def _steps(model, n: int, batch) -> list:
    """``n`` forward/backward passes on one batch: ``(loss, {name: grad})`` of each."""
    ids, mask, labels = batch
    out = []
    for _ in range(n):
        model.zero_grad()
        loss = model(ids, attention_mask=mask, labels=labels).loss
        loss.backward()
        out.append((loss.item(), {k: p.grad.numpy().copy()
                                  for k, p in model.named_parameters()}))
    return out


def test_compiled_training_step_gives_the_eager_loss_and_gradients(checkpoint):
    family, path = checkpoint
    eager = AutoModelForCausalLM.from_pretrained(path).train()
    compiled = AutoModelForCausalLM.from_pretrained(path).train()
    compiled.compile()
    batch = _batch(eager.config.vocab_size)
    expected = _steps(eager, 1, batch)[0]
    traced, replayed = _steps(compiled, 2, batch)  # the first call traces, the second replays
    (entry,) = compiled._compiled_call._entries.values()  # one trace for both calls
    if family.endswith("moe"):
        # training groups tokens by expert (a host read of the counts): graph breaks, and
        # the segments replay through the dispatcher, which records eager autograd
        assert entry.plan is None and entry.record
    else:  # one forward graph and its traced backward, replayed as one autograd node
        assert entry.plan is not None
    for loss, grads in (traced, replayed):
        assert loss == expected[0]
        for name, g in grads.items():
            # Qwen3's q_norm/k_norm: the traced backward runs RMSNorm's differentiable
            # formula op by op where eager runs one fused formula, rounding in another order
            np.testing.assert_allclose(g, expected[1][name], rtol=1e-5,
                                       atol=1e-6 * np.abs(expected[1][name]).max(),
                                       err_msg=name)


def test_compiled_model_in_eval_gives_the_eager_logits(checkpoint):
    _, path = checkpoint
    model = AutoModelForCausalLM.from_pretrained(path).eval()
    ids, mask, _ = _batch(model.config.vocab_size)
    with genesis.no_grad():
        expected = model(ids, attention_mask=mask).logits.numpy()
        model.compile()
        for _ in range(2):  # traced, then replayed
            got = model(ids, attention_mask=mask).logits.numpy()
            np.testing.assert_array_equal(got, expected)

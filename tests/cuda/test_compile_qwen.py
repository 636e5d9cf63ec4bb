"""The Qwen models compiled through genesis-cuda's compiler, without a GPU.

Under the Triton interpreter (``TRITON_INTERPRET=1``, chosen when Triton is first imported:
``test_qwen_through_the_cuda_compiler_under_the_interpreter`` runs this file so in a fresh
process), the CUDA backend's ``CompiledGraph`` is installed as the CPU backend's compile hook,
so the graphs ``genesis.compile`` traces are partitioned, fused into generated kernels and run
by the same code as on a GPU (without the CUDA-graph capture, which needs one:
``tests/llm/test_generation_cuda.py``, ``tests/llm/test_apps_sft_compile.py``):

* generate()'s decode step — KV-cache writes, ``attention_decode``, ``swiglu_linear``, the
  in-place position and slot updates, the greedy choice — gives the eager tokens;
* ``model.compile()``'s training step (forward and traced backward, as genesis-sft runs it)
  gives the eager loss and gradients, in float32 and, for Qwen3, under bf16 autocast.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("triton")  # the kernels are Triton code; CI machines may lack it
pytest.importorskip("transformers")

from tiny_qwen import (  # noqa: E402
    left_padded_batch,
    make_checkpoint,
    one_cpu_thread,  # noqa: F401 - autouse fixture
    to_genesis,
)

import genesis  # noqa: E402
from genesis.models import AutoModelForCausalLM  # noqa: E402
from genesis_cuda.compiler.runner import CompiledGraph  # noqa: E402
from genesis_cuda.kernels import _launch  # noqa: E402

INTERPRET = os.environ.get("TRITON_INTERPRET") == "1"
ROOT = Path(__file__).resolve().parents[2]
interpreted = pytest.mark.skipif(not INTERPRET, reason="runs under TRITON_INTERPRET=1 "
                                 "(the launcher test below starts it)")


@pytest.fixture
def hook(tmp_path, monkeypatch):
    """The CUDA compiler as the CPU backend's hook; returns the CompiledGraphs it made."""
    monkeypatch.setenv("GENESIS_COMPILE_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.setattr(_launch, "interpret_arg", lambda a: a)
    made = []

    def compile_graph(self, graph, options):
        made.append(CompiledGraph(graph, options, lambda v: True))
        return made[-1]

    monkeypatch.setattr(type(genesis.device("cpu").backend), "compile_graph", compile_graph,
                        raising=False)
    return made


@interpreted
@pytest.mark.parametrize("family,how", [("qwen2_tied_sliding", "greedy"), ("qwen3", "greedy"),
                                        ("qwen3_moe", "greedy"), ("qwen2", "sampled")])
def test_compiled_decode_step_gives_the_eager_tokens(family, how, hook, tmp_path):
    make_checkpoint(family, tmp_path)
    model = AutoModelForCausalLM.from_pretrained(tmp_path)
    ids, mask = left_padded_batch(model.config.vocab_size, [6, 3, 5], seed=2)
    kw = dict(attention_mask=to_genesis(mask), max_new_tokens=8, eos_token_id=None)

    def run(compile):
        if how == "sampled":
            kw.update(do_sample=True, top_k=20, generator=genesis.Generator().manual_seed(3))
        return model.generate(to_genesis(ids), compile=compile, **kw).tolist()

    eager = run(False)
    assert run(True) == eager
    (step,) = hook  # one graph for the whole step, through the CUDA compiler
    assert step.kernels  # with generated kernels in it


def _training_runs(tmp_path, family: str, autocast: bool) -> list:
    """``[(loss, {name: grad}) eager, the same compiled]`` of a training step, run twice
    (compiled: traced, then replayed through the generated kernels)."""
    make_checkpoint(family, tmp_path)
    genesis.manual_seed(0)
    ids = genesis.randint(0, 97, (2, 12))
    mask = genesis.ones((2, 12), dtype=genesis.int64)
    mask[1, 9:] = 0  # right padding, as genesis-sft pads
    labels = ids.masked_fill(mask == 0, -100)
    runs = []
    for compiled in (False, True):
        model = AutoModelForCausalLM.from_pretrained(tmp_path).train()
        if compiled:
            model.compile()
        for _ in range(2):
            model.zero_grad()
            with genesis.autocast("cpu", dtype=genesis.bfloat16, enabled=autocast):
                loss = model(ids, attention_mask=mask, labels=labels).loss
            loss.backward()
        runs.append((loss.item(), {k: p.grad.numpy() for k, p in model.named_parameters()}))
    return runs


@interpreted
@pytest.mark.parametrize("family", ["qwen2", "qwen3"])
def test_compiled_training_step_gives_the_eager_loss_and_gradients(family, hook, tmp_path):
    (eager_loss, eager), (loss, grads) = _training_runs(tmp_path, family, autocast=False)
    assert loss == pytest.approx(eager_loss, rel=1e-6)
    for name, g in grads.items():
        # fused kernels keep float32 intermediates in another order; Qwen3's q/k norms'
        # traced backward is RMSNorm's formula op by op (see test_models_compile.py)
        np.testing.assert_allclose(g, eager[name], rtol=1e-5,
                                   atol=1e-5 * np.abs(eager[name]).max(), err_msg=name)
    assert len(hook) == 2 and all(run.kernels for run in hook)  # forward and backward


@interpreted
def test_qwen3_training_step_under_bf16_autocast_gives_the_eager_gradients(hook, tmp_path):
    # issue 30 as genesis-sft meets it on a GPU: Qwen3's q_norm/k_norm take a bfloat16
    # projection and a float32 weight; the traced backward through the generated kernels
    (eager_loss, eager), (loss, grads) = _training_runs(tmp_path, "qwen3", autocast=True)
    # bf16 autocast: the generated kernels keep float32 intermediates and round once where
    # eager rounds to bfloat16 after each op, so the two agree to bfloat16's resolution
    # (2^-8 = 3.9e-3) a few times over (1.5e-2 of a gradient's largest entry when written)
    assert loss == pytest.approx(eager_loss, rel=4e-3)
    for name, g in grads.items():
        assert g.dtype == np.float32, name
        np.testing.assert_allclose(g, eager[name], rtol=0, atol=3e-2 * np.abs(eager[name]).max(),
                                   err_msg=name)
    assert len(hook) == 2 and all(run.kernels for run in hook)


@pytest.mark.skipif(INTERPRET, reason="the launcher itself")
def test_qwen_through_the_cuda_compiler_under_the_interpreter():
    env = dict(os.environ, TRITON_INTERPRET="1")
    run = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", __file__],
        cwd=ROOT, env=env, capture_output=True, text=True, timeout=600)
    assert run.returncode == 0, run.stdout[-4000:] + run.stderr[-2000:]
    assert "7 passed" in run.stdout, run.stdout[-2000:]

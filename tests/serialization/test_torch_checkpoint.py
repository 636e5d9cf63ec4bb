"""``genesis.torch_checkpoint``: a ``torch.save`` file becomes a safetensors file that
``genesis.load`` reads, without arbitrary unpickling; the ``genesis-convert-torch`` command."""

from __future__ import annotations

import collections
import os
import sys
import zipfile
from pathlib import Path

import numpy as np
import pytest
import torch

import genesis
from genesis.torch_checkpoint import TorchCheckpointError, convert_torch_checkpoint, main

ROOT = Path(__file__).resolve().parents[2]


def _torch_model_state():
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(4, 3), torch.nn.BatchNorm1d(3))
    model[1](torch.randn(5, 3))  # running stats and num_batches_tracked (int64)
    state = model.state_dict()
    state["extra.half"] = torch.randn(2, 2).to(torch.bfloat16)
    state["extra.view"] = torch.arange(12.0).reshape(3, 4).t()  # not contiguous
    return state


def _assert_same(got: dict, want: dict):
    assert list(got) == list(want)
    for name, t in want.items():
        g = got[name]
        assert g.dtype.name == str(t.dtype).removeprefix("torch."), name
        assert tuple(g.shape) == tuple(t.shape), name
        torch.testing.assert_close(torch.from_dlpack(g), t, rtol=0, atol=0)


def test_a_state_dict_converts_and_loads_into_genesis(tmp_path):
    state = _torch_model_state()
    torch.save(state, tmp_path / "model.pt")
    done = convert_torch_checkpoint(tmp_path / "model.pt", tmp_path / "model.safetensors")
    assert done.tensors == list(state) and done.skipped == []
    _assert_same(genesis.load(tmp_path / "model.safetensors"), state)


def test_the_output_is_plain_safetensors(tmp_path):
    safetensors_torch = pytest.importorskip("safetensors.torch")
    state = _torch_model_state()
    torch.save(state, tmp_path / "model.pt")
    convert_torch_checkpoint(tmp_path / "model.pt", tmp_path / "model.safetensors")
    read = safetensors_torch.load_file(str(tmp_path / "model.safetensors"))
    assert set(read) == set(state)
    for name, t in state.items():
        torch.testing.assert_close(read[name], t, rtol=0, atol=0)


def test_the_legacy_torch_format_converts_too(tmp_path):
    state = {"w": torch.randn(3, 2)}
    torch.save(state, tmp_path / "old.pt", _use_new_zipfile_serialization=False)
    convert_torch_checkpoint(tmp_path / "old.pt", tmp_path / "old.safetensors")
    _assert_same(genesis.load(tmp_path / "old.safetensors"), state)


def test_nested_dicts_and_lists_flatten_with_dots(tmp_path):
    w = torch.ones(2)
    nested = {"model": collections.OrderedDict([("fc.weight", w)]),
              "ema": {"decay": {"shadow": w * 2}}, "buffers": [w * 3, (w * 4,)],
              "optimizer": {"state": {0: {"exp_avg": w * 5}}}}
    torch.save(nested, tmp_path / "ckpt.pt")
    done = convert_torch_checkpoint(tmp_path / "ckpt.pt", tmp_path / "ckpt.safetensors")
    assert done.tensors == ["model.fc.weight", "ema.decay.shadow", "buffers.0", "buffers.1.0",
                            "optimizer.state.0.exp_avg"]
    loaded = genesis.load(tmp_path / "ckpt.safetensors")
    assert loaded["optimizer.state.0.exp_avg"].tolist() == [5.0, 5.0]


def test_a_bare_tensor_converts_under_one_name(tmp_path):
    torch.save(torch.arange(3), tmp_path / "t.pt")
    assert convert_torch_checkpoint(tmp_path / "t.pt", tmp_path / "t.st").tensors == ["tensor"]


def test_non_tensor_values_are_refused_by_name_or_skipped_and_reported(tmp_path):
    ckpt = {"model": {"w": torch.ones(1)}, "epoch": 7, "optimizer": {
        "param_groups": [{"lr": 0.1, "params": [0]}]}}
    torch.save(ckpt, tmp_path / "ckpt.pt")
    out = tmp_path / "ckpt.safetensors"
    with pytest.raises(TorchCheckpointError, match=r"not tensors.*epoch \(int\), "
                       r"optimizer.param_groups.0.lr \(float\), "
                       r"optimizer.param_groups.0.params.0 \(int\).*--skip-non-tensors"):
        convert_torch_checkpoint(tmp_path / "ckpt.pt", out)
    assert not out.exists()  # nothing written for a refused file
    done = convert_torch_checkpoint(tmp_path / "ckpt.pt", out, skip_non_tensors=True)
    assert done.tensors == ["model.w"] and len(done.skipped) == 3
    assert list(genesis.load(out)) == ["model.w"]


class _RunsCodeWhenUnpickled:
    """Unpickling this would make the marker directory: the converter must refuse first."""

    marker = ""

    def __reduce__(self):
        return (os.mkdir, (self.marker,))


def test_arbitrary_objects_are_never_unpickled(tmp_path):
    marker = tmp_path / "code-ran"
    payload = _RunsCodeWhenUnpickled()
    payload.marker = str(marker)
    torch.save({"w": torch.ones(1), "obj": payload}, tmp_path / "evil.pt")
    with pytest.raises(TorchCheckpointError, match=r"needs arbitrary Python objects unpickled "
                       r"\(it holds posix.mkdir\).*torch.save\(model.state_dict\(\)"):
        convert_torch_checkpoint(tmp_path / "evil.pt", tmp_path / "out.safetensors")
    assert not marker.exists()


def test_a_whole_pickled_module_is_refused(tmp_path):
    torch.save(torch.nn.Linear(2, 2), tmp_path / "module.pt")
    with pytest.raises(TorchCheckpointError, match=r"needs arbitrary Python objects unpickled "
                                                   r"\(it holds torch.nn.modules.linear.Linear"):
        convert_torch_checkpoint(tmp_path / "module.pt", tmp_path / "out.safetensors")


@pytest.mark.parametrize("content", [b"", b"hello, not a checkpoint", "zip"])
def test_a_file_that_is_not_a_torch_checkpoint_is_named(tmp_path, content):
    path = tmp_path / "not.pt"
    if content == "zip":
        with zipfile.ZipFile(path, "w") as zf:
            zf.writestr("notes.txt", "hi")
    else:
        path.write_bytes(content)
    with pytest.raises(TorchCheckpointError, match=f"{path}: not a torch.save checkpoint"):
        convert_torch_checkpoint(path, tmp_path / "out.safetensors")


def test_a_safetensors_input_is_recognised(tmp_path):
    genesis.save({"w": genesis.ones(2)}, tmp_path / "already.safetensors")
    with pytest.raises(TorchCheckpointError, match="is a safetensors file already"):
        convert_torch_checkpoint(tmp_path / "already.safetensors", tmp_path / "out.st")


def test_unsupported_tensors_and_paths_are_refused(tmp_path):
    torch.save({"z": torch.ones(2, dtype=torch.complex64)}, tmp_path / "c.pt")
    with pytest.raises(TorchCheckpointError, match="tensor 'z' has dtype torch.complex64"):
        convert_torch_checkpoint(tmp_path / "c.pt", tmp_path / "out.st")
    torch.save({"s": torch.eye(2).to_sparse()}, tmp_path / "s.pt")
    with pytest.raises(TorchCheckpointError, match="tensor 's' is torch.sparse_coo"):
        convert_torch_checkpoint(tmp_path / "s.pt", tmp_path / "out.st")
    torch.save({"a": {"b": torch.ones(1)}, "a.b": torch.ones(1)}, tmp_path / "clash.pt")
    with pytest.raises(TorchCheckpointError, match="two entries flatten to the name 'a.b'"):
        convert_torch_checkpoint(tmp_path / "clash.pt", tmp_path / "out.st")
    with pytest.raises(TorchCheckpointError, match="would overwrite the torch checkpoint"):
        convert_torch_checkpoint(tmp_path / "c.pt", tmp_path / "c.pt")
    with pytest.raises(FileNotFoundError, match="missing.pt: no such file"):
        convert_torch_checkpoint(tmp_path / "missing.pt", tmp_path / "out.st")


def test_the_command_converts_and_reports(tmp_path, capsys):
    torch.save({"w": torch.ones(2), "step": 3}, tmp_path / "in.pt")
    out = tmp_path / "out.safetensors"
    assert main([str(tmp_path / "in.pt"), str(out)]) == 1
    assert "step (int)" in capsys.readouterr().err and not out.exists()
    assert main([str(tmp_path / "in.pt"), str(out), "--skip-non-tensors"]) == 0
    printed = capsys.readouterr().out
    assert f"wrote 1 tensors to {out}" in printed and "skipped 1 non-tensor values" in printed
    assert np.array_equal(genesis.load(out)["w"].numpy(), np.ones(2, np.float32))
    assert main([str(tmp_path / "nothing.pt"), str(out)]) == 1
    assert "no such file" in capsys.readouterr().err


def test_the_command_is_genesis_cores_console_script():
    if sys.version_info < (3, 11):
        pytest.skip("tomllib is Python 3.11+")
    import tomllib

    project = tomllib.loads((ROOT / "packages/genesis-core/pyproject.toml").read_text())
    assert project["project"]["scripts"]["genesis-convert-torch"] == \
        "genesis.torch_checkpoint:main"
    assert os.path.exists(ROOT / "packages/genesis-core/src/genesis/torch_checkpoint.py")

"""genesis.save / genesis.load: round trips, safetensors interop, atomicity, corrupt files."""

from __future__ import annotations

import collections
import json
import math
import os
import pickle
import signal
import struct
import subprocess
import sys
import textwrap
import time

import numpy as np
import pytest
import torch

import genesis
import genesis.optim as goptim
from genesis.amp import GradScaler
from genesis.optim import lr_scheduler
from genesis.serialization import CheckpointError

ALL_DTYPES = [genesis.bool, genesis.uint8, genesis.int8, genesis.int16, genesis.int32,
              genesis.int64, genesis.float16, genesis.bfloat16, genesis.float32, genesis.float64]
TORCH_DTYPE = {genesis.bool: torch.bool, genesis.uint8: torch.uint8, genesis.int8: torch.int8,
               genesis.int16: torch.int16, genesis.int32: torch.int32,
               genesis.int64: torch.int64, genesis.float16: torch.float16,
               genesis.bfloat16: torch.bfloat16, genesis.float32: torch.float32,
               genesis.float64: torch.float64}


def bits(t) -> bytes:
    """The raw bytes of a tensor's values in C order (bf16 as its 16-bit words)."""
    t = t.detach().contiguous()
    if t.dtype is genesis.bfloat16:
        t = t.view(genesis.int16)
    return t.numpy().tobytes()


def same(a, b) -> bool:
    return (a.dtype is b.dtype and tuple(a.shape) == tuple(b.shape) and bits(a) == bits(b))


def sample(dtype, shape=(3, 4), seed=0):
    """Values of ``dtype`` including the awkward ones (nan, inf, -0.0, extremes)."""
    rng = np.random.default_rng(seed)
    n = math.prod(shape)
    if dtype is genesis.bool:
        return genesis.from_numpy(rng.integers(0, 2, n).astype(bool).reshape(shape))
    if dtype.is_floating_point:
        vals = rng.standard_normal(n) * 100
        vals[:4] = [np.nan, np.inf, -np.inf, -0.0][: min(4, n)]
        t = genesis.from_numpy(vals.reshape(shape))
        return t.to(dtype)
    info = np.iinfo(dtype.name)
    vals = rng.integers(info.min, info.max, n, endpoint=True, dtype=np.int64)
    vals[:2] = [info.min, info.max][: min(2, n)]
    return genesis.from_numpy(vals.astype(dtype.name).reshape(shape))


# --------------------------------------------------------------- round trips
@pytest.mark.parametrize("dtype", ALL_DTYPES, ids=lambda d: d.name)
def test_every_dtype_round_trips_bitwise(tmp_path, dtype):
    tensors = {"matrix": sample(dtype), "scalar": sample(dtype, (1,), 1).reshape(()),
               "empty": sample(dtype, (0, 5)), "cube": sample(dtype, (2, 3, 2), 2)}
    path = tmp_path / "t.safetensors"
    genesis.save(tensors, path)
    loaded = genesis.load(path)
    assert list(loaded) == list(tensors)
    for name, t in tensors.items():
        assert same(loaded[name], t), name
        assert loaded[name].device == genesis.device("cpu")


@pytest.mark.parametrize("dtype", [genesis.float32, genesis.bfloat16, genesis.int64,
                                   genesis.bool], ids=lambda d: d.name)
def test_non_contiguous_views_save_their_values(tmp_path, dtype):
    base = sample(dtype, (4, 6))
    views = {"t": base.t(), "step": base[:, ::2], "row": base[1], "col": base[:, 3],
             "expand": base[:1].expand(3, 6), "perm": sample(dtype, (2, 3, 4)).permute(2, 0, 1)}
    genesis.save(views, tmp_path / "v.st")
    loaded = genesis.load(tmp_path / "v.st")
    for name, view in views.items():
        assert same(loaded[name], view.contiguous()), name
        assert loaded[name].is_contiguous()


def test_nested_structure_round_trips_with_types(tmp_path):
    t = genesis.arange(6, dtype=genesis.float32).reshape(2, 3)
    obj = {
        "model": collections.OrderedDict([("layer.weight", t), ("layer.bias", genesis.zeros(3))]),
        "numbers": [0, -7, 2**70, 1.5, -0.0, math.inf, -math.inf, True, False, None],
        "tuple": (1, "two", (3.0, [4])),
        "text": "héllo ✓ \"quoted\" \n",
        "raw": b"\x00\xffbytes",
        7: "int key", (1, "a"): "tuple key", None: "none key", 2.5: "float key",
        "dtype": genesis.bfloat16, "device": genesis.device("cpu"),
        "empty": {}, "empty_list": [], "empty_tuple": (),
    }
    genesis.save(obj, tmp_path / "n.st")
    back = genesis.load(tmp_path / "n.st")
    assert isinstance(back["model"], collections.OrderedDict)
    assert list(back["model"]) == ["layer.weight", "layer.bias"]
    assert same(back["model"]["layer.weight"], t)
    nums = back["numbers"]
    assert nums[:3] == [0, -7, 2**70] and all(type(x) is int for x in nums[:3])
    assert nums[3] == 1.5 and math.copysign(1.0, nums[4]) == -1.0
    assert nums[5] == math.inf and nums[6] == -math.inf
    assert nums[7] is True and nums[8] is False and nums[9] is None
    assert back["tuple"] == (1, "two", (3.0, [4])) and isinstance(back["tuple"][2], tuple)
    assert back["text"] == obj["text"] and back["raw"] == obj["raw"]
    assert back[7] == "int key" and back[(1, "a")] == "tuple key"
    assert back[None] == "none key" and back[2.5] == "float key"
    assert back["dtype"] is genesis.bfloat16 and back["device"] == genesis.device("cpu")
    assert back["empty"] == {} and back["empty_list"] == [] and back["empty_tuple"] == ()
    assert list(back) == list(obj)


def test_nan_float_and_plain_values_at_top_level(tmp_path):
    for value in [math.nan, 3, "s", None, [1, 2], (), genesis.ones(2)]:
        genesis.save(value, tmp_path / "x.st")
        back = genesis.load(tmp_path / "x.st")
        if isinstance(value, float):
            assert math.isnan(back)
        elif isinstance(value, genesis.Tensor):
            assert same(back, value)
        else:
            assert back == value and type(back) is type(value)


def test_shared_tensor_is_stored_once_and_comes_back_shared(tmp_path):
    t = genesis.ones(1000)
    genesis.save({"a": t, "b": [t], "c": genesis.ones(1000)}, tmp_path / "s.st")
    header = _header(tmp_path / "s.st")
    assert len([k for k in header if k != "__metadata__"]) == 2
    back = genesis.load(tmp_path / "s.st")
    assert back["a"] is back["b"][0] and back["c"] is not back["a"]


def test_requires_grad_is_kept(tmp_path):
    w = genesis.randn(3, requires_grad=True)
    genesis.save({"w": w, "d": w.detach()}, tmp_path / "g.st")
    back = genesis.load(tmp_path / "g.st")
    assert back["w"].requires_grad and back["w"].is_leaf
    assert not back["d"].requires_grad


def test_file_objects_round_trip():
    import io

    buf = io.BytesIO()
    genesis.save({"x": genesis.arange(5)}, buf)
    buf.seek(0)
    assert genesis.load(buf)["x"].tolist() == [0, 1, 2, 3, 4]


def test_unsupported_objects_raise_a_clear_type_error(tmp_path):
    with pytest.raises(TypeError, match=r"numpy.ndarray \(at a.0\)"):
        genesis.save({"a": [np.zeros(2)]}, tmp_path / "bad.st")
    with pytest.raises(TypeError, match="set"):
        genesis.save({1, 2}, tmp_path / "bad.st")
    with pytest.raises(TypeError, match="tensor inside a dict key"):
        genesis.save({(genesis.ones(1),): 1}, tmp_path / "bad.st")
    assert not (tmp_path / "bad.st").exists()
    assert os.listdir(tmp_path) == []  # and no temp file left behind


def test_load_never_unpickles(tmp_path, monkeypatch):
    genesis.save({"x": genesis.ones(2), "y": [1, (2, 3)]}, tmp_path / "p.st")

    def forbidden(*args, **kwargs):
        raise AssertionError("pickle used")

    monkeypatch.setattr(pickle, "loads", forbidden)
    monkeypatch.setattr(pickle, "load", forbidden)
    monkeypatch.setattr(pickle, "Unpickler", forbidden)
    assert genesis.load(tmp_path / "p.st")["y"] == [1, (2, 3)]


# ------------------------------------------------- training state checkpoints
def test_training_checkpoint_resumes_identically(tmp_path):
    """Model + AdamW + warmup-cosine schedule + GradScaler + RNG + step: resume == no stop."""

    def make():
        genesis.manual_seed(0)
        w = genesis.randn(4, 3, requires_grad=True)
        b = genesis.zeros(3, requires_grad=True)
        opt = goptim.AdamW([{"params": [w]}, {"params": [b], "weight_decay": 0.0}], lr=0.05,
                           betas=(0.9, 0.95), amsgrad=True)
        sched = lr_scheduler.get_cosine_schedule_with_warmup(opt, 3, 20, min_lr_ratio=0.1)
        seq = lr_scheduler.SequentialLR(opt, [lr_scheduler.LinearLR(opt, 0.5, total_iters=2),
                                              lr_scheduler.StepLR(opt, 3)], milestones=[2])
        scaler = GradScaler("cpu", init_scale=2.0**8, growth_interval=2)
        return w, b, opt, sched, seq, scaler

    def train(state, steps):
        w, b, opt, sched, seq, scaler = state
        for _ in range(steps):
            x = genesis.randn(5, 4)  # draws from the global RNG: its state must resume too
            loss = ((x @ w + b) ** 2).mean()
            opt.zero_grad()
            scaler.scale(loss).backward()
            scaler.step(opt)
            scaler.update()
            sched.step()
            seq.step()

    ref = make()
    train(ref, 10)

    run = make()
    train(run, 4)
    w, b, opt, sched, seq, scaler = run
    genesis.save({"model": {"w": w, "b": b}, "optim": opt.state_dict(),
                  "sched": sched.state_dict(), "seq": seq.state_dict(),
                  "scaler": scaler.state_dict(), "rng": genesis.get_rng_state(), "step": 4},
                 tmp_path / "ckpt.safetensors")
    train(make(), 3)  # disturb the global RNG

    ck = genesis.load(tmp_path / "ckpt.safetensors")
    w2, b2, opt2, sched2, seq2, scaler2 = resumed = make()
    with genesis.no_grad():
        w2.copy_(ck["model"]["w"])
        b2.copy_(ck["model"]["b"])
    opt2.load_state_dict(ck["optim"])
    sched2.load_state_dict(ck["sched"])
    seq2.load_state_dict(ck["seq"])
    scaler2.load_state_dict(ck["scaler"])
    genesis.set_rng_state(ck["rng"])
    assert ck["step"] == 4
    train(resumed, 6)
    for a, c in zip(ref[:2], resumed[:2]):
        assert bits(a) == bits(c)
    assert ref[3].get_last_lr() == sched2.get_last_lr()
    assert ref[4].get_last_lr() == seq2.get_last_lr()
    assert ref[5].state_dict() == scaler2.state_dict()
    assert _flat(ref[2].state_dict()) == _flat(opt2.state_dict())


def _flat(sd):
    if isinstance(sd, dict):
        return {k: _flat(v) for k, v in sd.items()}
    if isinstance(sd, (list, tuple)):
        return type(sd)(_flat(v) for v in sd)
    if isinstance(sd, genesis.Tensor):
        return (str(sd.dtype), tuple(sd.shape), bits(sd))
    return sd


def test_module_state_dict_round_trip(tmp_path):
    nn = pytest.importorskip("genesis.nn")
    model = nn.Sequential(nn.Linear(4, 8), nn.LayerNorm(8), nn.Linear(8, 2))
    model.to(genesis.bfloat16)
    genesis.save(model.state_dict(), tmp_path / "model.safetensors")
    other = nn.Sequential(nn.Linear(4, 8), nn.LayerNorm(8), nn.Linear(8, 2)).to(genesis.bfloat16)
    other.load_state_dict(genesis.load(tmp_path / "model.safetensors"))
    for (name, a), (_, b) in zip(model.state_dict().items(), other.state_dict().items()):
        assert same(a, b), name


def test_optimizer_and_scheduler_state_dicts_round_trip_exactly(tmp_path):
    params = [genesis.randn(3, requires_grad=True), genesis.randn(2, 2, requires_grad=True)]
    opt = goptim.Adam(params, lr=0.1, amsgrad=True)
    scheds = {"onecycle": lr_scheduler.OneCycleLR(opt, max_lr=0.5, total_steps=10),
              "multistep": lr_scheduler.MultiStepLR(opt, [2, 4, 4]),
              "plateau": lr_scheduler.ReduceLROnPlateau(opt)}
    for _ in range(3):
        for p in params:
            p.grad = genesis.randn(*p.shape)
        opt.step()
        scheds["onecycle"].step()
        scheds["multistep"].step()
        scheds["plateau"].step(1.0)
    state = {"optim": opt.state_dict(), **{k: s.state_dict() for k, s in scheds.items()}}
    genesis.save(state, tmp_path / "s.st")
    back = genesis.load(tmp_path / "s.st")
    assert _flat(back) == _flat(state)
    assert back["plateau"]["best"] == 1.0 and back["plateau"]["mode_worse"] == math.inf


def test_rng_state_round_trip(tmp_path):
    genesis.manual_seed(123)
    genesis.rand(10)
    genesis.save({"rng": genesis.get_rng_state()}, tmp_path / "r.st")
    expected = genesis.rand(5)
    genesis.manual_seed(999)
    genesis.set_rng_state(genesis.load(tmp_path / "r.st")["rng"])
    assert bits(genesis.rand(5)) == bits(expected)


# ------------------------------------------------------------- map_location
def test_map_location_forms_on_cpu(tmp_path):
    genesis.save({"x": genesis.ones(2)}, tmp_path / "m.st")
    for loc in [None, "cpu", genesis.device("cpu"), {"cpu": "cpu"}, {"cuda:0": "cpu"}]:
        assert genesis.load(tmp_path / "m.st", map_location=loc)["x"].device == \
            genesis.device("cpu")
    with pytest.raises(TypeError, match="map_location"):
        genesis.load(tmp_path / "m.st", map_location=3.5)


def test_saved_device_is_recorded(tmp_path):
    genesis.save({"x": genesis.ones(2)}, tmp_path / "m.st")
    structure = json.loads(_header(tmp_path / "m.st")["__metadata__"]["genesis"])
    assert "cpu" in json.dumps(structure)


@pytest.mark.cuda
def test_map_location_moves_between_cpu_and_cuda(tmp_path):
    x = genesis.arange(6, dtype=genesis.bfloat16).to("cuda")
    genesis.save({"x": x, "c": genesis.ones(2)}, tmp_path / "g.st")
    back = genesis.load(tmp_path / "g.st")
    assert back["x"].device == genesis.device("cuda:0") and back["c"].device.type == "cpu"
    on_cpu = genesis.load(tmp_path / "g.st", map_location="cpu")
    assert on_cpu["x"].device.type == "cpu" and bits(on_cpu["x"]) == bits(x.to("cpu"))
    to_gpu = genesis.load(tmp_path / "g.st", map_location={"cpu": "cuda:0"})
    assert to_gpu["c"].device == genesis.device("cuda:0")


# ---------------------------------------------------------- safetensors interop
@pytest.mark.parametrize("dtype", ALL_DTYPES, ids=lambda d: d.name)
def test_loads_files_written_by_safetensors_torch(tmp_path, dtype):
    st = pytest.importorskip("safetensors.torch")
    gen = torch.Generator().manual_seed(0)
    tdt = TORCH_DTYPE[dtype]
    if tdt.is_floating_point:
        tensors = {"w": torch.randn(4, 5, generator=gen).to(tdt),
                   "s": torch.tensor(1.25).to(tdt)}
    elif tdt is torch.bool:
        tensors = {"w": torch.rand(4, 5, generator=gen) > 0.5, "s": torch.tensor(True)}
    else:
        tensors = {"w": torch.randint(-100 if tdt.is_signed else 0, 100, (4, 5),
                                      generator=gen).to(tdt), "s": torch.tensor(7).to(tdt)}
    tensors["empty"] = torch.zeros(0, 3, dtype=tdt)
    st.save_file(tensors, str(tmp_path / "torch.safetensors"), metadata={"format": "pt"})
    loaded = genesis.load(tmp_path / "torch.safetensors")
    assert set(loaded) == set(tensors)
    for name, t in tensors.items():
        g = loaded[name]
        assert g.dtype is dtype and tuple(g.shape) == tuple(t.shape)
        raw = t.view(torch.int16) if tdt is torch.bfloat16 else t
        assert bits(g) == raw.numpy().tobytes()


def test_safetensors_can_read_genesis_files(tmp_path):
    st = pytest.importorskip("safetensors.torch")
    tensors = {"a.weight": sample(genesis.bfloat16), "b": sample(genesis.int32, (7,)),
               "c": sample(genesis.bool, (2, 2))}
    genesis.save(tensors, tmp_path / "g.safetensors")
    loaded = st.load_file(str(tmp_path / "g.safetensors"))
    assert set(loaded) == set(tensors)
    for name, t in tensors.items():
        raw = loaded[name].view(torch.int16) if t.dtype is genesis.bfloat16 else loaded[name]
        assert raw.numpy().tobytes() == bits(t)


def test_file_layout_is_safetensors(tmp_path):
    genesis.save({"x": genesis.ones(3, dtype=genesis.float64), "y": genesis.ones(1,
                  dtype=genesis.int8)}, tmp_path / "l.st")
    raw = (tmp_path / "l.st").read_bytes()
    (n,) = struct.unpack("<Q", raw[:8])
    assert n % 8 == 0 and raw[8:9] == b"{"
    header = json.loads(raw[8:8 + n])
    assert header["x"] == {"dtype": "F64", "shape": [3], "data_offsets": [0, 24]}
    assert header["y"] == {"dtype": "I8", "shape": [1], "data_offsets": [24, 25]}
    assert len(raw) == 8 + n + 25


# ---------------------------------------------------------------- atomicity
def test_failed_save_keeps_the_old_file_and_leaves_no_temp(tmp_path, monkeypatch):
    path = tmp_path / "ckpt.st"
    genesis.save({"version": 1, "x": genesis.ones(4)}, path)
    before = path.read_bytes()

    def broken_fsync(fd):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(os, "fsync", broken_fsync)
    with pytest.raises(OSError, match="No space"):
        genesis.save({"version": 2, "x": genesis.zeros(10_000)}, path)
    monkeypatch.undo()
    assert path.read_bytes() == before
    assert os.listdir(tmp_path) == ["ckpt.st"]
    assert genesis.load(path)["version"] == 1


def test_failure_while_writing_tensor_bytes_keeps_the_old_file(tmp_path, monkeypatch):
    import genesis.serialization as ser

    path = tmp_path / "ckpt.st"
    genesis.save({"version": 1}, path)
    real_replace = os.replace
    calls = []

    def interrupted_replace(src, dst):  # the crash happens just before the rename
        calls.append(src)
        raise KeyboardInterrupt

    monkeypatch.setattr(ser.os, "replace", interrupted_replace)
    with pytest.raises(KeyboardInterrupt):
        genesis.save({"version": 2, "x": genesis.ones(100)}, path)
    monkeypatch.setattr(ser.os, "replace", real_replace)
    assert calls and genesis.load(path) == {"version": 1}
    assert os.listdir(tmp_path) == ["ckpt.st"]


def test_new_file_gets_the_usual_permissions(tmp_path):
    genesis.save({"x": 1}, tmp_path / "p.st")
    (tmp_path / "plain").write_bytes(b"")
    assert (tmp_path / "p.st").stat().st_mode == (tmp_path / "plain").stat().st_mode


@pytest.mark.slow
def test_killed_writer_never_leaves_a_torn_file(tmp_path):
    """SIGKILL a process in the middle of overwriting a big checkpoint: the name still loads."""
    path = tmp_path / "ckpt.st"
    genesis.save({"gen": -1, "x": genesis.zeros(4)}, path)
    script = textwrap.dedent(f"""
        import genesis
        x = genesis.ones(4_000_000)  # 16 MB per save: the kill lands inside a save
        for gen in range(10_000):
            genesis.save({{"gen": gen, "x": x * gen}}, {str(path)!r})
            print(gen, flush=True)
    """)
    proc = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE,
                            env={**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)})
    try:
        for _ in range(3):  # let a few generations land, then kill mid-save
            assert proc.stdout.readline().strip(), "writer died early"
        time.sleep(0.05)
    finally:
        proc.send_signal(signal.SIGKILL)
        proc.wait()
    ck = genesis.load(path)  # complete: one whole generation, never a torn file
    assert ck["gen"] >= 2
    assert same(ck["x"], genesis.full((4_000_000,), float(ck["gen"])))
    for leftover in tmp_path.iterdir():  # a killed writer may leave its temp file, no more
        assert leftover.name == "ckpt.st" or leftover.name.endswith(".tmp")


# ------------------------------------------------------------- corrupt files
def _header(path):
    raw = open(path, "rb").read()
    (n,) = struct.unpack("<Q", raw[:8])
    return json.loads(raw[8:8 + n])


def _write(path, header, data: bytes, header_len: int | None = None, raw_header=None):
    head = raw_header if raw_header is not None else json.dumps(header).encode()
    n = len(head) if header_len is None else header_len
    path.write_bytes(struct.pack("<Q", n) + head + data)
    return path


def _entry(dtype="F32", shape=(2,), offsets=(0, 8)):
    return {"dtype": dtype, "shape": list(shape), "data_offsets": list(offsets)}


CORRUPT = {
    "empty file": lambda p: p.write_bytes(b""),
    "shorter than the length field": lambda p: p.write_bytes(b"\x10\x00\x00"),
    "header length beyond file": lambda p: _write(p, {"a": _entry()}, bytes(8),
                                                  header_len=10_000),
    "huge header length": lambda p: p.write_bytes(struct.pack("<Q", 2**63) + b"{}"),
    "truncated header": lambda p: _write(p, None, b"", raw_header=b'{"a": {"dtype": "F3'),
    "bad json": lambda p: _write(p, None, bytes(8), raw_header=b"{not json at all}"),
    "not utf-8": lambda p: _write(p, None, b"", raw_header=b"\xff\xfe{}"),
    "header not an object": lambda p: _write(p, [1, 2, 3], b""),
    "entry not an object": lambda p: _write(p, {"a": 5}, b""),
    "missing dtype": lambda p: _write(p, {"a": {"shape": [2], "data_offsets": [0, 8]}},
                                      bytes(8)),
    "unknown dtype": lambda p: _write(p, {"a": _entry("F8_E4M3", (8,))}, bytes(8)),
    "negative shape": lambda p: _write(p, {"a": _entry(shape=(-2,))}, bytes(8)),
    "shape not a list": lambda p: _write(p, {"a": {**_entry(), "shape": "2"}}, bytes(8)),
    "offsets out of range": lambda p: _write(p, {"a": _entry(offsets=(0, 8))}, bytes(4)),
    "offsets reversed": lambda p: _write(p, {"a": _entry(offsets=(8, 0))}, bytes(8)),
    "offsets not ints": lambda p: _write(p, {"a": _entry(offsets=(0.0, 8.0))}, bytes(8)),
    "overlapping offsets": lambda p: _write(p, {"a": _entry(offsets=(0, 8)),
                                                "b": _entry(offsets=(4, 12))}, bytes(12)),
    "wrong byte count": lambda p: _write(p, {"a": _entry(shape=(3,), offsets=(0, 8))},
                                         bytes(8)),
    "gap between tensors": lambda p: _write(p, {"a": _entry(offsets=(0, 8)),
                                                "b": _entry(offsets=(12, 20))}, bytes(20)),
    "trailing bytes": lambda p: _write(p, {"a": _entry()}, bytes(12)),
    "metadata not strings": lambda p: _write(p, {"__metadata__": {"genesis": 5}}, b""),
    "structure not json": lambda p: _write(p, {"__metadata__": {"genesis": "{oops"}}, b""),
    "structure without root": lambda p: _write(p, {"__metadata__": {"genesis": "{}"}}, b""),
    "newer format version": lambda p: _write(
        p, {"__metadata__": {"genesis": json.dumps({"version": 99, "root": None})}}, b""),
    "missing tensor": lambda p: _write(
        p, {"__metadata__": {"genesis": json.dumps(
            {"version": 1, "root": {"$": "tensor", "name": "nope"}})}}, b""),
    "unknown node": lambda p: _write(
        p, {"__metadata__": {"genesis": json.dumps(
            {"version": 1, "root": {"$": "os.system", "v": "rm -rf /"}})}}, b""),
    "malformed dict node": lambda p: _write(
        p, {"__metadata__": {"genesis": json.dumps(
            {"version": 1, "root": {"$": "dict", "items": [[1]]}})}}, b""),
    "untagged list": lambda p: _write(
        p, {"__metadata__": {"genesis": json.dumps({"version": 1, "root": [1, 2]})}}, b""),
    "unhashable key": lambda p: _write(
        p, {"__metadata__": {"genesis": json.dumps(
            {"version": 1, "root": {"$": "dict", "items": [[{"$": "list", "v": []}, 1]]}})}},
        b""),
    "deeply nested header": lambda p: _write(
        p, None, b"", raw_header=b'{"a":' + b"[" * 100_000 + b"]" * 100_000 + b"}"),
    "deeply nested structure": lambda p: _write(
        p, {"__metadata__": {"genesis": '{"version":1,"root":' + '{"$":"list","v":[' * 50_000
                             + "]}" * 50_000 + "}"}}, b""),
    "bad special float": lambda p: _write(
        p, {"__metadata__": {"genesis": json.dumps(
            {"version": 1, "root": {"$": "float", "v": "__import__('os')"}})}}, b""),
}


@pytest.mark.parametrize("make", CORRUPT.values(), ids=CORRUPT.keys())
def test_corrupt_files_raise_a_clear_error(tmp_path, make):
    path = tmp_path / "bad.safetensors"
    make(path)
    with pytest.raises(CheckpointError, match="bad.safetensors"):
        genesis.load(path)
    assert issubclass(CheckpointError, ValueError)


def test_torch_pickle_files_are_refused_without_unpickling(tmp_path):
    torch.save({"x": torch.ones(2)}, tmp_path / "model.pt")
    with pytest.raises(CheckpointError, match="zip/pickle"):
        genesis.load(tmp_path / "model.pt")
    (tmp_path / "old.pt").write_bytes(pickle.dumps({"x": 1}, protocol=2))
    with pytest.raises(CheckpointError, match="never unpickles"):
        genesis.load(tmp_path / "old.pt")


def test_header_length_with_a_pickle_like_first_byte_still_loads(tmp_path):
    for width in range(0, 400, 4):  # some header length n has n % 256 == 0x80
        genesis.save({"k" * width: genesis.ones(1)}, tmp_path / "x.st")
        if (tmp_path / "x.st").read_bytes()[0] == 0x80:
            assert genesis.load(tmp_path / "x.st")["k" * width].tolist() == [1.0]
            return
    pytest.fail("no header length hit 0x80 in its low byte")


def test_every_truncation_of_a_valid_file_is_rejected(tmp_path):
    good = tmp_path / "good.st"
    genesis.save({"a": genesis.arange(10, dtype=genesis.float32), "b": [1, 2.5],
                  "c": genesis.ones(3, dtype=genesis.int8)}, good)
    raw = good.read_bytes()
    cut = tmp_path / "cut.st"
    for n in range(len(raw)):
        cut.write_bytes(raw[:n])
        with pytest.raises(CheckpointError):
            genesis.load(cut)
    cut.write_bytes(raw)
    assert genesis.load(cut)["b"] == [1, 2.5]


def test_corrupted_header_bytes_never_crash_the_loader(tmp_path):
    """Flip each header byte in turn: load either works or raises CheckpointError."""
    good = tmp_path / "good.st"
    genesis.save({"a": genesis.arange(4, dtype=genesis.float32), "n": 3}, good)
    raw = bytearray(good.read_bytes())
    (n,) = struct.unpack("<Q", bytes(raw[:8]))
    bad = tmp_path / "bad.st"
    for i in range(8 + n):
        flipped = bytearray(raw)
        flipped[i] ^= 0x5A
        bad.write_bytes(bytes(flipped))
        try:
            genesis.load(bad)
        except CheckpointError:
            pass


def test_saving_into_a_missing_directory_names_the_directory(tmp_path):
    missing = tmp_path / "no_such_dir"
    with pytest.raises(FileNotFoundError) as info:
        genesis.save({"x": genesis.ones(2)}, missing / "ckpt.safetensors")
    msg = str(info.value)
    assert repr(str(missing)) in msg and "does not exist" in msg and ".tmp" not in msg, msg

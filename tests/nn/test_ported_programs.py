"""Small training programs written once for torch and run again with ``torch`` renamed to
``genesis`` (the issue's test of porting by renaming): a packed LSTM/GRU language model, a
Transformer sequence-to-sequence step and a DCGAN step. With torch's initial weights copied
in, the losses agree step by step."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from device_params import to_genesis

import genesis

PROGRAM = '''
import torch
import torch.nn as nn
import torch.nn.functional as F


class RecurrentLM(nn.Module):
    def __init__(self, kind, vocab=11, emb=6, hidden=8):
        super().__init__()
        self.embed = nn.Embedding(vocab, emb)
        self.rnn = getattr(nn, kind)(emb, hidden, num_layers=2, batch_first=True,
                                     bidirectional=kind == "GRU")
        self.head = nn.Linear(hidden * (2 if kind == "GRU" else 1), vocab)

    def forward(self, tokens, lengths):
        x = self.embed(tokens)
        packed = nn.utils.rnn.pack_padded_sequence(x, lengths, batch_first=True,
                                                   enforce_sorted=False)
        out, _ = self.rnn(packed)
        out, _ = nn.utils.rnn.pad_packed_sequence(out, batch_first=True,
                                                  total_length=tokens.shape[1])
        return self.head(out)


class Seq2Seq(nn.Module):
    def __init__(self, vocab=11, d_model=16):
        super().__init__()
        self.embed = nn.Embedding(vocab, d_model)
        self.transformer = nn.Transformer(d_model, 2, 1, 1, 32, dropout=0.0,
                                          batch_first=True)
        self.head = nn.Linear(d_model, vocab)

    def forward(self, src, tgt):
        mask = nn.Transformer.generate_square_subsequent_mask(tgt.shape[1])
        return self.head(self.transformer(self.embed(src), self.embed(tgt), tgt_mask=mask))


class Generator(nn.Module):
    def __init__(self, nz=4):
        super().__init__()
        self.main = nn.Sequential(
            nn.ConvTranspose2d(nz, 8, 4, 1, 0, bias=False), nn.BatchNorm2d(8), nn.ReLU(True),
            nn.ConvTranspose2d(8, 4, 4, 2, 1, bias=False), nn.BatchNorm2d(4), nn.ReLU(True),
            nn.ConvTranspose2d(4, 1, 4, 2, 1, bias=False), nn.Tanh())

    def forward(self, z):
        return self.main(z)


class Discriminator(nn.Module):
    def __init__(self):
        super().__init__()
        self.main = nn.Sequential(
            nn.Conv2d(1, 4, 4, 2, 1, bias=False), nn.LeakyReLU(0.2, inplace=True),
            nn.Upsample(scale_factor=0.5, mode="bilinear"),
            nn.Conv2d(4, 1, 4, 1, 0, bias=False), nn.Flatten())

    def forward(self, x):
        return self.main(x)


def train_lm(model, tokens, targets, lengths, steps=3):
    opt = torch.optim.SGD(model.parameters(), lr=0.5)
    losses = []
    for _ in range(steps):
        logits = model(tokens, lengths)
        loss = F.cross_entropy(logits.reshape(-1, logits.shape[-1]), targets.reshape(-1),
                               ignore_index=-100)
        opt.zero_grad()
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        losses.append(loss.item())
    return losses


def train_seq2seq(model, src, tgt_in, tgt_out, steps=3):
    opt = torch.optim.Adam(model.parameters(), lr=1e-2)
    losses = []
    for _ in range(steps):
        logits = model(src, tgt_in)
        loss = F.cross_entropy(logits.reshape(-1, logits.shape[-1]), tgt_out.reshape(-1))
        opt.zero_grad()
        loss.backward()
        opt.step()
        losses.append(loss.item())
    return losses


def dcgan_steps(net_g, net_d, real, noise, steps=2):
    criterion = nn.BCEWithLogitsLoss()
    opt_d = torch.optim.Adam(net_d.parameters(), lr=2e-3, betas=(0.5, 0.999))
    opt_g = torch.optim.Adam(net_g.parameters(), lr=2e-3, betas=(0.5, 0.999))
    ones, zeros = torch.ones(real.shape[0], 1), torch.zeros(real.shape[0], 1)
    losses = []
    for _ in range(steps):
        fake = net_g(noise)
        loss_d = criterion(net_d(real), ones) + criterion(net_d(fake.detach()), zeros)
        opt_d.zero_grad()
        loss_d.backward()
        opt_d.step()
        loss_g = criterion(net_d(fake), ones)
        opt_g.zero_grad()
        loss_g.backward()
        opt_g.step()
        losses += [loss_d.item(), loss_g.item()]
    return losses
'''


def _load(name: str) -> dict:
    source = PROGRAM if name == "torch" else PROGRAM.replace("torch", "genesis")
    namespace: dict = {}
    exec(compile(source, f"<program as {name}>", "exec"), namespace)
    return namespace


TORCH, GENESIS = _load("torch"), _load("genesis")


def _twins(cls_name: str, *args):
    torch.manual_seed(0)
    t_mod = TORCH[cls_name](*args)
    g_mod = GENESIS[cls_name](*args)
    g_mod.load_state_dict({k: to_genesis(v) for k, v in t_mod.state_dict().items()})
    return t_mod, g_mod


RTOL = 1.3e-6  # torch.testing's float32 default, on the per-step float losses


def _both(array):
    return torch.from_numpy(array), genesis.tensor(array)


@pytest.mark.parametrize("kind", ["LSTM", "GRU"])
def test_packed_recurrent_language_model_trains_like_torch(kind):
    rng = np.random.default_rng(0)
    lengths = [5, 7, 3]
    tokens = rng.integers(0, 11, (3, 7))
    targets = np.where(np.arange(7)[None] < np.array(lengths)[:, None],
                       rng.integers(0, 11, (3, 7)), -100)
    t_mod, g_mod = _twins("RecurrentLM", kind)
    t_tok, g_tok = _both(tokens)
    t_tgt, g_tgt = _both(targets)
    want = TORCH["train_lm"](t_mod, t_tok, t_tgt, lengths)
    got = GENESIS["train_lm"](g_mod, g_tok, g_tgt, lengths)
    np.testing.assert_allclose(got, want, rtol=RTOL)


def test_transformer_seq2seq_trains_like_torch():
    rng = np.random.default_rng(1)
    src, tgt = rng.integers(0, 11, (2, 6)), rng.integers(0, 11, (2, 5))
    t_mod, g_mod = _twins("Seq2Seq")
    t_src, g_src = _both(src)
    t_in, g_in = _both(tgt[:, :-1].copy())
    t_out, g_out = _both(tgt[:, 1:].copy())
    want = TORCH["train_seq2seq"](t_mod, t_src, t_in, t_out)
    got = GENESIS["train_seq2seq"](g_mod, g_src, g_in, g_out)
    np.testing.assert_allclose(got, want, rtol=RTOL)


def test_dcgan_step_trains_like_torch():
    rng = np.random.default_rng(2)
    t_g, g_g = _twins("Generator")
    t_d, g_d = _twins("Discriminator")
    real = rng.uniform(-1, 1, (3, 1, 16, 16)).astype(np.float32)
    noise = rng.standard_normal((3, 4, 1, 1)).astype(np.float32)
    t_real, g_real = _both(real)
    t_noise, g_noise = _both(noise)
    want = TORCH["dcgan_steps"](t_g, t_d, t_real, t_noise)
    got = GENESIS["dcgan_steps"](g_g, g_d, g_real, g_noise)
    np.testing.assert_allclose(got, want, rtol=RTOL)

#!/usr/bin/python3
"""deploy/model computes the Llama function llama.cpp computes, written out
here from the formulas alone (numpy, float64), and its weights are laid out
as the GGUF exporter expects.

llama.cpp runs the same weights (deploy/llama), so model.py must not drift
from the architecture "llama" of llama.cpp: RMSNorm as x * 1/sqrt(mean(x^2)
+ eps), then times the weight, eps = 1e-5; rotary positions on ADJACENT
pairs (x[2i], x[2i+1]) by the angle pos * base^(-2i/head_dim), base 10000
(LLAMA_ROPE_TYPE_NORM, not Hugging Face's rotate-half); attention scaled by
1/sqrt(head_dim); SwiGLU W_down(silu(W_gate h) * W_up h); no biases; the
output head tied to the token embedding. Each test computes a part (or the
whole model) by hand from those formulas, with no code of model.py, and
compares it with model.py in float64 (agreement to 1e-10: only the order
of the operations differs). The rotate-half convention, a wrong eps or the
weight applied before the normalisation would each fail them (the tests
check that too, so that they cannot pass by accident).

Run: `make e2e` (it runs this first), or `/usr/bin/python3
tests/e2e/test_formulas.py -v`. E2E_WEIGHTS / E2E_DRAFT_WEIGHTS: other
weights.
"""

import math
import os
import unittest

os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")

import numpy as np  # noqa: E402
import torch  # noqa: E402

import model as lm  # noqa: E402

WEIGHTS = os.environ.get("E2E_WEIGHTS") or lm.WEIGHTS
DRAFT_WEIGHTS = os.environ.get("E2E_DRAFT_WEIGHTS") or lm.DRAFT_WEIGHTS
TOL = 1e-10

# ---- the formulas, in numpy ------------------------------------------------


def rms_norm(x, w, eps):
    """x * 1/sqrt(mean(x^2) + eps), then times w (llama.cpp: ggml_rms_norm,
    then ggml_mul by the weight)."""
    return (x / np.sqrt(np.mean(x * x, axis=-1, keepdims=True) + eps)) * w


def rope(x, pos, base):
    """x [T, H, D] rotated pair by pair: (x[2i], x[2i+1]) by the angle
    pos * base^(-2i/D), written as a loop over the pairs."""
    t, h, d = x.shape
    out = np.empty_like(x)
    for i in range(d // 2):
        theta = pos * base ** (-2.0 * i / d)              # [T]
        c, s = np.cos(theta)[:, None], np.sin(theta)[:, None]
        a, b = x[:, :, 2 * i], x[:, :, 2 * i + 1]
        out[:, :, 2 * i] = a * c - b * s
        out[:, :, 2 * i + 1] = a * s + b * c
    return out


def silu(x):
    return x / (1.0 + np.exp(-x))


def softmax(x):
    e = np.exp(x - x.max(axis=-1, keepdims=True))
    return e / e.sum(axis=-1, keepdims=True)


def layer(W, i, x, pos, mask, cfg):
    """Block i of the weights W (numpy arrays under model.py's names) on
    the residual stream x [T, d_model] at positions pos, mask [T, T]."""
    p = "blocks.%d." % i
    t = x.shape[0]
    heads, eps = cfg["n_heads"], cfg["norm_eps"]
    d = cfg["d_model"] // heads
    h = rms_norm(x, W[p + "attn_norm.weight"], eps)
    q = (h @ W[p + "wq.weight"].T).reshape(t, heads, d)
    k = (h @ W[p + "wk.weight"].T).reshape(t, heads, d)
    v = (h @ W[p + "wv.weight"].T).reshape(t, heads, d)
    q, k = rope(q, pos, cfg["rope_base"]), rope(k, pos, cfg["rope_base"])
    att = np.empty((t, heads, d))
    for j in range(heads):
        scores = q[:, j] @ k[:, j].T / math.sqrt(d)
        scores = np.where(mask, scores, -np.inf)
        att[:, j] = softmax(scores) @ v[:, j]
    x = x + att.reshape(t, heads * d) @ W[p + "wo.weight"].T
    h = rms_norm(x, W[p + "ffn_norm.weight"], eps)
    ff = silu(h @ W[p + "w_gate.weight"].T) * (h @ W[p + "w_up.weight"].T)
    return x + ff @ W[p + "w_down.weight"].T


def logits(W, cfg, tokens, pos, mask):
    x = W["embed.weight"][tokens]
    for i in range(cfg["n_layers"]):
        x = layer(W, i, x, pos, mask, cfg)
    return rms_norm(x, W["norm.weight"], cfg["norm_eps"]) @ W["embed.weight"].T


# ---- the tests -------------------------------------------------------------


def numpy_weights(m):
    return {k: v.double().numpy() for k, v in m.state_dict().items()}


class Formulas(unittest.TestCase):

    @classmethod
    def setUpClass(cls):
        torch.set_num_threads(1)
        cls.models = {name: lm.load(path).double()
                      for name, path in (("target", WEIGHTS),
                                         ("draft", DRAFT_WEIGHTS))}
        with open(lm.HELD_OUT_TEXT, "rb") as f:
            cls.text = f.read()[:40]

    def test_contract(self):
        """Token ids, config and the state_dict's names and shapes: what
        deploy/llama's exporter maps onto llama.cpp's tensors."""
        self.assertEqual((lm.BOS, lm.EOS, lm.VOCAB), (256, 257, 258))
        self.assertEqual(lm.encode(b"ab").tolist(), [256, 97, 98])
        self.assertEqual(lm.encode(b"ab", bos=False).tolist(), [97, 98])
        self.assertEqual(lm.decode([256, 97, 98, 257]), "ab")
        want = {"target": (4, 4, 128, 344), "draft": (1, 2, 64, 172)}
        for name, m in self.models.items():
            c = m.cfg
            self.assertEqual((c.n_layers, c.n_heads, c.d_model, c.d_ff),
                             want[name])
            self.assertEqual((c.vocab, c.norm_eps, c.rope_base),
                             (258, 1e-5, 10000.0))
            d, f = c.d_model, c.d_ff
            shapes = {"embed.weight": (258, d), "norm.weight": (d,)}
            for i in range(c.n_layers):
                p = "blocks.%d." % i
                shapes.update({p + "attn_norm.weight": (d,),
                               p + "ffn_norm.weight": (d,),
                               p + "w_gate.weight": (f, d),
                               p + "w_up.weight": (f, d),
                               p + "w_down.weight": (d, f)})
                for w in ("wq", "wk", "wv", "wo"):
                    shapes[p + w + ".weight"] = (d, d)
            got = {k: tuple(v.shape) for k, v in m.state_dict().items()}
            self.assertEqual(got, shapes)
        for path in (WEIGHTS, DRAFT_WEIGHTS):
            meta = lm.meta(path)
            self.assertEqual((meta["norm_eps"], meta["rope_base"],
                              meta["bos"], meta["eos"]),
                             (1e-5, 10000.0, 256, 257))

    def test_rms_norm(self):
        """model.RMSNorm: normalised, then times the weight, eps 1e-5."""
        m = self.models["target"]
        norm = m.blocks[0].attn_norm
        x = torch.randn(5, m.cfg.d_model, dtype=torch.float64,
                        generator=torch.Generator().manual_seed(1)) * 0.01
        w = norm.weight.numpy()
        got = norm(x).numpy()
        want = rms_norm(x.numpy(), w, 1e-5)
        self.assertLess(np.abs(got - want).max(), TOL)
        # Inputs this small make eps matter: another eps is far off.
        other = rms_norm(x.numpy(), w, 1e-6)
        self.assertGreater(np.abs(got - other).max(), 1e3 * TOL)

    def test_rope(self):
        """model.rope: adjacent pairs, angle pos * 10000^(-2i/D), against
        the loop above and against the pairs as complex numbers times
        e^(i angle) (Meta's reference Llama); rotate-half differs."""
        d, base = 32, 10000.0
        pos = np.array([0, 1, 2, 7, 1000, 4095, 70000], dtype=np.float64)
        x = np.random.default_rng(2).standard_normal((len(pos), 3, d))
        tables = lm.rope_tables(torch.tensor(pos, dtype=torch.long), d, base,
                                torch.float64)
        got = lm.rope(torch.tensor(x), tables).numpy()
        self.assertLess(np.abs(got - rope(x, pos, base)).max(), TOL)
        z = x[..., 0::2] + 1j * x[..., 1::2]
        ang = pos[:, None, None] * base ** (-np.arange(d // 2) * 2.0 / d)
        zr = z * np.exp(1j * ang)
        cplx = np.stack((zr.real, zr.imag), axis=-1).reshape(x.shape)
        self.assertLess(np.abs(got - cplx).max(), TOL)
        # Rotate-half (pairs (i, i + D/2)) is another function.
        a, b = x[..., :d // 2], x[..., d // 2:]
        c, s = np.cos(ang), np.sin(ang)
        half = np.concatenate((a * c - b * s, b * c + a * s), axis=-1)
        self.assertGreater(np.abs(got - half).max(), 0.1)

    def test_one_layer(self):
        """Block 0 of the target by hand: embedding, RMSNorm, q/k/v,
        RoPE, masked softmax, Wo, SwiGLU."""
        m = self.models["target"]
        W, cfg = numpy_weights(m), m.cfg.__dict__
        tokens = lm.encode(self.text)
        t = len(tokens)
        pos = np.arange(t, dtype=np.float64)
        mask = np.tril(np.ones((t, t), dtype=bool))
        want = layer(W, 0, W["embed.weight"][tokens.numpy()], pos, mask, cfg)
        x = m.embed(tokens.unsqueeze(0))
        tables = m._tables(torch.arange(t).unsqueeze(0), torch.float64)
        blk = m.blocks[0]
        q, k, v = blk.qkv_of(x, tables)
        out, _ = lm.attend(q, k, v, torch.tensor(mask).unsqueeze(0))
        got = blk.finish(x, out)[0].numpy()
        self.assertLess(np.abs(got - want).max(), TOL)

    def test_whole_model(self):
        """Logits of both models over BOS and text, by hand, at the
        positions 0..T-1 and at large positions under a window mask (RoPE
        at positions far from 0, where a wrong frequency shows most),
        through forward and through step with a cache."""
        for name, m in self.models.items():
            W, cfg = numpy_weights(m), m.cfg.__dict__
            tokens = lm.encode(self.text)
            t = len(tokens)
            causal = np.tril(np.ones((t, t), dtype=bool))
            want = logits(W, cfg, tokens.numpy(),
                          np.arange(t, dtype=np.float64), causal)
            got = m(tokens).numpy()
            self.assertLess(np.abs(got - want).max(), TOL, name)
            # BOS at 0, then positions far apart, each seeing BOS and the
            # last 8 (a window with one sink).
            pos = np.array([0] + list(range(5000, 5000 + t - 1)))
            win = np.array([[s <= r and (s == 0 or r - s < 8)
                             for s in range(t)] for r in range(t)])
            want = logits(W, cfg, tokens.numpy(), pos.astype(np.float64),
                          win)
            got = m(tokens, positions=torch.tensor(pos),
                    mask=torch.tensor(win)).numpy()
            self.assertLess(np.abs(got - want).max(), TOL, name)
            # The same through step: token i's key and value written to
            # entry perm[i], the entries read in storage order (entry j
            # holds token inv[j]).
            perm = torch.randperm(t, generator=torch.Generator()
                                  .manual_seed(3))
            inv = perm.argsort()
            cache = m.new_cache(t)
            with torch.no_grad():
                got = m.step(tokens.unsqueeze(0),
                             torch.tensor(pos).unsqueeze(0), cache,
                             perm.unsqueeze(0), torch.arange(t).unsqueeze(0),
                             torch.tensor(win)[:, inv].unsqueeze(0))
            self.assertLess(np.abs(got[0].numpy() - want).max(), TOL, name)


if __name__ == "__main__":
    unittest.main()

"""A small Llama-style byte-level transformer for driving evictd end to end.

The vocabulary is the 256 byte values, BOS (256) and EOS (257). Every
sequence starts with BOS at position 0, in training and in every use (as in
Llama's pretraining): ``encode`` prepends it. The architecture is Llama's,
so that the same weights run in llama.cpp (deploy/llama's GGUF exporter
writes them under llama.cpp's names, as they are): pre-norm blocks of
RMSNorm, attention with rotary positions and a SwiGLU feed-forward, no
biases, a final RMSNorm and an output head tied to the token embedding.

Positions are rotary (RoPE, llama.cpp's LLAMA_ROPE_TYPE_NORM: adjacent
pairs), applied to queries and keys from the absolute position of each
token, so a token's key depends only on its token, its position and the
tokens it attended to: an engine can compute it once, keep it in any cache
slot and read it back later, and positions evictd hands out can be used as
they are.

Three ways to run the same weights:

* :meth:`ByteLM.forward`: the whole sequence at once, with an optional
  explicit attention mask over positions (``mask[t, s]`` True: the token at
  t may attend to the one at s). Training uses it with the causal mask; the
  end-to-end tests use it, with a sliding-window mask, as the reference.
* :meth:`ByteLM.step`: a few new tokens per sequence against a KV cache the
  caller owns: the keys and values of the new tokens are written into the
  cache at the places the caller names (ring slots given by evictd, or
  block-pool offsets of a paged cache), then every new token attends over
  the cache entries its mask allows. Nothing in here knows about windows or
  eviction; the mask says everything.
* ``return_attn=True`` on either: also returns the attention probabilities,
  one tensor per layer, ``[batch, heads, queries, keys]`` (for traces).

``load()`` reads the committed weights (``evictd-lm.pt``, the target model,
or ``draft.pt``, a smaller one for speculative decoding). Only torch is
needed; the model runs on the CPU in float32 (or float64 after
``.double()``, which the tests use to show that differences are rounding).

The function, written out (what llama.cpp computes for architecture
"llama"; tests/e2e/test_formulas.py checks it against these formulas):

    x_0       = embed[token]
    rms(x, w) = x * (1 / sqrt(mean(x^2) + norm_eps)) * w     (normalise, then
                                                              the weight)
    per layer:
      h   = rms(x, attn_norm)
      q, k, v = h Wq^T, h Wk^T, h Wv^T,  split into heads of head_dim
      q, k rotated: pairs (2i, 2i+1), i < head_dim/2, by the angle
          pos * rope_base^(-2i / head_dim):
          (a, b) -> (a cos - b sin, a sin + b cos)
      att = softmax(q k^T / sqrt(head_dim), masked) v
      x   = x + att Wo^T
      h   = rms(x, ffn_norm)
      x   = x + (silu(h Wgate^T) * (h Wup^T)) Wdown^T
    logits = rms(x, norm) embed^T
"""

import math
import os
from dataclasses import asdict, dataclass
from typing import Callable, List, Optional, Sequence, Tuple

import torch
import torch.nn as nn
import torch.nn.functional as F

HERE = os.path.dirname(os.path.abspath(__file__))
WEIGHTS = os.path.join(HERE, "evictd-lm.pt")
DRAFT_WEIGHTS = os.path.join(HERE, "draft.pt")
# Token ids: 0..255 the byte values, then BOS and EOS.
BOS = 256
EOS = 257
VOCAB = 258
# Text the models did not train on (train.py holds it out): 11,358 bytes,
# from Debian's base-files, so on every Debian machine.
HELD_OUT_TEXT = "/usr/share/common-licenses/Apache-2.0"


@dataclass
class Config:
    n_layers: int = 4
    n_heads: int = 4
    d_model: int = 128
    d_ff: int = 344
    rope_base: float = 10000.0
    vocab: int = VOCAB
    norm_eps: float = 1e-5

    @property
    def head_dim(self) -> int:
        return self.d_model // self.n_heads


def rope_tables(positions: torch.Tensor, dim: int, base: float,
                dtype: torch.dtype) -> Tuple[torch.Tensor, torch.Tensor]:
    """cos and sin [..., T, 1, dim/2] of the rotary angles of integer
    positions [..., T]: entry i is the angle pos * base^(-2i/dim) of the
    pair (2i, 2i+1). The angles are computed in float64 and then cast, so
    that the rotation of position p is the same whatever else is in the
    batch, and exact enough for any uint32 p."""
    half = dim // 2
    inv = base ** (-torch.arange(half, dtype=torch.float64) * 2.0 / dim)
    ang = positions.to(torch.float64).unsqueeze(-1) * inv
    return (torch.cos(ang).to(dtype).unsqueeze(-2),
            torch.sin(ang).to(dtype).unsqueeze(-2))


def rope(x: torch.Tensor, tables: Tuple[torch.Tensor, torch.Tensor]
         ) -> torch.Tensor:
    """Rotates x [..., T, H, D] by rope_tables of its positions: adjacent
    pairs (x[2i], x[2i+1]) by angle i (llama.cpp's LLAMA_ROPE_TYPE_NORM,
    the original Llama's convention; not Hugging Face's rotate-half)."""
    cos, sin = tables
    a, b = x[..., 0::2], x[..., 1::2]
    return torch.stack((a * cos - b * sin, a * sin + b * cos),
                       dim=-1).flatten(-2)


class RMSNorm(nn.Module):
    """x * rsqrt(mean(x^2) + eps) * weight, over the last dimension:
    normalised first, then multiplied by the weight (llama.cpp's
    ggml_rms_norm followed by ggml_mul)."""

    def __init__(self, dim: int, eps: float) -> None:
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(dim))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return (x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps)
                ) * self.weight


def attend(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor,
           mask: torch.Tensor) -> Tuple[torch.Tensor, torch.Tensor]:
    """q [B, Q, H, D], k and v [B, K, H, D], mask [B, Q, K] (True: may
    attend; a batch dimension of 1 applies to every sequence). Returns the
    output [B, Q, H, D] and the probabilities [B, H, Q, K]. Masked keys get
    probability exactly 0 (their score is -inf); a row with no key allowed
    is an error of the caller (every token attends at least to itself).

    The scores are q k^T / sqrt(D) plus the mask's 0 or -inf, in one
    baddbmm: at T = 1024 the [B, H, T, T] temporaries of a separate scale
    and masked_fill cost more than the products (training)."""
    b, nq, h, d = q.shape
    nk = k.shape[1]
    scale = 1.0 / math.sqrt(d)
    bias = torch.zeros(mask.shape, dtype=q.dtype).masked_fill_(
        ~mask, float("-inf")).unsqueeze(1)                # [B|1, 1, Q, K]
    if bias.shape[0] == 1:
        bias = bias.squeeze(0)                            # [1, Q, K]
    else:
        bias = bias.expand(b, h, nq, nk).reshape(b * h, nq, nk)
    qh = q.transpose(1, 2).reshape(b * h, nq, d)
    kh = k.transpose(1, 2).reshape(b * h, nk, d)
    vh = v.transpose(1, 2).reshape(b * h, nk, d)
    scores = torch.baddbmm(bias, qh, kh.transpose(1, 2), alpha=scale)
    probs = torch.softmax(scores, dim=-1)
    out = torch.bmm(probs, vh).view(b, h, nq, d).transpose(1, 2)
    return out, probs.view(b, h, nq, nk)


class Block(nn.Module):
    """A Llama block: x + Wo(attn(rms(x))), then + Wdown(silu(Wgate h) *
    Wup h) with h = rms(x). Parameter names are a contract with
    deploy/llama's exporter."""

    def __init__(self, cfg: Config) -> None:
        super().__init__()
        self.cfg = cfg
        d, f = cfg.d_model, cfg.d_ff
        self.attn_norm = RMSNorm(d, cfg.norm_eps)
        self.wq = nn.Linear(d, d, bias=False)
        self.wk = nn.Linear(d, d, bias=False)
        self.wv = nn.Linear(d, d, bias=False)
        self.wo = nn.Linear(d, d, bias=False)
        self.ffn_norm = RMSNorm(d, cfg.norm_eps)
        self.w_gate = nn.Linear(d, f, bias=False)
        self.w_up = nn.Linear(d, f, bias=False)
        self.w_down = nn.Linear(f, d, bias=False)

    def qkv_of(self, x: torch.Tensor, tables
               ) -> Tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """Queries, keys (both rotated by the rope tables of their
        positions) and values [B, T, H, D] of x."""
        b, t, _ = x.shape
        h, d = self.cfg.n_heads, self.cfg.head_dim
        n = self.attn_norm(x)
        q = self.wq(n).view(b, t, h, d)
        k = self.wk(n).view(b, t, h, d)
        v = self.wv(n).view(b, t, h, d)
        return rope(q, tables), rope(k, tables), v

    def finish(self, x: torch.Tensor, att: torch.Tensor) -> torch.Tensor:
        """The residual stream after this block, given attention output
        att [B, T, H, D]."""
        b, t, _ = x.shape
        x = x + self.wo(att.reshape(b, t, self.cfg.d_model))
        h = self.ffn_norm(x)
        return x + self.w_down(F.silu(self.w_gate(h)) * self.w_up(h))


class ByteLM(nn.Module):
    def __init__(self, cfg: Optional[Config] = None) -> None:
        super().__init__()
        self.cfg = cfg or Config()
        c = self.cfg
        self.embed = nn.Embedding(c.vocab, c.d_model)
        self.blocks = nn.ModuleList(Block(c) for _ in range(c.n_layers))
        self.norm = RMSNorm(c.d_model, c.norm_eps)
        # The output head is the embedding, transposed (tied weights).
        # Initialisation: matrices N(0, 0.02), the projections back into
        # the residual stream (wo, w_down) scaled down by sqrt(2 * layers);
        # RMSNorm weights 1.
        for name, p in self.named_parameters():
            if p.dim() == 2:
                std = 0.02
                if name.endswith(("wo.weight", "w_down.weight")):
                    std /= math.sqrt(2 * c.n_layers)
                nn.init.normal_(p, 0.0, std)

    def n_params(self) -> int:
        return sum(p.numel() for p in self.parameters())

    def _tables(self, positions: torch.Tensor, dtype: torch.dtype):
        return rope_tables(positions, self.cfg.head_dim, self.cfg.rope_base,
                           dtype)

    def _logits(self, x: torch.Tensor) -> torch.Tensor:
        return F.linear(self.norm(x), self.embed.weight)

    def forward(self, tokens: torch.Tensor,
                positions: Optional[torch.Tensor] = None,
                mask: Optional[torch.Tensor] = None,
                return_attn: bool = False,
                on_attn: Optional[Callable[[int, torch.Tensor], None]] = None):
        """tokens [B, T] (or [T]) of token ids (a sequence starts with BOS
        at position 0). positions default to 0..T-1; mask [T, T] or
        [B, T, T] (True: may attend) defaults to causal. Returns logits
        [B, T, VOCAB] and, with return_attn, the list of per-layer
        probabilities [B, H, T, T] (batch dimension dropped for 1-D
        tokens). on_attn(layer, probs [B, H, T, T]) is called as each layer
        is computed, for callers that want the probabilities one layer at a
        time (long traces) rather than all at the end."""
        squeeze = tokens.dim() == 1
        if squeeze:
            tokens = tokens.unsqueeze(0)
        b, t = tokens.shape
        if positions is None:
            positions = torch.arange(t)
        positions = positions.expand(b, t)
        if mask is None:
            mask = torch.ones(t, t, dtype=torch.bool).tril()
        if mask.dim() == 2:
            mask = mask.unsqueeze(0)          # one mask for every sequence
        if mask.shape != (1, t, t):
            mask = mask.expand(b, t, t)
        x = self.embed(tokens)
        tables = self._tables(positions, x.dtype)
        attn: List[torch.Tensor] = []
        for layer, blk in enumerate(self.blocks):
            q, k, v = blk.qkv_of(x, tables)
            out, probs = attend(q, k, v, mask)
            if on_attn is not None:
                on_attn(layer, probs)
            if return_attn:
                attn.append(probs)
            x = blk.finish(x, out)
        logits = self._logits(x)
        if squeeze:
            logits = logits.squeeze(0)
            attn = [a.squeeze(0) for a in attn]
        return (logits, attn) if return_attn else logits

    def new_cache(self, entries: int, dtype: Optional[torch.dtype] = None
                  ) -> List[Tuple[torch.Tensor, torch.Tensor]]:
        """An empty KV store: per layer (K, V), each [entries, H, D]. The
        caller decides what an entry is (a ring slot of a sequence, a
        block-pool offset)."""
        c = self.cfg
        dtype = dtype or self.embed.weight.dtype
        return [(torch.zeros(entries, c.n_heads, c.head_dim, dtype=dtype),
                 torch.zeros(entries, c.n_heads, c.head_dim, dtype=dtype))
                for _ in range(c.n_layers)]

    def step(self, tokens: torch.Tensor, positions: torch.Tensor,
             cache: Sequence[Tuple[torch.Tensor, torch.Tensor]],
             write: torch.Tensor, read: torch.Tensor, mask: torch.Tensor,
             return_attn: bool = False):
        """Runs new tokens against a KV store the caller owns.

        tokens, positions, write: [B, N] (B sequences, N new tokens each,
        padded). ``write[b, i]`` is the entry of ``cache`` where the key and
        value of token (b, i) go, -1 for padding (not written, and its
        logits are garbage). read: [B, S], the entries sequence b may read,
        in any order (-1 for padding). mask: [B, N, S], True where token
        (b, i) attends to entry read[b, j]. All writes of a layer happen
        before any token of that layer attends, as in an engine's
        multi-token pass; a token must be allowed to see its own entry.

        For a ring of R slots per sequence, with the cache holding B * R
        entries: write = b * R + slot, read[b] = b * R + arange(R).

        Returns logits [B, N, VOCAB] and, with return_attn, per layer the
        probabilities [B, H, N, S] over the read entries.
        """
        b, n = tokens.shape
        wmask = write >= 0
        widx = write[wmask]
        rmask = read >= 0
        ridx = read.clamp(min=0)
        if bool((mask & ~rmask.unsqueeze(1)).any()):
            raise ValueError("the mask allows a padding entry")
        x = self.embed(tokens)
        tables = self._tables(positions, x.dtype)
        attn: List[torch.Tensor] = []
        for blk, (kc, vc) in zip(self.blocks, cache):
            q, k, v = blk.qkv_of(x, tables)
            kc[widx] = k[wmask]
            vc[widx] = v[wmask]
            out, probs = attend(q, kc[ridx], vc[ridx], mask)
            if return_attn:
                attn.append(probs)
            x = blk.finish(x, out)
        logits = self._logits(x)
        return (logits, attn) if return_attn else logits


def save(model: ByteLM, path: str, **meta) -> None:
    torch.save({"config": asdict(model.cfg), "state": model.state_dict(),
                "meta": meta}, path)


def load(path: str = WEIGHTS) -> ByteLM:
    """The model saved at path (float32, eval mode, no gradients)."""
    if not os.path.exists(path):
        raise FileNotFoundError("no weights at %s (train them with "
                                "deploy/model/train.py)" % path)
    blob = torch.load(path, map_location="cpu")
    model = ByteLM(Config(**blob["config"]))
    model.load_state_dict(blob["state"])
    model.eval()
    for p in model.parameters():
        p.requires_grad_(False)
    return model


def meta(path: str = WEIGHTS) -> dict:
    """What train.py recorded beside the weights (losses, data, time,
    hyperparameters)."""
    return torch.load(path, map_location="cpu").get("meta", {})


def encode(text, bos: bool = True) -> torch.Tensor:
    """Bytes (or str, as UTF-8) to a tensor of token ids: [BOS] and the
    byte values (bos=False: the byte values alone, for continuing a
    sequence)."""
    if isinstance(text, str):
        text = text.encode("utf-8")
    return torch.tensor(([BOS] if bos else []) + list(text),
                        dtype=torch.long)


def decode(tokens) -> str:
    """Token ids back to text: BOS and EOS left out, invalid UTF-8
    replaced."""
    return bytes(int(t) for t in tokens if int(t) < 256).decode(
        "utf-8", errors="replace")

"""A small decoder-only byte-level transformer for driving evictd end to end.

The vocabulary is the 256 byte values. Positions are rotary (RoPE), applied
to queries and keys from the absolute position of each token, so a token's
key depends only on its byte, its position and the tokens it attended to:
an engine can compute it once, keep it in any cache slot and read it back
later, and positions evictd hands out can be used as they are.

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
VOCAB = 256
# Text the models did not train on (train.py holds it out): 11,358 bytes,
# from Debian's base-files, so on every Debian machine.
HELD_OUT_TEXT = "/usr/share/common-licenses/Apache-2.0"


@dataclass
class Config:
    n_layers: int = 4
    n_heads: int = 4
    d_model: int = 128
    d_ff: int = 512
    rope_base: float = 10000.0
    vocab: int = VOCAB

    @property
    def head_dim(self) -> int:
        return self.d_model // self.n_heads


def rope_tables(positions: torch.Tensor, dim: int, base: float,
                dtype: torch.dtype) -> Tuple[torch.Tensor, torch.Tensor]:
    """cos and sin [..., T, 1, dim/2] of the rotary angles of integer
    positions [..., T]. The angles are computed in float64 and then cast,
    so that the rotation of position p is the same whatever else is in the
    batch, and exact enough for any uint32 p."""
    half = dim // 2
    inv = base ** (-torch.arange(half, dtype=torch.float64) * 2.0 / dim)
    ang = positions.to(torch.float64).unsqueeze(-1) * inv
    return (torch.cos(ang).to(dtype).unsqueeze(-2),
            torch.sin(ang).to(dtype).unsqueeze(-2))


def rope(x: torch.Tensor, tables: Tuple[torch.Tensor, torch.Tensor]
         ) -> torch.Tensor:
    """Rotates x [..., T, H, D] by rope_tables of its positions (the
    rotate-half convention: pairs (i, i + D/2))."""
    cos, sin = tables
    half = x.shape[-1] // 2
    x1, x2 = x[..., :half], x[..., half:]
    return torch.cat((x1 * cos - x2 * sin, x2 * cos + x1 * sin), dim=-1)


def attend(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor,
           mask: torch.Tensor) -> Tuple[torch.Tensor, torch.Tensor]:
    """q [B, Q, H, D], k and v [B, K, H, D], mask [B, Q, K] (True: may
    attend). Returns the output [B, Q, H, D] and the probabilities
    [B, H, Q, K]. Masked keys get probability exactly 0; a row with no key
    allowed is an error of the caller (every token attends at least to
    itself)."""
    scale = 1.0 / math.sqrt(q.shape[-1])
    scores = torch.einsum("bqhd,bkhd->bhqk", q, k) * scale
    scores = scores.masked_fill(~mask.unsqueeze(1), float("-inf"))
    probs = torch.softmax(scores, dim=-1)
    out = torch.einsum("bhqk,bkhd->bqhd", probs, v)
    return out, probs


class Block(nn.Module):
    def __init__(self, cfg: Config) -> None:
        super().__init__()
        self.cfg = cfg
        self.ln1 = nn.LayerNorm(cfg.d_model)
        self.qkv = nn.Linear(cfg.d_model, 3 * cfg.d_model, bias=False)
        self.proj = nn.Linear(cfg.d_model, cfg.d_model, bias=False)
        self.ln2 = nn.LayerNorm(cfg.d_model)
        self.fc1 = nn.Linear(cfg.d_model, cfg.d_ff)
        self.fc2 = nn.Linear(cfg.d_ff, cfg.d_model)

    def qkv_of(self, x: torch.Tensor, tables
               ) -> Tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """Queries, keys (both rotated by the rope tables of their
        positions) and values [B, T, H, D] of x."""
        b, t, _ = x.shape
        h, d = self.cfg.n_heads, self.cfg.head_dim
        q, k, v = self.qkv(self.ln1(x)).view(b, t, 3, h, d).unbind(2)
        return rope(q, tables), rope(k, tables), v

    def finish(self, x: torch.Tensor, att: torch.Tensor) -> torch.Tensor:
        """The residual stream after this block, given attention output
        att [B, T, H, D]."""
        b, t, _ = x.shape
        x = x + self.proj(att.reshape(b, t, self.cfg.d_model))
        return x + self.fc2(F.gelu(self.fc1(self.ln2(x))))


class ByteLM(nn.Module):
    def __init__(self, cfg: Optional[Config] = None) -> None:
        super().__init__()
        self.cfg = cfg or Config()
        c = self.cfg
        self.embed = nn.Embedding(c.vocab, c.d_model)
        self.blocks = nn.ModuleList(Block(c) for _ in range(c.n_layers))
        self.ln_f = nn.LayerNorm(c.d_model)
        # The output head is the embedding, transposed (tied weights).
        # GPT-2's initialisation: N(0, 0.02), the projections back into the
        # residual stream scaled down by sqrt(2 * layers).
        for name, p in self.named_parameters():
            if name.endswith("bias"):
                nn.init.zeros_(p)
            elif p.dim() == 2:
                std = 0.02
                if name.endswith(("proj.weight", "fc2.weight")):
                    std /= math.sqrt(2 * c.n_layers)
                nn.init.normal_(p, 0.0, std)

    def n_params(self) -> int:
        return sum(p.numel() for p in self.parameters())

    def _tables(self, positions: torch.Tensor, dtype: torch.dtype):
        return rope_tables(positions, self.cfg.head_dim, self.cfg.rope_base,
                           dtype)

    def _logits(self, x: torch.Tensor) -> torch.Tensor:
        return F.linear(self.ln_f(x), self.embed.weight)

    def forward(self, tokens: torch.Tensor,
                positions: Optional[torch.Tensor] = None,
                mask: Optional[torch.Tensor] = None,
                return_attn: bool = False,
                on_attn: Optional[Callable[[int, torch.Tensor], None]] = None):
        """tokens [B, T] (or [T]) of byte values. positions default to
        0..T-1; mask [T, T] or [B, T, T] (True: may attend) defaults to
        causal. Returns logits [B, T, 256] and, with return_attn, the list
        of per-layer probabilities [B, H, T, T] (batch dimension dropped
        for 1-D tokens). on_attn(layer, probs [B, H, T, T]) is called as
        each layer is computed, for callers that want the probabilities
        one layer at a time (long traces) rather than all at the end."""
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
            mask = mask.unsqueeze(0)
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

        Returns logits [B, N, 256] and, with return_attn, per layer the
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
    """What train.py recorded beside the weights (losses, data, time)."""
    return torch.load(path, map_location="cpu").get("meta", {})


def encode(text) -> torch.Tensor:
    """Bytes (or str, as UTF-8) to a tensor of byte values."""
    if isinstance(text, str):
        text = text.encode("utf-8")
    return torch.tensor(list(text), dtype=torch.long)


def decode(tokens) -> str:
    """Byte values back to text (invalid UTF-8 replaced)."""
    return bytes(int(t) for t in tokens).decode("utf-8", errors="replace")

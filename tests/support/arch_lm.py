"""The reference's models of two more of llama.cpp's architectures, read
from a GGUF file with llama.cpp's own gguf-py and computed in float64 as
llama.cpp's graphs say (src/models/gemma3.cpp, src/models/lfm2.cpp), for
reference.forward_rows: the logits of a token sequence in which each
token attends to the positions of its row, whatever the KV cache lost.

    model = arch_lm.load(path)      # "gemma3" or "lfm2", by the file
    logits = model.forward_rows(tokens, rows, qpos, kpos)   # [T, vocab]

Both rotate queries and keys the NEOX way (llama_model_rope_type: the
pairs (x[i], x[i + n_rot/2]), not adjacent ones as for "llama"), with
llama.cpp's float32 angles (reference.ggml_rope_tables), and normalise
as llama.cpp does: x * (1 / sqrt(mean(x^2) + eps)) * w, the weight as
the file has it (the converters already added Gemma's 1 to its norms).

gemma3, per layer (x_0 = embed[token] * sqrtf(n_embd)):
    h = rms(x, attn_norm); q, k, v = projections, split into heads;
    q = rope(rms_head(q, q_norm)) * attention_scale; k = rope(rms_head(k,
    k_norm)); a = softmax(q k^T, masked) v Wo^T (attention_scale is
    1/sqrt(key_length), 1/sqrt(n_embd/n_head) for the 62-layer 27B);
    x = x + rms(a, post_attention_norm);
    x = x + rms(geglu(rms(x, ffn_norm)), post_ffw_norm);
  then logits = rms(x, output_norm) output^T (the embedding if no
  output.weight), softcapped by c * tanh(logits / c) when the file has
  final_logit_softcapping. Sliding-window (SWA) layers, when the file
  has attention.sliding_window n_swa > 0: layer il is one unless
  il % P == P - 1, P the file's attention.sliding_window_pattern (a
  number; llama.cpp's default 6, which it also keeps when the key is an
  array), or every layer when P is 0. Those rotate with
  rope.freq_base_swa (llama.cpp's default 10000, not rope.freq_base) and
  no frequency scaling; the others with rope.freq_base and the file's
  linear scaling. A SWA layer's query at position p sees key q only if
  p - q < n_swa (llama_hparams::is_masked_swa, standard type: masked
  when p - q >= n_swa), so n_swa positions, its own included; p and q
  are the RoPE positions qpos and kpos, what llama.cpp compares (the
  absolute ones unless the engine moves its cells: see _Rows), or with
  window="rows" the rows' absolute positions.

lfm2, per layer (x_0 = embed[token]):
    h = rms(x, attn_norm);
    a short convolution (layers whose attention.head_count_kv is 0):
      B, C, u = thirds of h in_proj^T; s = B * u; y_t = sum_k
      conv[:, k] * s_(t - l_cache + 1 + k) (s before token 0 is zero: the
      state starts empty); a = (C * y) out_proj^T;
    or attention: q/k head norms, rope (rope.freq_base), softmax(q k^T /
      sqrt(head_dim), masked) v Wo^T (windowed when the file has an
      attention.sliding_window, as gemma3's SWA layers);
    x = x + a; x = x + swiglu(rms(x, ffn_norm));
  logits = rms(x, token_embd_norm) output^T: llama.cpp reads LFM2's
  final norm from the tensor "token_embd_norm" (LLM_TENSOR_OUTPUT_NORM_
  LFM2, "fix for wrong tensor name"), tied to the embedding.
  The convolution is recurrent: its state reads every token the
  sequence is given, in order, and never loses one, so it runs over
  tokens 0..T-1 whatever the rows say; the attention layers alone read
  the rows.

The GELU of gemma3's feed-forward is the one ggml's CPU backend computes
(ggml_vec_geglu_f32 under GGML_GELU_FP16): the tanh approximation
looked up in a float16 table, x rounded to float16 and the result too (0
for x <= -10, x for x >= 10). Its rounding (relative 2^-11) is not
small against the float32 arithmetic the comparison allows for, so by
default the reference rounds as llama.cpp does, as it takes llama.cpp's
RoPE angles; gelu="exact" computes the formula in float64 instead.
"""

import math
from typing import Any, Dict, List, Optional, Sequence, Tuple

import numpy as np
import torch

from support import paths
from support import reference as ref

torch.set_num_threads(1)

# How many queries forward_rows computes at once (their scores and
# weights are [chunk, heads, widest row] and [chunk, heads, T]).
CHUNK = 256


def _rms(x: torch.Tensor, w: torch.Tensor, eps: float) -> torch.Tensor:
    """ggml_rms_norm over the last dimension, then the weight."""
    return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps) * w


def _rope_neox(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor,
               n_rot: int) -> torch.Tensor:
    """Rotates x [..., H, D] the NEOX way: the pairs (x[i], x[i + n_rot /
    2]), i < n_rot / 2, by angle i (cos, sin: [..., 1, n_rot / 2]); the
    dimensions from n_rot on are left as they are."""
    half = n_rot // 2
    a, b = x[..., :half], x[..., half:n_rot]
    return torch.cat((a * cos - b * sin, a * sin + b * cos, x[..., n_rot:]),
                     -1)


def _tables(top: int, n_rot: int, base: float, scale: float
            ) -> Tuple[torch.Tensor, torch.Tensor]:
    """cos and sin [top, 1, n_rot / 2] of positions 0..top-1, the angles
    as ggml computes them (reference.ggml_rope_tables), times scale in
    float32 when there is linear scaling (ggml's rope_yarn with
    ext_factor 0: theta = freq_scale * theta)."""
    pos = torch.arange(top)
    if scale == 1.0:
        return ref.ggml_rope_tables(pos, n_rot, base, torch.float64)
    s = np.float32(np.power(np.float32(base), np.float32(-2.0 / n_rot)))
    theta = pos.numpy().astype(np.float32)
    cols = []
    for _ in range(n_rot // 2):
        cols.append((np.float32(scale) * theta).astype(np.float32))
        theta = (theta * s).astype(np.float32)
    ang = torch.from_numpy(np.stack(cols, -1).astype(np.float64))
    return torch.cos(ang).unsqueeze(-2), torch.sin(ang).unsqueeze(-2)


def _gelu_ggml(x: torch.Tensor) -> torch.Tensor:
    """ggml's CPU GELU: float16 in, the tanh approximation in float32,
    float16 out; 0 at or below -10, x at or above 10."""
    h = x.to(torch.float16).to(torch.float32)
    c = torch.tensor(0.79788456080286535587989211986876, dtype=torch.float32)
    a = torch.tensor(0.044715, dtype=torch.float32)
    g = 0.5 * h * (1.0 + torch.tanh(c * h * (1.0 + a * h * h)))
    g = g.to(torch.float16).to(torch.float64)
    return torch.where(x <= -10.0, torch.zeros_like(x),
                       torch.where(x >= 10.0, x, g))


def _gelu_exact(x: torch.Tensor) -> torch.Tensor:
    """The same tanh approximation, in float64."""
    c = math.sqrt(2.0 / math.pi)
    return 0.5 * x * (1.0 + torch.tanh(c * x * (1.0 + 0.044715 * x * x)))


class _Rows:
    """forward_rows' rows as tensors: for each query i, the positions it
    attends to (idx [T, W], padded; valid marks the real ones), the RoPE
    positions of its query (qp [T]) and of its keys (kp [T, W]), and the
    distance the window rule measures (dist [T, W])."""

    def __init__(self, rows: Sequence[Sequence[int]], qpos: Sequence[int],
                 kpos: Sequence[Sequence[int]], window: str) -> None:
        t = len(rows)
        w = max(len(r) for r in rows)
        self.idx = torch.zeros(t, w, dtype=torch.long)
        self.kp = torch.zeros(t, w, dtype=torch.long)
        self.valid = torch.zeros(t, w, dtype=torch.bool)
        for i, (r, k) in enumerate(zip(rows, kpos)):
            if len(r) != len(k) or not r or r[-1] != i:
                raise ValueError("row %d (%d positions, %d key positions) "
                                 "does not end with its own position"
                                 % (i, len(r), len(k)))
            self.idx[i, :len(r)] = torch.tensor(list(r))
            self.kp[i, :len(r)] = torch.tensor(list(k))
            self.valid[i, :len(r)] = True
        self.qp = torch.tensor(list(qpos))
        self.top = int(max(int(self.kp.max()), int(self.qp.max()))) + 1
        # The distinct (position, key position) pairs, and the one of each
        # (i, j) (so that a key is rotated once per key position).
        self.pairs, pair = torch.unique(
            self.idx * self.top + self.kp, return_inverse=True)
        self.pairs = torch.stack((self.pairs // self.top,
                                  self.pairs % self.top), -1)
        self.pair = pair.view(t, w)
        # The window rule compares positions: with window="rows"
        # the absolute ones the rows hold, query i at i and key rows[i][j]
        # at rows[i][j], a window over the sequence whatever RoPE index a
        # token is rotated at. llama.cpp compares the positions its cells
        # hold with the query's (is_masked_swa(n_swa, type, cell pos,
        # query pos)): the absolute ones, as long as the engine gives
        # each token its own position and never moves a cell, and then
        # qpos/kpos are the same numbers. An engine that moves its cells
        # (llama_memory_seq_add, the "cache" mode of
        # reference.rope_positions) has llama.cpp window the moved
        # positions: window="rope" (the default) measures on qpos/kpos,
        # which checked against llama.cpp with cells shifted after each
        # removal agrees (and "rows" then does not).
        if window == "rows":
            self.dist = torch.arange(t).unsqueeze(1) - self.idx
        elif window == "rope":
            self.dist = self.qp.unsqueeze(1) - self.kp
        else:
            raise ValueError("window %r: rows or rope" % window)


class _Attention:
    """One attention layer's weights and shape."""

    def __init__(self, t: Dict[str, torch.Tensor], b: str, n_head: int,
                 n_kv: int, head: int, n_rot: int, base: float,
                 scale: float, kq_scale: float, q_scale: float,
                 swa: bool) -> None:
        if b + "attn_qkv.weight" in t:
            wqkv = t.pop(b + "attn_qkv.weight")
            bqkv = t.pop(b + "attn_qkv.bias", None)
            nq, nk = n_head * head, n_kv * head
            self.wq, self.wk, self.wv = (wqkv[:nq], wqkv[nq:nq + nk],
                                         wqkv[nq + nk:])
            self.bq = self.bk = self.bv = None
            if bqkv is not None:
                self.bq, self.bk, self.bv = (bqkv[:nq], bqkv[nq:nq + nk],
                                             bqkv[nq + nk:])
        else:
            self.wq = t.pop(b + "attn_q.weight")
            self.wk = t.pop(b + "attn_k.weight")
            self.wv = t.pop(b + "attn_v.weight")
            self.bq = t.pop(b + "attn_q.bias", None)
            self.bk = t.pop(b + "attn_k.bias", None)
            self.bv = t.pop(b + "attn_v.bias", None)
        self.wo = t.pop(b + "attn_output.weight")
        self.q_norm = t.pop(b + "attn_q_norm.weight")
        self.k_norm = t.pop(b + "attn_k_norm.weight")
        self.n_head, self.n_kv, self.head = n_head, n_kv, head
        self.n_rot, self.base, self.scale = n_rot, base, scale
        self.kq_scale, self.q_scale, self.swa = kq_scale, q_scale, swa

    def __call__(self, h: torch.Tensor, r: _Rows, n_swa: int, eps: float,
                 tables: Dict[Tuple[float, float], Tuple]) -> torch.Tensor:
        """The layer's output [T, n_embd] for input h [T, n_embd] (after
        the attention norm), each query over its row."""
        t = h.shape[0]
        q, k, v = h @ self.wq.T, h @ self.wk.T, h @ self.wv.T
        if self.bq is not None:
            q, k, v = q + self.bq, k + self.bk, v + self.bv
        q = _rms(q.view(t, self.n_head, self.head), self.q_norm, eps)
        k = _rms(k.view(t, self.n_kv, self.head), self.k_norm, eps)
        v = v.view(t, self.n_kv, self.head)
        key = (self.base, self.scale)
        if key not in tables:
            tables[key] = _tables(r.top, self.n_rot, self.base, self.scale)
        cos, sin = tables[key]
        q = _rope_neox(q, cos[r.qp], sin[r.qp], self.n_rot) * self.q_scale
        # Each key rotated once for each RoPE position it is read at
        # (r.pair: the distinct (position, key position) pairs).
        pos, at = r.pairs[:, 0], r.pairs[:, 1]
        k = _rope_neox(k[pos], cos[at], sin[at], self.n_rot)
        # Grouped-query attention: query head j reads KV head j // group
        # (as in gguf_lm), so the query heads are viewed [kv, group].
        group = self.n_head // self.n_kv
        q = q.view(t, self.n_kv, group, self.head)
        keep = r.valid
        if self.swa:
            keep = keep & (r.dist < n_swa)
        out = torch.empty(t, self.n_kv, group, self.head,
                          dtype=torch.float64)
        for a in range(0, t, CHUNK):
            z = min(t, a + CHUNK)
            # Each query's scores against the keys its chunk reads, then
            # those of its row picked out of them; or, where the chunk
            # reads many more keys than a row holds (keys at other RoPE
            # positions for each query), against its row's keys gathered.
            u, inv = torch.unique(r.pair[a:z], return_inverse=True)
            if len(u) <= 4 * r.idx.shape[1]:
                s = torch.einsum("tkgd,ukd->tkgu", q[a:z], k[u]).gather(
                    -1, inv[:, None, None, :].expand(-1, self.n_kv, group,
                                                     -1))
            else:
                s = q[a:z] @ k[r.pair[a:z]].permute(0, 2, 3, 1)
            s = (s * self.kq_scale).masked_fill(~keep[a:z, None, None, :],
                                                float("-inf"))
            # The weights spread over the positions (0 where masked and
            # for the padding), then one product with the values.
            w = torch.zeros(z - a, self.n_kv, group, t, dtype=torch.float64)
            w.scatter_add_(-1, r.idx[a:z, None, None, :].expand(
                -1, self.n_kv, group, -1), torch.softmax(s, -1))
            out[a:z] = torch.einsum("tkgs,skd->tkgd", w, v)
        return out.reshape(t, -1) @ self.wo.T


class _ShortConv:
    """One LFM2 short-convolution layer's weights."""

    def __init__(self, t: Dict[str, torch.Tensor], b: str) -> None:
        self.conv = t.pop(b + "shortconv.conv.weight")   # [n_embd, l]
        self.in_proj = t.pop(b + "shortconv.in_proj.weight")
        self.out_proj = t.pop(b + "shortconv.out_proj.weight")

    def __call__(self, h: torch.Tensor) -> torch.Tensor:
        """Over the tokens in order, the state starting empty."""
        t, n = h.shape
        bcx = h @ self.in_proj.T
        b, c, u = bcx[:, :n], bcx[:, n:2 * n], bcx[:, 2 * n:]
        s = b * u
        l_cache = self.conv.shape[1]
        pad = torch.cat((torch.zeros(l_cache - 1, n, dtype=s.dtype), s))
        y = torch.zeros_like(s)
        for j in range(l_cache):
            y = y + pad[j:j + t] * self.conv[:, j]
        return (c * y) @ self.out_proj.T


class ArchLM:
    """A model of one GGUF file: forward_rows. Built by load()."""

    arch = ""

    def __init__(self, meta: Dict[str, Any], t: Dict[str, torch.Tensor],
                 gelu: str) -> None:
        self.meta = meta
        self.eps = float(self._get("attention.layer_norm_rms_epsilon"))
        self.embed = t.pop("token_embd.weight")
        self.n_vocab, self.n_embd = self.embed.shape
        self.output = t.pop("output.weight", self.embed)
        self.n_layers = int(self._get("block_count"))
        self.n_swa = int(self._get("attention.sliding_window", 0))
        if gelu not in ("ggml", "exact"):
            raise ValueError("gelu %r: ggml or exact" % gelu)
        self.gelu = _gelu_ggml if gelu == "ggml" else _gelu_exact
        self.layers: List[Any] = []
        self.ffn: List[Dict[str, torch.Tensor]] = []

    def _get(self, key: str, default: Any = None) -> Any:
        v = self.meta.get("%s.%s" % (self.arch, key), default)
        if v is None:
            raise ValueError("no %s.%s in the file" % (self.arch, key))
        return v

    def _per_layer(self, key: str, default: Any = None) -> List[int]:
        """A key that may be one number or one per layer."""
        v = self._get(key, default)
        if isinstance(v, (list, tuple)):
            if len(v) != self.n_layers:
                raise ValueError("%s.%s has %d values for %d layers"
                                 % (self.arch, key, len(v), self.n_layers))
            return [int(x) for x in v]
        return [int(v)] * self.n_layers

    def _rope(self) -> Tuple[float, float]:
        """rope.freq_base (default 10000) and the frequency scale of the
        file's scaling: linear (1 / factor) or none; others refused."""
        base = float(self._get("rope.freq_base", 10000.0))
        kind = self._get("rope.scaling.type", "linear")
        factor = float(self._get("rope.scaling.factor",
                                 self._get("rope.scale_linear", 0.0)))
        if kind not in ("linear", "none"):
            raise ValueError("RoPE scaling %s is not computed here" % kind)
        if float(self._get("rope.scaling.attn_factor", 1.0)) != 1.0:
            raise ValueError("rope.scaling.attn_factor is not computed here")
        scale = 1.0 / factor if kind == "linear" and factor else 1.0
        return base, scale

    def _ffn_of(self, t: Dict[str, torch.Tensor], b: str) -> None:
        self.ffn.append({k: t.pop(b + k + ".weight") for k in
                         ("ffn_norm", "ffn_gate", "ffn_up", "ffn_down")})

    def _mlp(self, il: int, x: torch.Tensor, act) -> torch.Tensor:
        f = self.ffn[il]
        h = _rms(x, f["ffn_norm"], self.eps)
        return (act(h @ f["ffn_gate"].T) * (h @ f["ffn_up"].T)) \
            @ f["ffn_down"].T

    def forward_rows(self, tokens: Sequence[int],
                     rows: Sequence[Sequence[int]], qpos: Sequence[int],
                     kpos: Sequence[Sequence[int]],
                     window: str = "rope") -> torch.Tensor:
        """The logits [T, vocab] (float64) of tokens 0..T-1, token i's
        attention layers reading the positions rows[i] (ascending, its
        own, i, last), its query rotated at qpos[i] and key rows[i][j] at
        kpos[i][j] (reference.forward_rows); sliding-window layers also
        drop the keys the window rule masks, measured on qpos and kpos
        as llama.cpp measures it on its cells' positions (the absolute
        ones but in cache mode; window="rows": on the rows' absolute
        positions whatever the mode; see _Rows)."""
        if len(rows) != len(tokens) or len(qpos) != len(tokens):
            raise ValueError("%d tokens, %d rows, %d query positions"
                             % (len(tokens), len(rows), len(qpos)))
        r = _Rows(rows, qpos, kpos, window)
        with torch.no_grad():
            return self._forward(torch.tensor(list(tokens)), r)

    def _forward(self, tokens: torch.Tensor, r: _Rows) -> torch.Tensor:
        raise NotImplementedError


class Gemma3(ArchLM):
    """llama.cpp's gemma3 (src/models/gemma3.cpp); see the module's doc."""

    arch = "gemma3"

    def __init__(self, meta: Dict[str, Any], t: Dict[str, torch.Tensor],
                 gelu: str) -> None:
        super().__init__(meta, t, gelu)
        self.out_norm = t.pop("output_norm.weight")
        n_head = int(self._get("attention.head_count"))
        n_kv = self._per_layer("attention.head_count_kv", n_head)
        head = int(self._get("attention.key_length", self.n_embd // n_head))
        n_rot = int(self._get("rope.dimension_count", head))
        for key in ("attention.value_length", "attention.key_length_swa",
                    "attention.value_length_swa"):
            if int(self._get(key, head)) != head:
                raise ValueError("gemma3.%s is not the key length %d"
                                 % (key, head))
        if int(self._get("rope.dimension_count_swa", n_rot)) != n_rot:
            raise ValueError("gemma3.rope.dimension_count_swa differs")
        base, scale = self._rope()
        pattern = self._get("attention.sliding_window_pattern", 6)
        if isinstance(pattern, (list, tuple)):
            pattern = 6  # llama.cpp keeps its default for an array
        pattern = int(pattern)
        if self.n_swa > 0:
            swa = [pattern == 0 or il % pattern < pattern - 1
                   for il in range(self.n_layers)]
            base_swa = float(self._get("rope.freq_base_swa", 10000.0))
        else:
            self.n_swa = 0
            swa = [False] * self.n_layers
        self.swa = swa
        self.softcap = float(self._get("final_logit_softcapping", 0.0))
        if self.n_layers == 62:  # llama.cpp's LLM_TYPE_27B
            q_scale = 1.0 / math.sqrt(float(np.float32(self.n_embd
                                                       // n_head)))
        else:
            q_scale = 1.0 / math.sqrt(head)
        self.post = []
        for il in range(self.n_layers):
            b = "blk.%d." % il
            self.layers.append(_Attention(
                t, b, n_head, n_kv[il], head, n_rot,
                base_swa if swa[il] else base, 1.0 if swa[il] else scale,
                1.0, q_scale, swa[il]))
            self._ffn_of(t, b)
            self.post.append({k: t.pop(b + k + ".weight") for k in
                              ("attn_norm", "post_attention_norm",
                               "post_ffw_norm")})

    def _forward(self, tokens: torch.Tensor, r: _Rows) -> torch.Tensor:
        emb_scale = float(np.float32(math.sqrt(self.n_embd)))
        x = self.embed[tokens] * emb_scale
        tables: Dict = {}
        for il, att in enumerate(self.layers):
            p = self.post[il]
            a = att(_rms(x, p["attn_norm"], self.eps), r, self.n_swa,
                    self.eps, tables)
            x = x + _rms(a, p["post_attention_norm"], self.eps)
            x = x + _rms(self._mlp(il, x, self.gelu), p["post_ffw_norm"],
                         self.eps)
        logits = _rms(x, self.out_norm, self.eps) @ self.output.T
        if self.softcap:
            logits = self.softcap * torch.tanh(logits / self.softcap)
        return logits


class LFM2(ArchLM):
    """llama.cpp's lfm2 (src/models/lfm2.cpp); see the module's doc."""

    arch = "lfm2"

    def __init__(self, meta: Dict[str, Any], t: Dict[str, torch.Tensor],
                 gelu: str) -> None:
        super().__init__(meta, t, gelu)
        self.out_norm = t.pop("token_embd_norm.weight")
        n_head = int(self._get("attention.head_count"))
        n_kv = self._per_layer("attention.head_count_kv", n_head)
        head = self.n_embd // n_head
        for key in ("attention.key_length", "attention.value_length",
                    "rope.dimension_count"):
            if int(self._get(key, head)) != head:
                raise ValueError("lfm2.%s is not the head size %d"
                                 % (key, head))
        base, scale = self._rope()
        if self.n_swa <= 0:
            self.n_swa = 0
        self.norms = []
        for il in range(self.n_layers):
            b = "blk.%d." % il
            if n_kv[il] == 0:
                self.layers.append(_ShortConv(t, b))
            else:
                self.layers.append(_Attention(
                    t, b, n_head, n_kv[il], head, head, base, scale,
                    1.0 / math.sqrt(head), 1.0, self.n_swa > 0))
            self._ffn_of(t, b)
            self.norms.append(t.pop(b + "attn_norm.weight"))

    def _forward(self, tokens: torch.Tensor, r: _Rows) -> torch.Tensor:
        x = self.embed[tokens]
        tables: Dict = {}
        for il, layer in enumerate(self.layers):
            h = _rms(x, self.norms[il], self.eps)
            if isinstance(layer, _ShortConv):
                x = x + layer(h)
            else:
                x = x + layer(h, r, self.n_swa, self.eps, tables)
            x = x + self._mlp(il, x, torch.nn.functional.silu)
        return _rms(x, self.out_norm, self.eps) @ self.output.T


ARCHES = {"gemma3": Gemma3, "lfm2": LFM2}


def load(path: str, gguf_py: Optional[str] = None,
         gelu: str = "ggml") -> ArchLM:
    """The model of a GGUF file of an architecture in ARCHES (its
    general.architecture), float64; gguf_py as paths.import_gguf's
    (default: the build's own). F16 weights are read exactly, but
    llama.cpp multiplies them with activations it rounds to float16,
    which this does not (the tests' models are F32)."""
    gguf = paths.import_gguf(gguf_py)
    r = gguf.GGUFReader(path)
    # (not the tokenizer's: seconds of gguf-py's time for a large one)
    meta = {k: f.contents() for k, f in r.fields.items()
            if not k.startswith("tokenizer.")}
    arch = meta.get("general.architecture")
    if arch not in ARCHES:
        raise ValueError("architecture %r: only %s" % (arch,
                                                       ", ".join(ARCHES)))
    t = {}
    for x in r.tensors:
        if x.tensor_type not in (gguf.GGMLQuantizationType.F32,
                                 gguf.GGMLQuantizationType.F16):
            raise ValueError("%s is %s: only F32 and F16 are read"
                             % (x.name, x.tensor_type.name))
        t[x.name] = torch.from_numpy(np.array(x.data, dtype=np.float64))
    model = ARCHES[arch](meta, t, gelu)
    if t:
        raise ValueError("tensors the reference has no place for: %s"
                         % ", ".join(sorted(t)))
    return model

"""The reference's models of four more of llama.cpp's architectures, read
from a GGUF file with llama.cpp's own gguf-py and computed in float64 as
llama.cpp's graphs say (src/models/gemma3.cpp, lfm2.cpp, openai-moe.cpp,
granite-hybrid.cpp), for reference.forward_rows: the logits of a token
sequence in which each token attends to the positions of its row,
whatever the KV cache lost.

    model = arch_lm.load(path)      # by the file's architecture:
    # "gemma3", "lfm2", "gpt-oss" or "granitehybrid"
    logits = model.forward_rows(tokens, rows, qpos, kpos)   # [T, vocab]

All but granitehybrid rotate queries and keys the NEOX way
(llama_model_rope_type: the pairs (x[i], x[i + n_rot/2]); granitehybrid
the NORM way, adjacent pairs (x[2i], x[2i + 1]), as "llama" does), with
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

gpt-oss, per layer (x_0 = embed[token]):
    h = rms(x, attn_norm); q, k, v = projections plus their biases;
    a = softmax(rope(q) rope(k)^T / sqrtf(n_rot), masked, sink) v Wo^T
      + bo, the sink a learned logit per query head (attn_sinks) that
      joins the softmax's denominator (ggml_soft_max_add_sinks: weights
      e^s_j / (sum_j e^s_j + e^sink), summing to less than 1);
    x = x + a; h = rms(x, post_attention_norm);
    the experts: l = h router^T + router_b; the expert_used_count experts
      of the largest l, weighted by softmax over their l alone
      (LLAMA_EXPERT_GATING_FUNC_TYPE_SOFTMAX_WEIGHT, no renormalising,
      no scale); each is (swiglu_oai(h Wg_e^T + bg_e, h Wu_e^T + bu_e))
      Wd_e^T + bd_e, swiglu_oai(g, u) = g' sigmoid(1.702 g') (u' + 1),
      g' = min(g, 7), u' = clamp(u, -7, 7) (ggml_swiglu_oai, the alpha
      and limit build_moe_ffn fixes); x = x + their weighted sum;
  logits = rms(x, output_norm) output^T. Sliding-window layers: layer
  il is one when il % P < P - 1, P the file's
  attention.sliding_window_pattern (a number; default 2, kept for an
  array: the even layers), or every layer when P is 0; its window is
  gemma3's rule with attention.sliding_window (required, > 0), and it
  rotates with rope.freq_base_swa (default rope.freq_base) and the
  trained frequency scale; the others with the context's (the same
  but for rope.scaling.type "none"). RoPE scaling "linear", "none" or
  "yarn" (ArchLM._rope_ext; _tables computes YaRN as ggml's rope_yarn
  does: the ramp between interpolated and extrapolated angles over
  _yarn_corr_dims, and cos and sin times get_mscale(factor)).

granitehybrid, per layer (x_0 = embed[token] * embedding_scale, when the
  file has one; the other multipliers likewise only when it has them):
    h = rms(x, attn_norm);
    a Mamba-2 layer (llm_build_mamba_base::build_mamba2_layer; layers
      whose attention.head_count_kv is 0): z, xBC, dt = h in_proj^T
      split d_inner, d_inner + 2 G N, H (ssm.inner_size, group_count,
      state_size, time_step_rank = the heads); xBC = silu(the causal
      convolution of ssm.conv_kernel taps over xBC, zeros before token 0,
      + conv1d bias) (ggml_ssm_conv), split x [H, P], B [G, N], C [G,
      N]; head h reads group h // (H / G); dt = softplus(dt + dt_bias)
      (x itself above 20); the state S [H, P, N], empty at token 0,
      S_t = S_(t-1) * exp(dt A) + (x dt) B^T, y = S_t C (ggml_ssm_scan:
      A one number per head); y = y + x D; y = silu(z) * y; y = rms of
      each of the G groups of y, times ssm_norm; a = y out_proj^T;
    or attention: q, k, v = projections (+ optional biases); rope (NORM
      pairs, rope.freq_base, the file's scaling) unless
      rope.scaling.finetuned is false (Granite's switch for RoPE: the
      hybrid converters turn it off, no positions at all); a =
      softmax(q k^T * attention.scale (default 1/sqrtf(head)), masked)
      v Wo^T (+ bo); no sliding window;
    x = x + a * residual_scale;
    f = swiglu(rms(x, ffn_norm)) (+ optional biases), or the experts when
      the file has expert_count: softmax over the router's logits, the
      expert_used_count largest, weighted by their probabilities divided
      by their sum (at least 2^-14), each silu(h Wg_e^T) * (h Wu_e^T)
      Wd_e^T, plus a shared expert's swiglu when
      expert_shared_feed_forward_length > 0;
    x = x + f * residual_scale;
  logits = rms(x, output_norm) output^T * (1 / logit_scale) (the
  embedding when there is no output.weight). The Mamba-2 layers are
  recurrent as lfm2's convolutions are: they read tokens 0..T-1 in
  order whatever the rows say.

llama.cpp's K-shift (llama_memory_seq_add, the cache positions of
reference.rope_positions) rotates every cell of the cache by its shift,
0 included, with the context's attn_factor: where that is not 1 (YaRN,
rope.scaling.attn_factor) each pass after a shift multiplies every key
held by it again, which no row describes; with those files only the
original positions are llama.cpp's (linear scaling alone shifts
exactly).

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


def _rope_norm(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor,
               n_rot: int) -> torch.Tensor:
    """Rotates x [..., H, D] the NORM way (llama's): the adjacent pairs
    (x[2i], x[2i + 1]), i < n_rot / 2, by angle i; the dimensions from
    n_rot on are left as they are."""
    a, b = x[..., 0:n_rot:2], x[..., 1:n_rot:2]
    r = torch.stack((a * cos - b * sin, a * sin + b * cos), -1)
    return torch.cat((r.flatten(-2), x[..., n_rot:]), -1)


def _yarn_corr_dims(n_rot: int, n_ctx_orig: int, base: float,
                    beta_fast: float, beta_slow: float) -> Tuple[float, float]:
    """ggml_rope_yarn_corr_dims, in float32: the first and last pair
    (floor and ceil) between which YaRN ramps from extrapolation to
    interpolation."""
    f = np.float32

    def dim(beta: float) -> np.float32:
        return f(f(n_rot) * np.log(f(f(n_ctx_orig) / (f(beta) * f(2.0)
                                                        * f(math.pi))))
                 / (f(2.0) * np.log(f(base))))

    return (max(0.0, float(math.floor(dim(beta_fast)))),
            min(float(n_rot - 1), float(math.ceil(dim(beta_slow)))))


def _tables(top: int, n_rot: int, base: float, scale: float,
            yarn: Optional[Tuple[float, float, float, float, int]] = None
            ) -> Tuple[torch.Tensor, torch.Tensor]:
    """cos and sin [top, 1, n_rot / 2] of positions 0..top-1, the angles
    as ggml computes them (reference.ggml_rope_tables), times scale in
    float32 when there is linear scaling (ggml's rope_yarn with
    ext_factor 0: theta = freq_scale * theta). yarn, (ext_factor,
    attn_factor, beta_fast, beta_slow, n_ctx_orig) as ggml_rope_ext
    takes them, is the rest of rope_yarn, in float32 as ggml computes it:
    pair i's angle ramp-mixed between the interpolated and the
    extrapolated one, mix = ext_factor * (1 - clamp((i - low) / max(
    0.001, high - low), 0, 1)) (low, high: _yarn_corr_dims), and cos and
    sin times mscale = attn_factor * (1 + 0.1 ln(1 / scale)) (without
    the ln term when ext_factor is 0). The mix is one fused multiply-add,
    fma(interpolated, 1 - mix, extrapolated * mix), as GCC contracts
    rope_yarn's sum in the build's ggml-cpu (-mfma): computed with two
    roundings instead, the angles are a float32 ulp off llama.cpp's,
    which at position 500 moved logits by 3e-5 against 8e-6 (a tiny
    gpt-oss of large weights)."""
    pos = torch.arange(top)
    if scale == 1.0 and yarn is None:
        return ref.ggml_rope_tables(pos, n_rot, base, torch.float64)
    f = np.float32
    s = f(np.power(f(base), f(-2.0 / n_rot)))
    theta = pos.numpy().astype(f)
    ext, mscale, low, high = 0.0, 1.0, 0.0, 0.0
    if yarn is not None:
        ext, attn, beta_fast, beta_slow, n_ctx_orig = yarn
        mscale = f(attn)
        if ext:
            low, high = _yarn_corr_dims(n_rot, n_ctx_orig, base, beta_fast,
                                        beta_slow)
            mscale = f(mscale * (f(1.0) + f(0.1) * np.log(f(1.0)
                                                        / f(scale))))
    cols = []
    for i in range(n_rot // 2):
        ang = (f(scale) * theta).astype(f)
        if ext:
            y = f(f(i - low) / max(f(0.001), f(high - low)))
            mix = f(f(1.0 - min(1.0, max(0.0, float(y)))) * f(ext))
            ang = (ang.astype(np.float64) * float(f(1.0 - mix))
                   + (theta * mix).astype(f)).astype(f)
        cols.append(ang)
        theta = (theta * s).astype(f)
    ang = torch.from_numpy(np.stack(cols, -1).astype(np.float64))
    m = float(mscale)
    return (torch.cos(ang) * m).unsqueeze(-2), \
        (torch.sin(ang) * m).unsqueeze(-2)


def _linear(x: torch.Tensor, w: torch.Tensor,
            b: Optional[torch.Tensor] = None) -> torch.Tensor:
    """x w^T, plus b when there is one."""
    y = x @ w.T
    return y if b is None else y + b


def _softplus(x: torch.Tensor) -> torch.Tensor:
    """ggml_compute_softplus_f32: ln(1 + e^x), x itself above 20."""
    return torch.where(x > 20.0, x, torch.log1p(torch.exp(x.clamp(
        max=20.0))))


def _swiglu_oai(g: torch.Tensor, u: torch.Tensor) -> torch.Tensor:
    """ggml_swiglu_oai with build_moe_ffn's alpha 1.702 and limit 7 (as
    float32 numbers): x = min(g, 7), y = clamp(u, -7, 7), then
    x * sigmoid(alpha x) * (y + 1)."""
    alpha = float(np.float32(1.702))
    x = g.clamp(max=7.0)
    return x * torch.sigmoid(alpha * x) * (u.clamp(-7.0, 7.0) + 1.0)


def _swiglu(g: torch.Tensor, u: torch.Tensor) -> torch.Tensor:
    """silu(g) * u."""
    return torch.nn.functional.silu(g) * u


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
    """One attention layer's weights and shape. rope is the way its
    queries and keys rotate ("neox", "norm", or None: not at all), yarn
    the rest of ggml_rope_ext's arguments (_tables); norms says it has
    q/k head norms, out_bias an output bias, sinks a learned logit per
    query head (attn_sinks) that joins each softmax's denominator."""

    def __init__(self, t: Dict[str, torch.Tensor], b: str, n_head: int,
                 n_kv: int, head: int, n_rot: int, base: float,
                 scale: float, kq_scale: float, q_scale: float,
                 swa: bool, rope: Optional[str] = "neox",
                 yarn: Optional[Tuple] = None, norms: bool = True,
                 out_bias: bool = False, sinks: bool = False) -> None:
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
        self.bo = t.pop(b + "attn_output.bias", None) if out_bias else None
        self.q_norm = self.k_norm = None
        if norms:
            self.q_norm = t.pop(b + "attn_q_norm.weight")
            self.k_norm = t.pop(b + "attn_k_norm.weight")
        self.sinks = t.pop(b + "attn_sinks.weight") if sinks else None
        self.n_head, self.n_kv, self.head = n_head, n_kv, head
        self.rope = rope
        self.rope_key = (n_rot, base, scale, yarn)
        self.n_rot = n_rot
        self.kq_scale, self.q_scale, self.swa = kq_scale, q_scale, swa

    def __call__(self, h: torch.Tensor, r: _Rows, n_swa: int, eps: float,
                 tables: Dict[Tuple[float, float], Tuple]) -> torch.Tensor:
        """The layer's output [T, n_embd] for input h [T, n_embd] (after
        the attention norm), each query over its row."""
        t = h.shape[0]
        q, k, v = h @ self.wq.T, h @ self.wk.T, h @ self.wv.T
        if self.bq is not None:
            q, k, v = q + self.bq, k + self.bk, v + self.bv
        q = q.view(t, self.n_head, self.head)
        k = k.view(t, self.n_kv, self.head)
        if self.q_norm is not None:
            q = _rms(q, self.q_norm, eps)
            k = _rms(k, self.k_norm, eps)
        v = v.view(t, self.n_kv, self.head)
        # Each key rotated once for each RoPE position it is read at
        # (r.pair: the distinct (position, key position) pairs).
        pos, at = r.pairs[:, 0], r.pairs[:, 1]
        if self.rope is None:
            q, k = q * self.q_scale, k[pos]
        else:
            key = self.rope_key
            if key not in tables:
                tables[key] = _tables(r.top, *key)
            cos, sin = tables[key]
            rot = _rope_neox if self.rope == "neox" else _rope_norm
            q = rot(q, cos[r.qp], sin[r.qp], self.n_rot) * self.q_scale
            k = rot(k[pos], cos[at], sin[at], self.n_rot)
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
            if self.sinks is None:
                p = torch.softmax(s, -1)
            else:
                # A sink is one more logit in the softmax (query head j's,
                # j = kv * group + g), whose weight goes nowhere.
                sk = self.sinks.view(1, self.n_kv, group, 1)
                p = torch.softmax(torch.cat(
                    (s, sk.expand(z - a, -1, -1, -1)), -1), -1)[..., :-1]
            # The weights spread over the positions (0 where masked and
            # for the padding), then one product with the values.
            w = torch.zeros(z - a, self.n_kv, group, t, dtype=torch.float64)
            w.scatter_add_(-1, r.idx[a:z, None, None, :].expand(
                -1, self.n_kv, group, -1), p)
            out[a:z] = torch.einsum("tkgs,skd->tkgd", w, v)
        out = out.reshape(t, -1) @ self.wo.T
        return out if self.bo is None else out + self.bo


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


class _Mamba2:
    """One Mamba-2 layer's weights and shape (llm_build_mamba_base::
    build_mamba2_layer); the module's doc has its formulas."""

    def __init__(self, t: Dict[str, torch.Tensor], b: str, d_conv: int,
                 d_inner: int, d_state: int, n_head: int,
                 n_group: int) -> None:
        if d_inner % n_head or d_inner % n_group or n_head % n_group:
            raise ValueError("Mamba-2 of d_inner %d, %d heads, %d groups"
                             % (d_inner, n_head, n_group))
        self.in_proj = t.pop(b + "ssm_in.weight")
        self.conv = t.pop(b + "ssm_conv1d.weight")   # [channels, d_conv]
        self.conv_b = t.pop(b + "ssm_conv1d.bias", None)
        self.dt_b = t.pop(b + "ssm_dt.bias")
        self.a = t.pop(b + "ssm_a").reshape(n_head)
        self.d = t.pop(b + "ssm_d").reshape(n_head)
        self.norm = t.pop(b + "ssm_norm.weight").reshape(n_group, -1)
        self.out_proj = t.pop(b + "ssm_out.weight")
        self.d_conv, self.d_inner, self.d_state = d_conv, d_inner, d_state
        self.n_head, self.n_group = n_head, n_group
        want = 2 * d_inner + 2 * n_group * d_state + n_head
        if self.in_proj.shape[0] != want or \
                self.conv.shape != (want - d_inner - n_head, d_conv):
            raise ValueError("%sssm_in/ssm_conv1d: shapes %s, %s"
                             % (b, tuple(self.in_proj.shape),
                                tuple(self.conv.shape)))

    def __call__(self, h: torch.Tensor, eps: float) -> torch.Tensor:
        """Over the tokens in order, the states starting empty."""
        t = h.shape[0]
        di, ng, ds, nh = self.d_inner, self.n_group, self.d_state, \
            self.n_head
        hd = di // nh
        zxbcdt = h @ self.in_proj.T
        z = zxbcdt[:, :di]
        xbc = zxbcdt[:, di:2 * di + 2 * ng * ds]
        dt = zxbcdt[:, 2 * di + 2 * ng * ds:]
        # The convolution over the channels x, B, C (ggml_ssm_conv).
        pad = torch.cat((torch.zeros(self.d_conv - 1, xbc.shape[1],
                                     dtype=xbc.dtype), xbc))
        c = torch.zeros_like(xbc)
        for j in range(self.d_conv):
            c = c + pad[j:j + t] * self.conv[:, j]
        if self.conv_b is not None:
            c = c + self.conv_b
        c = torch.nn.functional.silu(c)
        x = c[:, :di].reshape(t, nh, hd)
        grp = torch.arange(nh) // (nh // ng)   # head h's group
        bb = c[:, di:di + ng * ds].reshape(t, ng, ds)[:, grp]
        cc = c[:, di + ng * ds:].reshape(t, ng, ds)[:, grp]
        # The scan (ggml_ssm_scan, a scalar decay per head).
        dt = _softplus(dt + self.dt_b)                       # [t, nh]
        da = torch.exp(dt * self.a)
        xdt = x * dt[:, :, None]
        state = torch.zeros(nh, hd, ds, dtype=torch.float64)
        y = torch.empty(t, nh, hd, dtype=torch.float64)
        for i in range(t):
            state = state * da[i, :, None, None] + \
                xdt[i, :, :, None] * bb[i, :, None, :]
            y[i] = (state * cc[i, :, None, :]).sum(-1)
        y = (y + x * self.d[:, None]).reshape(t, di)
        y = torch.nn.functional.silu(z) * y
        y = _rms(y.reshape(t, ng, di // ng), self.norm, eps).reshape(t, di)
        return y @ self.out_proj.T


class _Experts:
    """One layer's mixture of experts (llm_graph_context::build_moe_ffn):
    a router picks the n_used experts of the largest logits ("softmax":
    of the largest softmax(logits), weighted by those probabilities,
    divided by their sum (at least 2^-14) when norm_w; "softmax_weight",
    gpt-oss's: weighted by the softmax of the chosen logits alone); the
    output is the weighted sum of the chosen experts' act(gate, up)
    down^T, and of a shared expert's, unweighted, when there is one
    (shexp)."""

    def __init__(self, t: Dict[str, torch.Tensor], b: str, n_used: int,
                 gating: str, norm_w: bool, act, biases: bool,
                 shexp: bool) -> None:
        def opt(name: str) -> Optional[torch.Tensor]:
            return t.pop(b + name, None) if biases else None

        self.router = t.pop(b + "ffn_gate_inp.weight")     # [n_exp, n]
        self.router_b = opt("ffn_gate_inp.bias")
        self.gate = t.pop(b + "ffn_gate_exps.weight")      # [n_exp, ff, n]
        self.up = t.pop(b + "ffn_up_exps.weight")
        self.down = t.pop(b + "ffn_down_exps.weight")      # [n_exp, n, ff]
        self.gate_b = opt("ffn_gate_exps.bias")
        self.up_b = opt("ffn_up_exps.bias")
        self.down_b = opt("ffn_down_exps.bias")
        self.shared = None
        if shexp:
            self.shared = [t.pop(b + "ffn_%s_shexp.weight" % k)
                           for k in ("gate", "up", "down")]
        if not 0 < n_used <= self.router.shape[0]:
            raise ValueError("%d experts used of %d"
                             % (n_used, self.router.shape[0]))
        self.n_used, self.gating, self.norm_w = n_used, gating, norm_w
        self.act = act

    def __call__(self, h: torch.Tensor) -> torch.Tensor:
        logits = _linear(h, self.router, self.router_b)      # [t, n_exp]
        if self.gating == "softmax":
            probs = torch.softmax(logits, -1)
            w, sel = torch.topk(probs, self.n_used, -1)
            if self.norm_w:
                w = w / w.sum(-1, keepdim=True).clamp(min=6.103515625e-5)
        else:
            top, sel = torch.topk(logits, self.n_used, -1)
            w = torch.softmax(top, -1)
        out = torch.zeros_like(h)
        for e in range(self.router.shape[0]):
            tok, slot = torch.nonzero(sel == e, as_tuple=True)
            if len(tok) == 0:
                continue
            x = h[tok]
            g = _linear(x, self.gate[e],
                        None if self.gate_b is None else self.gate_b[e])
            u = _linear(x, self.up[e],
                        None if self.up_b is None else self.up_b[e])
            y = _linear(self.act(g, u), self.down[e],
                        None if self.down_b is None else self.down_b[e])
            out.index_add_(0, tok, y * w[tok, slot, None])
        if self.shared is not None:
            g, u, d = self.shared
            out = out + _swiglu(h @ g.T, h @ u.T) @ d.T
        return out


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

    def _rope_ext(self) -> Tuple[float, float, float, Optional[Tuple]]:
        """What llama.cpp's context makes of the file's RoPE keys, its own
        options left at their defaults: rope.freq_base (default 10000);
        the trained frequency scale, 1 / rope.scaling.factor (1 without
        one); the context's scale, that one but for rope.scaling.type
        "none" (1 then); and ggml_rope_ext's yarn arguments (_tables), or
        None where they change nothing. "yarn" sets ext_factor 1 and
        attn_factor get_mscale(f) / get_mscale(f) = 1 in float32's
        rounding (f = 1 / scale, get_mscale(f) = 1 + 0.1 ln f, 1 for
        f <= 1), which ggml's rope_yarn multiplies by get_mscale(f) again;
        rope.scaling.attn_factor multiplies attn_factor (any type); beta
        32 and 1 (llama.cpp reads the file's yarn_beta_* keys for some
        architectures only, not these); n_ctx_orig is
        rope.scaling.original_context_length, else context_length."""
        f = np.float32
        base = float(self._get("rope.freq_base", 10000.0))
        kind = self._get("rope.scaling.type", "linear")
        if kind not in ("none", "linear", "yarn"):
            raise ValueError("RoPE scaling %s is not computed here" % kind)
        factor = float(self._get("rope.scaling.factor",
                                 self._get("rope.scale_linear", 0.0)))
        train = float(f(1.0) / f(factor)) if factor else 1.0
        scale = 1.0 if kind == "none" else train
        attn = f(1.0)
        ext = 1.0 if kind == "yarn" else 0.0
        if ext:
            fac = f(1.0) / f(scale)
            m = f(1.0) + f(0.1) * np.log(fac) if fac > 1.0 else f(1.0)
            attn = f(m * (f(1.0) / (f(1.0) + f(0.1) * np.log(fac))))
        attn = f(attn * f(self._get("rope.scaling.attn_factor", 1.0)))
        n_ctx_orig = int(self._get("rope.scaling.original_context_length",
                                   0)) or int(self._get("context_length"))
        yarn = None
        if ext or attn != 1.0:
            yarn = (ext, float(attn), 32.0, 1.0, n_ctx_orig)
        return base, train, scale, yarn

    def _ffn_of(self, t: Dict[str, torch.Tensor], b: str,
                biases: bool = False) -> None:
        f = {k: t.pop(b + k + ".weight") for k in
             ("ffn_norm", "ffn_gate", "ffn_up", "ffn_down")}
        for k in ("ffn_gate", "ffn_up", "ffn_down"):
            if biases and b + k + ".bias" in t:
                f[k + ".bias"] = t.pop(b + k + ".bias")
        self.ffn.append(f)

    def _mlp(self, il: int, x: torch.Tensor, act) -> torch.Tensor:
        f = self.ffn[il]
        h = _rms(x, f["ffn_norm"], self.eps)
        g = _linear(h, f["ffn_gate"], f.get("ffn_gate.bias"))
        u = _linear(h, f["ffn_up"], f.get("ffn_up.bias"))
        return _linear(act(g) * u, f["ffn_down"], f.get("ffn_down.bias"))

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


class GptOss(ArchLM):
    """llama.cpp's gpt-oss (src/models/openai-moe.cpp); see the module's
    doc."""

    arch = "gpt-oss"

    def __init__(self, meta: Dict[str, Any], t: Dict[str, torch.Tensor],
                 gelu: str) -> None:
        super().__init__(meta, t, gelu)
        if self.output is self.embed:
            raise ValueError("gpt-oss has no output.weight")
        self.out_norm = t.pop("output_norm.weight")
        n_head = int(self._get("attention.head_count"))
        n_kv = self._per_layer("attention.head_count_kv", n_head)
        head = int(self._get("attention.key_length", self.n_embd // n_head))
        n_rot = int(self._get("rope.dimension_count", head))
        # build_qkv splits the heads by n_rot: one size for all of them.
        for key in ("attention.value_length", "attention.key_length_swa",
                    "attention.value_length_swa",
                    "rope.dimension_count_swa"):
            if int(self._get(key, head)) != head:
                raise ValueError("gpt-oss.%s is not the key length %d"
                                 % (key, head))
        if n_rot != head:
            raise ValueError("gpt-oss.rope.dimension_count %d is not the "
                             "key length %d" % (n_rot, head))
        if self.n_swa <= 0:
            raise ValueError("gpt-oss.attention.sliding_window %d"
                             % self.n_swa)
        pattern = self._get("attention.sliding_window_pattern", 2)
        if isinstance(pattern, (list, tuple)):
            pattern = 2  # llama.cpp keeps its default for an array
        pattern = int(pattern)
        self.swa = [pattern == 0 or il % pattern < pattern - 1
                    for il in range(self.n_layers)]
        base, train, scale, yarn = self._rope_ext()
        base_swa = float(self._get("rope.freq_base_swa", base))
        kq_scale = float(np.float32(1.0) / np.sqrt(np.float32(n_rot)))
        n_used = self._per_layer("expert_used_count")
        if int(self._get("expert_group_count", 0)) > 1:
            raise ValueError("expert groups are not computed here")
        self.norms = []
        self.moe = []
        for il in range(self.n_layers):
            b = "blk.%d." % il
            swa = self.swa[il]
            self.layers.append(_Attention(
                t, b, n_head, n_kv[il], head, n_rot,
                base_swa if swa else base, train if swa else scale,
                kq_scale, 1.0, swa, rope="neox", yarn=yarn, norms=False,
                out_bias=True, sinks=True))
            self.norms.append((t.pop(b + "attn_norm.weight"),
                               t.pop(b + "post_attention_norm.weight")))
            self.moe.append(_Experts(t, b, n_used[il], "softmax_weight",
                                     False, _swiglu_oai, True, False))

    def _forward(self, tokens: torch.Tensor, r: _Rows) -> torch.Tensor:
        x = self.embed[tokens]
        tables: Dict = {}
        for il, att in enumerate(self.layers):
            attn_norm, post_norm = self.norms[il]
            x = x + att(_rms(x, attn_norm, self.eps), r, self.n_swa,
                        self.eps, tables)
            x = x + self.moe[il](_rms(x, post_norm, self.eps))
        return _rms(x, self.out_norm, self.eps) @ self.output.T


class GraniteHybrid(ArchLM):
    """llama.cpp's granitehybrid (src/models/granite-hybrid.cpp); see the
    module's doc."""

    arch = "granitehybrid"

    def __init__(self, meta: Dict[str, Any], t: Dict[str, torch.Tensor],
                 gelu: str) -> None:
        super().__init__(meta, t, gelu)
        self.out_norm = t.pop("output_norm.weight")
        self.emb_scale = float(self._get("embedding_scale", 0.0))
        self.res_scale = float(self._get("residual_scale", 0.0))
        logit_scale = float(self._get("logit_scale", 0.0))
        self.logit_mul = float(np.float32(1.0) / np.float32(logit_scale)) \
            if logit_scale else 0.0
        n_head = self._per_layer("attention.head_count")
        n_kv = self._per_layer("attention.head_count_kv", n_head[0])
        head = int(self._get("attention.key_length",
                             self.n_embd // n_head[0]))
        if int(self._get("attention.value_length", head)) != head:
            raise ValueError("granitehybrid.attention.value_length is not "
                             "the key length %d" % head)
        n_rot = int(self._get("rope.dimension_count", head))
        attn_scale = float(self._get("attention.scale", 0.0))
        kq_scale = attn_scale or float(np.float32(1.0)
                                       / np.sqrt(np.float32(head)))
        # rope.scaling.finetuned is Granite's switch for RoPE (default on;
        # the converter turns it off for the hybrids: no positions).
        rope = "norm" if self._get("rope.scaling.finetuned", True) else None
        base, _, scale, yarn = self._rope_ext()
        ssm = [int(self._get("ssm." + k)) for k in
               ("conv_kernel", "inner_size", "state_size", "time_step_rank",
                "group_count")]
        n_exp = int(self._get("expert_count", 0))
        n_used = self._per_layer("expert_used_count", 0)
        shexp = int(self._get("expert_shared_feed_forward_length", 0)) > 0
        if n_exp > 0 and int(self._get("expert_group_count", 0)) > 1:
            raise ValueError("expert groups are not computed here")
        self.norms = []
        self.moe: List[Optional[_Experts]] = []
        for il in range(self.n_layers):
            b = "blk.%d." % il
            if b + "rope_freqs.weight" in t:
                raise ValueError("rope_freqs is not computed here")
            self.norms.append(t.pop(b + "attn_norm.weight"))
            if n_kv[il] == 0:
                self.layers.append(_Mamba2(t, b, *ssm))
            else:
                self.layers.append(_Attention(
                    t, b, n_head[il], n_kv[il], head, n_rot, base, scale,
                    kq_scale, 1.0, False, rope=rope, yarn=yarn, norms=False,
                    out_bias=True))
            if n_exp > 0:
                self.ffn.append({"ffn_norm": t.pop(b + "ffn_norm.weight")})
                self.moe.append(_Experts(t, b, n_used[il], "softmax", True,
                                         _swiglu, False, shexp))
            else:
                self._ffn_of(t, b, biases=True)
                self.moe.append(None)

    def _forward(self, tokens: torch.Tensor, r: _Rows) -> torch.Tensor:
        x = self.embed[tokens]
        if self.emb_scale:
            x = x * self.emb_scale
        tables: Dict = {}
        for il, layer in enumerate(self.layers):
            h = _rms(x, self.norms[il], self.eps)
            if isinstance(layer, _Mamba2):
                a = layer(h, self.eps)
            else:
                a = layer(h, r, 0, self.eps, tables)
            if self.res_scale:
                a = a * self.res_scale
            x = x + a
            moe = self.moe[il]
            if moe is None:
                f = self._mlp(il, x, torch.nn.functional.silu)
            else:
                f = moe(_rms(x, self.ffn[il]["ffn_norm"], self.eps))
            if self.res_scale:
                f = f * self.res_scale
            x = x + f
        logits = _rms(x, self.out_norm, self.eps) @ self.output.T
        return logits * self.logit_mul if self.logit_mul else logits


ARCHES = {"gemma3": Gemma3, "lfm2": LFM2, "gpt-oss": GptOss,
          "granitehybrid": GraniteHybrid}


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

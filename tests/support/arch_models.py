"""Tiny random-weight models of some of llama.cpp's other architectures
around one of the vocabularies its tree ships, written at test time with
the tree's own gguf-py, as support.vocab_model writes a Llama one: the
vocabulary file's tokenizer fields copied as they are, a body of random
weights (normal, std 0.02, seeded; norm weights ones) of the shapes and
keys llama.cpp's loader asks of that architecture, and nothing more.

The bodies are chosen for the memory llama.cpp makes of them:

    gemma3         7 layers, sliding window n_swa on all but layer 5
                   (llama.cpp's default pattern: every 6th is global)
    lfm2           6 layers, short convolutions (recurrent) but for
                   attention on layers 2 and 5
    gpt-oss        4 layers, sliding window n_swa on the even ones,
                   attention sinks, 4 experts of which 2 are used
    granitehybrid  6 layers, Mamba2 (recurrent) but for attention on
                   layers 2 and 5
    llama4         4 layers, chunked attention on layers 0-2 (the chunk
                   is llama.cpp's own, 8192, whatever the file says),
                   4 experts (1 used) and a shared one on layers 1 and 3
    qwen2          2 plain attention layers, q/k/v biases

llama-server caps a slot's context at the training context (`context`),
whatever its -c; llama.cpp's library does not. Greedy text of random
weights may string byte tokens into invalid UTF-8, which llama-server's
/completion answers with a 500; the llama-bpe and llama-spm models of
seed 1 do not, over 800 tokens.

    path = arch_models.write("gemma3", "llama-bpe", out_dir)
"""

import functools
import os
from typing import Optional

import numpy as np

from support import paths
from support.vocab_model import _copy_tokenizer, vocab_file

ARCHES = ("gemma3", "lfm2", "gpt-oss", "granitehybrid", "llama4", "qwen2")

N_EMBD = 64
N_HEAD = 4
N_KV = 2
N_FF = 128
HEAD = N_EMBD // N_HEAD


class _Body:
    """The writer, and the seeded tensors a body is made of."""

    def __init__(self, w, seed: int):
        self.w = w
        self.rng = np.random.default_rng(seed)

    def rand(self, name: str, *shape: int) -> None:
        self.w.add_tensor(name, (self.rng.standard_normal(shape) * 0.02)
                          .astype(np.float32))

    def ones(self, name: str, *shape: int) -> None:
        self.w.add_tensor(name, np.ones(shape, np.float32))

    def put(self, name: str, a) -> None:
        self.w.add_tensor(name, np.asarray(a, np.float32))

    def qkv(self, b: str, n_kv: int = N_KV) -> None:
        """A layer's q, k, v and output projections."""
        self.rand(b + "attn_q.weight", N_HEAD * HEAD, N_EMBD)
        self.rand(b + "attn_k.weight", n_kv * HEAD, N_EMBD)
        self.rand(b + "attn_v.weight", n_kv * HEAD, N_EMBD)
        self.rand(b + "attn_output.weight", N_EMBD, N_HEAD * HEAD)

    def ffn(self, b: str, n_ff: int = N_FF) -> None:
        """A layer's gated feed-forward, its norm first."""
        self.ones(b + "ffn_norm.weight", N_EMBD)
        self.rand(b + "ffn_gate.weight", n_ff, N_EMBD)
        self.rand(b + "ffn_up.weight", n_ff, N_EMBD)
        self.rand(b + "ffn_down.weight", N_EMBD, n_ff)

    def experts(self, b: str, n: int, n_ff: int) -> None:
        """A layer's router and n experts of n_ff."""
        self.rand(b + "ffn_gate_inp.weight", n, N_EMBD)
        self.rand(b + "ffn_gate_exps.weight", n, n_ff, N_EMBD)
        self.rand(b + "ffn_up_exps.weight", n, n_ff, N_EMBD)
        self.rand(b + "ffn_down_exps.weight", n, N_EMBD, n_ff)


def _gemma3(w, m: _Body, n_swa: int) -> int:
    n_layer = 7
    w.add_head_count_kv(N_KV)
    w.add_feed_forward_length(N_FF)
    w.add_sliding_window(n_swa)
    for i in range(n_layer):
        b = "blk.%d." % i
        m.ones(b + "attn_norm.weight", N_EMBD)
        m.qkv(b)
        m.ones(b + "attn_q_norm.weight", HEAD)
        m.ones(b + "attn_k_norm.weight", HEAD)
        m.ones(b + "post_attention_norm.weight", N_EMBD)
        m.ffn(b)
        m.ones(b + "post_ffw_norm.weight", N_EMBD)
    m.ones("output_norm.weight", N_EMBD)
    return n_layer


def _lfm2(w, m: _Body, n_swa: int) -> int:
    n_layer, l_cache = 6, 3
    attn = [i % 3 == 2 for i in range(n_layer)]
    w.add_head_count_kv([N_KV if a else 0 for a in attn])
    w.add_feed_forward_length(N_FF)
    w.add_shortconv_l_cache(l_cache)
    for i in range(n_layer):
        b = "blk.%d." % i
        m.ones(b + "attn_norm.weight", N_EMBD)
        if attn[i]:
            m.qkv(b)
            m.ones(b + "attn_q_norm.weight", HEAD)
            m.ones(b + "attn_k_norm.weight", HEAD)
        else:
            m.rand(b + "shortconv.conv.weight", N_EMBD, l_cache)
            m.rand(b + "shortconv.in_proj.weight", 3 * N_EMBD, N_EMBD)
            m.rand(b + "shortconv.out_proj.weight", N_EMBD, N_EMBD)
        m.ffn(b)
    # LFM2's final norm has the name of an embedding norm in llama.cpp.
    m.ones("token_embd_norm.weight", N_EMBD)
    return n_layer


def _gpt_oss(w, m: _Body, n_swa: int) -> int:
    n_layer, n_exp, n_ff = 4, 4, 64
    w.add_head_count_kv(N_KV)
    w.add_feed_forward_length(n_ff)
    w.add_expert_feed_forward_length(n_ff)
    w.add_expert_count(n_exp)
    w.add_expert_used_count(2)
    w.add_sliding_window(n_swa)
    for i in range(n_layer):
        b = "blk.%d." % i
        m.ones(b + "attn_norm.weight", N_EMBD)
        m.qkv(b)
        m.rand(b + "attn_q.bias", N_HEAD * HEAD)
        m.rand(b + "attn_k.bias", N_KV * HEAD)
        m.rand(b + "attn_v.bias", N_KV * HEAD)
        m.rand(b + "attn_output.bias", N_EMBD)
        m.rand(b + "attn_sinks.weight", N_HEAD)
        m.ones(b + "post_attention_norm.weight", N_EMBD)
        m.experts(b, n_exp, n_ff)
        m.rand(b + "ffn_gate_inp.bias", n_exp)
        m.rand(b + "ffn_gate_exps.bias", n_exp, n_ff)
        m.rand(b + "ffn_up_exps.bias", n_exp, n_ff)
        m.rand(b + "ffn_down_exps.bias", n_exp, N_EMBD)
    m.ones("output_norm.weight", N_EMBD)
    return n_layer


def _granitehybrid(w, m: _Body, n_swa: int) -> int:
    n_layer = 6
    d_conv, d_inner, d_state, n_ssm_head = 4, 2 * N_EMBD, 16, 8
    d_xbc = d_inner + 2 * d_state
    attn = [i % 3 == 2 for i in range(n_layer)]
    w.add_head_count_kv([N_KV if a else 0 for a in attn])
    w.add_feed_forward_length(N_FF)
    w.add_ssm_conv_kernel(d_conv)
    w.add_ssm_inner_size(d_inner)
    w.add_ssm_state_size(d_state)
    w.add_ssm_time_step_rank(n_ssm_head)
    w.add_ssm_group_count(1)
    for i in range(n_layer):
        b = "blk.%d." % i
        m.ones(b + "attn_norm.weight", N_EMBD)
        if attn[i]:
            m.qkv(b)
        else:
            m.rand(b + "ssm_in.weight", d_xbc + d_inner + n_ssm_head,
                   N_EMBD)
            m.rand(b + "ssm_conv1d.weight", d_xbc, d_conv)
            m.rand(b + "ssm_conv1d.bias", d_xbc)
            m.rand(b + "ssm_dt.bias", n_ssm_head)
            # A must be negative for the state to decay, as Mamba2's
            # A = -exp(A_log) always is; D the skip, ones.
            m.put(b + "ssm_a", -np.arange(1, n_ssm_head + 1)
                  .reshape(n_ssm_head, 1))
            m.ones(b + "ssm_d", n_ssm_head, 1)
            m.ones(b + "ssm_norm.weight", 1, d_inner)
            m.rand(b + "ssm_out.weight", N_EMBD, d_inner)
        m.ffn(b)
    m.ones("output_norm.weight", N_EMBD)
    return n_layer


def _llama4(w, m: _Body, n_swa: int) -> int:
    n_layer, n_exp, n_ff = 4, 4, 64
    w.add_head_count_kv(N_KV)
    w.add_feed_forward_length(N_FF)
    w.add_expert_feed_forward_length(n_ff)
    w.add_expert_count(n_exp)
    w.add_expert_used_count(1)
    w.add_interleave_moe_layer_step(2)
    for i in range(n_layer):
        b = "blk.%d." % i
        m.ones(b + "attn_norm.weight", N_EMBD)
        m.qkv(b)
        if (i + 1) % 2:
            m.ffn(b)
            continue
        m.ones(b + "ffn_norm.weight", N_EMBD)
        m.experts(b, n_exp, n_ff)
        m.rand(b + "ffn_gate_shexp.weight", n_ff, N_EMBD)
        m.rand(b + "ffn_up_shexp.weight", n_ff, N_EMBD)
        m.rand(b + "ffn_down_shexp.weight", N_EMBD, n_ff)
    m.ones("output_norm.weight", N_EMBD)
    return n_layer


def _qwen2(w, m: _Body, n_swa: int) -> int:
    n_layer = 2
    w.add_head_count_kv(N_KV)
    w.add_feed_forward_length(N_FF)
    for i in range(n_layer):
        b = "blk.%d." % i
        m.ones(b + "attn_norm.weight", N_EMBD)
        m.qkv(b)
        m.rand(b + "attn_q.bias", N_HEAD * HEAD)
        m.rand(b + "attn_k.bias", N_KV * HEAD)
        m.rand(b + "attn_v.bias", N_KV * HEAD)
        m.ffn(b)
    m.ones("output_norm.weight", N_EMBD)
    return n_layer


def _plain(r) -> np.ndarray:
    """Which of the vocabulary's tokens are words of printable ASCII
    (a leading space as SPM's U+2581 or byte-level BPE's U+0120 spells
    it): only those get an output row. A greedy model then always draws
    one (some other logit is above the zero rows'), and its text is valid
    UTF-8 whatever its weights: llama-server answers 500 to a chat whose
    answer ends within a character."""
    f = r.fields["tokenizer.ggml.tokens"]
    kinds = r.fields.get("tokenizer.ggml.token_type")
    ok = []
    for k, i in enumerate(f.data):
        t = bytes(f.parts[i]).decode("utf-8", "replace")
        normal = kinds is None or int(kinds.parts[kinds.data[k]][0]) == 1
        ok.append(normal and t != "" and
                  all(32 <= ord(c) < 127 or c in "\u2581\u0120" for c in t))
    return np.array(ok)


@functools.lru_cache(maxsize=None)
def _vocab(name: str):
    """The vocabulary file's reader, read once a process: gguf-py takes
    seconds over the larger ones (some 10 s for llama-bpe's 128256
    tokens and their merges), nearly all of a write's time."""
    return paths.import_gguf().GGUFReader(vocab_file(name))


_BODIES = {"gemma3": _gemma3, "lfm2": _lfm2, "gpt-oss": _gpt_oss,
           "granitehybrid": _granitehybrid, "llama4": _llama4,
           "qwen2": _qwen2}

# Every model has an output projection of its own (gpt-oss must; the
# others may): tied to the token embeddings, a random model's greedy text
# mostly repeats its prompt's last token, which says little when two
# engines' answers are compared. Its rows are zero but for plain words
# (_plain).


def write(arch: str, vocab: str, out_dir: str,
          template: Optional[str] = None, seed: int = 1,
          context: int = 256, n_swa: int = 32) -> str:
    """Writes the model of architecture `arch` (one of ARCHES) and
    vocabulary `vocab` into out_dir (once: an existing file is kept,
    whatever the arguments) and returns its path. context is its training
    context, n_swa the sliding window of gemma3 and gpt-oss."""
    if arch not in _BODIES:
        raise ValueError("no tiny model of architecture %r (there are %s)"
                         % (arch, ", ".join(ARCHES)))
    out = os.path.join(out_dir, "tiny-%s-%s.gguf" % (arch, vocab))
    if os.path.exists(out):
        return out
    gguf = paths.import_gguf()
    r = _vocab(vocab)
    tmp = out + ".tmp"
    w = gguf.GGUFWriter(tmp, arch)
    w.add_context_length(context)
    w.add_embedding_length(N_EMBD)
    w.add_head_count(N_HEAD)
    w.add_layer_norm_rms_eps(1e-5)
    w.add_rope_freq_base(10000.0)
    w.add_file_type(0)
    n_vocab = _copy_tokenizer(gguf, r, w)
    if template is not None and "tokenizer.chat_template" not in r.fields:
        w.add_chat_template(template)
    m = _Body(w, seed)
    m.rand("token_embd.weight", n_vocab, N_EMBD)
    w.add_block_count(_BODIES[arch](w, m, n_swa))
    head = m.rng.standard_normal((n_vocab, N_EMBD)) * 0.02
    head[~_plain(r)] = 0.0
    m.put("output.weight", head)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    os.replace(tmp, out)
    return out

#!/usr/bin/python3
"""Writes deploy/model's byte-level Llama model as a GGUF file llama.cpp loads.

    export_gguf.py [--gguf-py DIR] --weights deploy/model/evictd-lm.pt OUT.gguf
    export_gguf.py [--gguf-py DIR] --random 100M [--seed 1] [--ascii-pieces] OUT.gguf
    export_gguf.py [--gguf-py DIR] --synthetic zero|bigram [--seed 1] OUT.gguf

DIR is the gguf-py directory of a llama.cpp source tree (its own writer;
nothing is downloaded); without it, Python's gguf package if installed. The weights are model.py's save format (config and
state dict, float32); --random writes a model of the same architecture with
random weights (normal, std 0.02) sized to about the parameter count given
(for benchmarks: llama.cpp's time per token depends on the shapes, not on
the values; --ascii-pieces spells the bytes 0x80-0xff as "<80>"..."<ff>"
so that every token decodes to valid UTF-8 alone, which llama-server needs
of a random model's output). --synthetic writes small models whose logits are known in
closed form, for evictd-llama perplexity's tests: "zero", every weight 0
(every logit 0: the uniform distribution over the 258 tokens, perplexity
258 whatever is attended to); "bigram", random embeddings (std 1) and
attention, with the attention and FFN output projections zero, so the
residual stream is the current token's embedding and its logits are
embed @ rmsnorm(embed[token]) whatever the cache holds.

The file: architecture "llama", float32 tensors under llama.cpp's names
(token_embd, blk.N.attn_norm/attn_q/attn_k/attn_v/attn_output/ffn_norm/
ffn_gate/ffn_up/ffn_down, output_norm; no output.weight, so llama.cpp ties
the head to the embedding as model.py does). model.py already rotates
adjacent pairs (llama.cpp's RoPE for this architecture), so wq and wk are
written as they are, without the permutation Hugging Face checkpoints need.

The tokenizer is byte-level BPE with no merges: token b (0..255) is byte b,
spelt as GPT-2's byte-to-character table spells it, so llama_tokenize maps
each byte of a text to its own id and llama_token_to_piece gives the byte
back; 256 is BOS (added by llama_tokenize), 257 EOS. (One merge is
written, of the control tokens' texts, which never applies: llama.cpp
requires merges.) An SPM vocabulary of
<0xXX> tokens would not do: llama.cpp's SPM path rewrites every space as
U+2581 before looking tokens up, which a byte vocabulary spells as three
other bytes.
"""

import argparse
import math
import os
import sys

import numpy as np

BOS, EOS, VOCAB = 256, 257, 258
# The contexts deploy/model trained on go up to this (llama.cpp only warns
# when n_ctx exceeds it; evictd-llama runs far past it with a window).
CONTEXT_LENGTH = 1024


def byte_chars():
    """GPT-2's table: byte -> the printable character BPE vocabularies use
    for it (printable Latin-1 bytes stand for themselves, the others are
    moved up to U+0100 and beyond)."""
    keep = (list(range(ord("!"), ord("~") + 1)) +
            list(range(ord("\u00a1"), ord("\u00ac") + 1)) +
            list(range(ord("\u00ae"), ord("\u00ff") + 1)))
    table, extra = {}, 0
    for b in range(256):
        if b in keep:
            table[b] = chr(b)
        else:
            table[b] = chr(256 + extra)
            extra += 1
    return [table[b] for b in range(256)]


def load_pt(path):
    """(config dict, {name: float32 ndarray}) of a model.py weights file."""
    import torch
    blob = torch.load(path, map_location="cpu")
    state = {k: v.detach().to(torch.float32).numpy()
             for k, v in blob["state"].items()}
    return dict(blob["config"]), state


def random_model(params, seed):
    """A config of about `params` parameters (d_model 768, 12 heads, SwiGLU
    d_ff 2048, as many layers as fit) and random weights for it."""
    d, heads, ff = 768, 12, 2048
    per_layer = 4 * d * d + 3 * d * ff + 2 * d
    layers = max(1, round((params - VOCAB * d - d) / per_layer))
    cfg = {"n_layers": layers, "n_heads": heads, "d_model": d, "d_ff": ff,
           "rope_base": 10000.0, "vocab": VOCAB, "norm_eps": 1e-5}
    rng = np.random.default_rng(seed)

    def normal(*shape):
        return (rng.standard_normal(shape, dtype=np.float32) * 0.02)

    state = {"embed.weight": normal(VOCAB, d),
             "norm.weight": np.ones(d, np.float32)}
    for i in range(layers):
        p = "blocks.%d." % i
        state[p + "attn_norm.weight"] = np.ones(d, np.float32)
        state[p + "ffn_norm.weight"] = np.ones(d, np.float32)
        for w in ("wq", "wk", "wv", "wo"):
            state[p + w + ".weight"] = normal(d, d)
        state[p + "w_gate.weight"] = normal(ff, d)
        state[p + "w_up.weight"] = normal(ff, d)
        state[p + "w_down.weight"] = normal(d, ff)
    return cfg, state


def synthetic_model(kind, seed):
    """The --synthetic models: 2 layers, d_model 32, 2 heads, d_ff 64."""
    d, heads, ff, layers = 32, 2, 64, 2
    cfg = {"n_layers": layers, "n_heads": heads, "d_model": d, "d_ff": ff,
           "rope_base": 10000.0, "vocab": VOCAB, "norm_eps": 1e-5}
    rng = np.random.default_rng(seed)
    scale = 0.0 if kind == "zero" else 1.0

    def normal(*shape):
        return rng.standard_normal(shape, dtype=np.float32) * scale

    def zeros(*shape):
        return np.zeros(shape, np.float32)

    norm = np.full(d, scale, np.float32)
    state = {"embed.weight": normal(VOCAB, d), "norm.weight": norm}
    for i in range(layers):
        p = "blocks.%d." % i
        state[p + "attn_norm.weight"] = norm.copy()
        state[p + "ffn_norm.weight"] = norm.copy()
        for w in ("wq", "wk", "wv"):
            state[p + w + ".weight"] = normal(d, d)
        state[p + "wo.weight"] = zeros(d, d)
        state[p + "w_gate.weight"] = normal(ff, d)
        state[p + "w_up.weight"] = normal(ff, d)
        state[p + "w_down.weight"] = zeros(d, ff)
    return cfg, state


def parse_count(text):
    mult = {"K": 1e3, "M": 1e6, "G": 1e9}
    if text[-1:].upper() in mult:
        return int(float(text[:-1]) * mult[text[-1:].upper()])
    return int(text)


def write(gguf, out, cfg, state, name, ascii_pieces=False):
    vocab = int(cfg.get("vocab", VOCAB))
    if vocab != VOCAB:
        sys.exit("export_gguf.py: the model's vocabulary is %d, not the "
                 "byte vocabulary of %d (256 bytes, BOS, EOS)" % (vocab, VOCAB))
    d, heads = int(cfg["d_model"]), int(cfg["n_heads"])
    layers = int(cfg["n_layers"])
    w = gguf.GGUFWriter(out, "llama")
    w.add_name(name)
    w.add_vocab_size(VOCAB)
    w.add_context_length(CONTEXT_LENGTH)
    w.add_embedding_length(d)
    w.add_block_count(layers)
    w.add_feed_forward_length(int(cfg["d_ff"]))
    w.add_head_count(heads)
    w.add_head_count_kv(heads)
    w.add_layer_norm_rms_eps(float(cfg.get("norm_eps", 1e-5)))
    w.add_rope_freq_base(float(cfg.get("rope_base", 10000.0)))
    w.add_rope_dimension_count(d // heads)
    w.add_file_type(gguf.LlamaFileType.ALL_F32)

    w.add_tokenizer_model("gpt2")
    w.add_tokenizer_pre("default")
    pieces = byte_chars()
    if ascii_pieces:
        # Bytes 0x80..0xff as four ASCII characters ("<80>"), so that every
        # token decodes to valid UTF-8 on its own (llama-server refuses a
        # completion that is not): a random model emits any token.
        pieces = pieces[:128] + ["<%02x>" % b for b in range(128, 256)]
    w.add_token_list(pieces + ["<s>", "</s>"])
    w.add_token_types([gguf.TokenType.NORMAL] * 256 +
                      [gguf.TokenType.CONTROL] * 2)
    # llama.cpp refuses a BPE vocabulary without merges and gguf-py an
    # empty array, so there is one merge that can never apply: BPE merges
    # pairs of the one-character symbols a text is split into, and "<s>"
    # and "</s>" are no such symbols.
    w.add_token_merges(["<s> </s>"])
    w.add_bos_token_id(BOS)
    w.add_eos_token_id(EOS)
    w.add_add_bos_token(True)
    w.add_add_eos_token(False)

    names = {"attn_norm": "attn_norm", "wq": "attn_q", "wk": "attn_k",
             "wv": "attn_v", "wo": "attn_output", "ffn_norm": "ffn_norm",
             "w_gate": "ffn_gate", "w_up": "ffn_up", "w_down": "ffn_down"}
    tensors = [("token_embd.weight", state["embed.weight"])]
    for i in range(layers):
        for ours, theirs in names.items():
            tensors.append(("blk.%d.%s.weight" % (i, theirs),
                            state["blocks.%d.%s.weight" % (i, ours)]))
    tensors.append(("output_norm.weight", state["norm.weight"]))
    used = {"embed.weight", "norm.weight"} | {
        "blocks.%d.%s.weight" % (i, k) for i in range(layers) for k in names}
    left = sorted(set(state) - used)
    if left:
        sys.exit("export_gguf.py: tensors this architecture has no place "
                 "for: %s" % ", ".join(left))
    for tname, arr in tensors:
        w.add_tensor(tname, np.ascontiguousarray(arr, dtype=np.float32))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return sum(a.size for _, a in tensors)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("out", help="the GGUF file to write")
    ap.add_argument("--gguf-py",
                    help="gguf-py directory of a llama.cpp source tree "
                    "(default: Python's own gguf package)")
    ap.add_argument("--weights", help="a model.py weights file (.pt)")
    ap.add_argument("--random", metavar="PARAMS",
                    help="random weights, about PARAMS parameters (100M)")
    ap.add_argument("--synthetic", choices=("zero", "bigram"),
                    help="a small model whose logits are known (see above)")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--ascii-pieces", action="store_true",
                    help="bytes 0x80-0xff spelt as '<80>'...'<ff>': every "
                    "token is valid UTF-8 alone (for llama-server)")
    args = ap.parse_args()
    if sum(bool(x) for x in (args.weights, args.random, args.synthetic)) != 1:
        ap.error("give exactly one of --weights, --random and --synthetic")
    if args.gguf_py:
        sys.path.insert(0, os.path.abspath(args.gguf_py))
    try:
        import gguf
    except ImportError:
        sys.exit("export_gguf.py: no gguf module: give --gguf-py DIR, the "
                 "gguf-py directory of a llama.cpp source tree")
    if args.synthetic:
        cfg, state = synthetic_model(args.synthetic, args.seed)
        name = "evictd synthetic %s" % args.synthetic
    elif args.random:
        cfg, state = random_model(parse_count(args.random), args.seed)
        name = "evictd random %s%s" % (args.random, " (ASCII pieces)"
                                       if args.ascii_pieces else "")
    else:
        cfg, state = load_pt(args.weights)
        name = "evictd " + os.path.splitext(os.path.basename(args.weights))[0]
    tmp = args.out + ".tmp"
    n = write(gguf, tmp, cfg, state, name, args.ascii_pieces)
    os.replace(tmp, args.out)
    print("%s: %d parameters, %d layers, d_model %d, %.1f MB"
          % (args.out, n, int(cfg["n_layers"]), int(cfg["d_model"]),
             os.path.getsize(args.out) / 1e6))


if __name__ == "__main__":
    main()

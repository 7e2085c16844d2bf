"""A tiny random-weight model around one of the vocabularies llama.cpp's
tree ships (models/ggml-vocab-NAME.gguf), written at test time with the
tree's own gguf-py: the vocabulary file's tokenizer fields copied as they
are, a Llama-architecture body of random weights (normal, std 0.02,
seeded) too small to say anything but big enough to run every path of
serve (tokenizer, chat template, special tokens) as a real model of that
vocabulary would. Nothing is downloaded, nothing committed but this.

    path = vocab_model.write("llama-bpe", out_dir, template=LLAMA3)
"""

import os
from typing import Optional

import numpy as np

from support import paths

# A Llama 3 style chat template (the shape of its turns; written here, as
# the vocabulary files carry none).
LLAMA3 = ("{{ bos_token }}{% for m in messages %}<|start_header_id|>"
          "{{ m['role'] }}<|end_header_id|>\n\n{{ m['content'] | trim }}"
          "<|eot_id|>{% endfor %}{% if add_generation_prompt %}"
          "<|start_header_id|>assistant<|end_header_id|>\n\n{% endif %}")


def vocab_file(name: str) -> str:
    return os.path.join(paths.llama_tree(), "models",
                        "ggml-vocab-%s.gguf" % name)


def _copy_tokenizer(gguf, r, w) -> int:
    """Copies the reader's tokenizer.* fields into the writer: the
    vocabulary's size."""
    n_vocab = 0
    vt = gguf.GGUFValueType
    for name, f in r.fields.items():
        if not name.startswith("tokenizer."):
            continue
        kind = f.types[0]
        if kind == vt.ARRAY:
            if f.types[1] == vt.STRING:
                vals = [bytes(f.parts[i]).decode("utf-8", "replace")
                        for i in f.data]
            else:
                vals = [f.parts[i][0].item() for i in f.data]
            if name == "tokenizer.ggml.tokens":
                n_vocab = len(vals)
            w.add_array(name, vals)
        elif kind == vt.STRING:
            w.add_string(name, bytes(f.parts[f.data[0]]).decode())
        elif kind == vt.BOOL:
            w.add_bool(name, bool(f.parts[f.data[0]][0]))
        else:
            w.add_uint32(name, int(f.parts[f.data[0]][0]))
    return n_vocab


def write(vocab: str, out_dir: str, template: Optional[str] = None,
          seed: int = 1, n_embd: int = 64, n_layer: int = 2,
          n_head: int = 4, n_kv: int = 2, n_ff: int = 128,
          context: int = 2048) -> str:
    """Writes the model of vocabulary `vocab` into out_dir (once: an
    existing file is kept) and returns its path."""
    out = os.path.join(out_dir, "tiny-%s.gguf" % vocab)
    if os.path.exists(out):
        return out
    gguf = paths.import_gguf()
    r = gguf.GGUFReader(vocab_file(vocab))
    tmp = out + ".tmp"
    w = gguf.GGUFWriter(tmp, "llama")
    w.add_context_length(context)
    w.add_embedding_length(n_embd)
    w.add_block_count(n_layer)
    w.add_feed_forward_length(n_ff)
    w.add_head_count(n_head)
    w.add_head_count_kv(n_kv)
    w.add_layer_norm_rms_eps(1e-5)
    w.add_rope_freq_base(10000.0)
    w.add_file_type(0)
    n_vocab = _copy_tokenizer(gguf, r, w)
    if template is not None and "tokenizer.chat_template" not in r.fields:
        w.add_chat_template(template)
    rng = np.random.default_rng(seed)

    def rand(name: str, *shape: int) -> None:
        w.add_tensor(name, (rng.standard_normal(shape) * 0.02)
                     .astype(np.float32))

    hd = n_embd // n_head
    rand("token_embd.weight", n_vocab, n_embd)
    w.add_tensor("output_norm.weight", np.ones(n_embd, np.float32))
    for i in range(n_layer):
        b = "blk.%d." % i
        w.add_tensor(b + "attn_norm.weight", np.ones(n_embd, np.float32))
        w.add_tensor(b + "ffn_norm.weight", np.ones(n_embd, np.float32))
        rand(b + "attn_q.weight", n_embd, n_embd)
        rand(b + "attn_k.weight", n_kv * hd, n_embd)
        rand(b + "attn_v.weight", n_kv * hd, n_embd)
        rand(b + "attn_output.weight", n_embd, n_embd)
        rand(b + "ffn_gate.weight", n_ff, n_embd)
        rand(b + "ffn_up.weight", n_ff, n_embd)
        rand(b + "ffn_down.weight", n_embd, n_ff)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    os.replace(tmp, out)
    return out

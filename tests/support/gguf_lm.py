"""The reference's model of a llama-architecture GGUF file (stories260K, or
deploy/model's weights as exported): its weights and hyperparameters read
with llama.cpp's own gguf-py, computed in float64 by deploy/model's code
with grouped-query attention and an untied output head; and derive(), a
copy of such a file with fewer layers or other metadata.

What llama.cpp computes for architecture "llama" that model.py's ByteLM
does not:
- Grouped-query attention: n_head query heads over n_head_kv key/value
  heads; query head j reads KV head j // (n_head / n_head_kv) (ggml's
  mul_mat broadcasts the KV heads that way), so each KV head is repeated
  n_head / n_head_kv times in turn.
- An output head of its own (output.weight) where the file has one, the
  token embedding transposed where not.
- RMSNorm eps and the RoPE base from the file's metadata (the base
  defaults to 10000, as in llama.cpp); RoPE over the whole head
  (llama.cpp refuses a llama model whose rope.dimension_count is not the
  head size, and so does this).

Layouts. gguf-py gives a tensor of ggml shape [ne0, ne1] as a numpy array
of shape (ne1, ne0): a projection's weight comes out as torch's Linear
weight [out, in], the embedding as [vocab, d_model]. The Q and K weights
are used as the file has them, rotated in adjacent pairs (llama.cpp's
LLAMA_ROPE_TYPE_NORM): llama.cpp's converters already permuted Hugging
Face checkpoints into that order, and llama2.c's models (stories260K)
were trained in it. Checked, not assumed: test_stories.py's
test_stories_reference_layout compares the logits with llama.cpp's and
finds the other readings (Q/K permuted either way, the KV heads tiled
instead of repeated) far off.
"""

from dataclasses import dataclass
from typing import Any, Dict, Optional, Tuple

import numpy as np
import torch
import torch.nn as nn

import model as lm
from model import rope  # noqa: F401  (reference.forward_rows uses it)
from support import paths
from support import reference as ref

# Our names for llama.cpp's tensors of block N (blk.N.<theirs>.weight).
BLOCK_TENSORS = {"attn_norm": "attn_norm", "wq": "attn_q", "wk": "attn_k",
                 "wv": "attn_v", "wo": "attn_output", "ffn_norm": "ffn_norm",
                 "w_gate": "ffn_gate", "w_up": "ffn_up",
                 "w_down": "ffn_down"}


def import_gguf(gguf_py: Optional[str]):
    """llama.cpp's gguf-py from the directory given (the build's own:
    config.mk's GGUF_PY), else Python's gguf package."""
    return paths.import_gguf(gguf_py or "")


@dataclass
class Config(lm.Config):
    n_heads_kv: int = 4
    tied: bool = True


class GQABlock(lm.Block):
    """model.Block with n_heads_kv key/value heads."""

    def __init__(self, cfg: Config) -> None:
        super().__init__(cfg)
        kv = cfg.n_heads_kv * cfg.head_dim
        self.wk = nn.Linear(cfg.d_model, kv, bias=False)
        self.wv = nn.Linear(cfg.d_model, kv, bias=False)

    def qkv_of(self, x: torch.Tensor, tables
               ) -> Tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """Queries, keys and values [B, T, n_heads, D], the KV heads
        repeated for the query heads they serve."""
        b, t, _ = x.shape
        c = self.cfg
        n = self.attn_norm(x)
        q = self.wq(n).view(b, t, c.n_heads, c.head_dim)
        k = self.wk(n).view(b, t, c.n_heads_kv, c.head_dim)
        v = self.wv(n).view(b, t, c.n_heads_kv, c.head_dim)
        group = c.n_heads // c.n_heads_kv
        return (rope(q, tables), rope(k, tables).repeat_interleave(group, 2),
                v.repeat_interleave(group, 2))


class GGUFLM(lm.ByteLM):
    """ByteLM's forward pass (and reference.forward_rows) over a GGUF's
    weights. RoPE angles are always llama.cpp's float32 ones
    (reference.ggml_rope_tables)."""

    def __init__(self, cfg: Config) -> None:
        nn.Module.__init__(self)  # not ByteLM's: no random initialisation
        self.cfg = cfg
        self.embed = nn.Embedding(cfg.vocab, cfg.d_model)
        self.blocks = nn.ModuleList(GQABlock(cfg)
                                    for _ in range(cfg.n_layers))
        self.norm = lm.RMSNorm(cfg.d_model, cfg.norm_eps)
        self.output = None if cfg.tied else nn.Linear(
            cfg.d_model, cfg.vocab, bias=False)

    def _tables(self, positions: torch.Tensor, dtype: torch.dtype):
        return ref.ggml_rope_tables(positions, self.cfg.head_dim,
                                    self.cfg.rope_base, dtype)

    def _logits(self, x: torch.Tensor) -> torch.Tensor:
        if self.output is None:
            return super()._logits(x)
        return self.output(self.norm(x))


def metadata(reader) -> Dict[str, Any]:
    return {k: f.contents() for k, f in reader.fields.items()}


def config_of(meta: Dict[str, Any], tensors: Dict[str, np.ndarray]
              ) -> Config:
    """The model's shape from the metadata; refuses what the reference
    does not compute."""
    if meta.get("general.architecture") != "llama":
        raise ValueError("architecture %r, not llama"
                         % meta.get("general.architecture"))

    def get(key: str, default: Any = None) -> Any:
        v = meta.get("llama." + key, default)
        if v is None:
            raise ValueError("no llama.%s in the file" % key)
        return v

    d, heads = int(get("embedding_length")), int(get("attention.head_count"))
    cfg = Config(n_layers=int(get("block_count")), n_heads=heads,
                 n_heads_kv=int(get("attention.head_count_kv", heads)),
                 d_model=d, d_ff=int(get("feed_forward_length")),
                 rope_base=float(get("rope.freq_base", 10000.0)),
                 norm_eps=float(get("attention.layer_norm_rms_epsilon")),
                 vocab=int(tensors["token_embd.weight"].shape[0]),
                 tied="output.weight" not in tensors)
    hd = cfg.head_dim
    for key, want in (("rope.dimension_count", hd),
                      ("attention.key_length", hd),
                      ("attention.value_length", hd)):
        if int(get(key, want)) != want:
            raise ValueError("llama.%s is %s, not the head size %d"
                             % (key, get(key), want))
    if d % heads or heads % cfg.n_heads_kv:
        raise ValueError("%d heads over %d KV heads of a %d-wide model"
                         % (heads, cfg.n_heads_kv, d))
    scaling = get("rope.scaling.type", "none")
    if scaling != "none" or "rope_freqs.weight" in tensors:
        raise ValueError("RoPE scaling (%s) is not computed here" % scaling)
    return cfg


def load(path: str, gguf_py: Optional[str] = None) -> GGUFLM:
    """The model of a GGUF file, float64, eval mode, no gradients."""
    gguf = import_gguf(gguf_py)
    r = gguf.GGUFReader(path)
    tensors = {}
    for t in r.tensors:
        if t.tensor_type not in (gguf.GGMLQuantizationType.F32,
                                 gguf.GGMLQuantizationType.F16):
            raise ValueError("%s is %s: only F32 and F16 are read"
                             % (t.name, t.tensor_type.name))
        tensors[t.name] = np.array(t.data, dtype=np.float64)
    cfg = config_of(metadata(r), tensors)
    state = {"embed.weight": tensors.pop("token_embd.weight"),
             "norm.weight": tensors.pop("output_norm.weight")}
    if not cfg.tied:
        state["output.weight"] = tensors.pop("output.weight")
    for i in range(cfg.n_layers):
        for ours, theirs in BLOCK_TENSORS.items():
            state["blocks.%d.%s.weight" % (i, ours)] = tensors.pop(
                "blk.%d.%s.weight" % (i, theirs))
    if tensors:
        raise ValueError("tensors the reference has no place for: %s"
                         % ", ".join(sorted(tensors)))
    model = GGUFLM(cfg).double()
    model.load_state_dict({k: torch.from_numpy(v) for k, v in state.items()})
    model.eval()
    for p in model.parameters():
        p.requires_grad_(False)
    return model


def derive(src: str, dst: str, gguf_py: Optional[str] = None,
           n_layers: Optional[int] = None, **meta: Any) -> None:
    """Writes dst: src with only its first n_layers blocks (the same
    embedding, final norm and output head: an early exit of the model) and
    the metadata keys given (dots as "__": rope__freq_base=500.0 sets
    llama.rope.freq_base), every other key and tensor as src has it."""
    gguf = import_gguf(gguf_py)
    r = gguf.GGUFReader(src)
    arch = r.fields["general.architecture"].contents()
    w = gguf.GGUFWriter(dst, arch)
    if n_layers is not None:
        meta["block_count"] = n_layers
    new = {"%s.%s" % (arch, k.replace("__", ".")): v for k, v in meta.items()}
    types = {float: gguf.GGUFValueType.FLOAT32,
             int: gguf.GGUFValueType.UINT32}
    for key, f in r.fields.items():
        if key.startswith("GGUF.") or key == "general.architecture":
            continue
        sub = f.types[-1] if f.types[0] == gguf.GGUFValueType.ARRAY else None
        w.add_key_value(key, new.pop(key, f.contents()), f.types[0], sub)
    for key, v in new.items():
        w.add_key_value(key, v, types[type(v)])
    for t in r.tensors:
        if (n_layers is not None and t.name.startswith("blk.")
                and int(t.name.split(".")[1]) >= n_layers):
            continue
        w.add_tensor(t.name, np.array(t.data))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()

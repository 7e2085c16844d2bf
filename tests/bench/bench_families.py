"""Part "families" of `make bench-convs` (issues 40 and 41): a chat of
BENCH_FAMILY_TURNS (default 300) turns through /v1/chat/completions
(BENCH_FAMILY_API=messages: Anthropic's /v1/messages), each
turn a user message of about 250 tokens and a 16-token answer (greedy,
ignore_eos), the whole message list sent every turn, on tiny random-weight
models of the architectures in BENCH_FAMILIES (default gemma3,lfm2,
qwen2:llama-bpe,qwen2:qwen2,qwen2:phi-3: a sliding-window model and a
hybrid of short convolutions and attention, then issue 41's chat per
vocabulary;
tests/support/arch_models.py writes them around llama.cpp's SPM
vocabulary, with a training context of 131,072 so that llama-server's
slot may hold the whole chat; ARCH:VOCAB takes another vocabulary file of
llama.cpp's tree with its template), on two servers, one after the other:

  llama-server   built from the same llama.cpp tree, -np 1 -c 131072,
                 its prompt cache and context checkpoints on (its
                 defaults);
  serve          evictd-llama serve + evictd on a Unix socket, budget 256,
                 sinks 4 (the issue's), its other defaults.

Both with one thread, f16 K/V, flash attention off. Per block of ten
turns: the median time of a turn, the median of prompt tokens decoded
(timings.prompt_n) and of the prompt's tokens, and where the cache came
from (serve's timings.cache_kind); then the targets: serve's turn 300
within 1.3x of turn 10 (the medians of turns 291-300 and 10-19), no turn
decoding more than a fifth of its prompt past turn 10, and serve's turn at
most llama-server's where llama-server answers. A benchmark: it prints
figures and asserts nothing."""

import os
import random
import statistics
import sys
from typing import Dict, List

import bench_convs as bc
from support import arch_models

TURNS = int(os.environ.get("BENCH_FAMILY_TURNS", "300"))
FAMILIES = os.environ.get(
    "BENCH_FAMILIES",
    "gemma3,lfm2,qwen2:llama-bpe,qwen2:qwen2,qwen2:phi-3").split(",")
# BENCH_FAMILY_API=messages: the same chats through Anthropic's
# /v1/messages (both servers have it) instead of /v1/chat/completions.
API = os.environ.get("BENCH_FAMILY_API", "chat")
CONTEXT = 131072
ANSWER = 16
SERVE = ["--budget", "256", "--sinks", "4"]
KINDS = ("none", "conversation", "saved", "disk", "checkpoint")
# Vocabulary files of llama.cpp's tree without a template of their own
# get one in their family's format (qwen2's and phi-3's carry theirs;
# llama-spm's falls back to ChatML in both servers).
TEMPLATES = {"llama-bpe": (
    "{{ bos_token }}{% for m in messages %}<|start_header_id|>{{ m.role }}"
    "<|end_header_id|>\n\n{{ m.content | trim }}<|eot_id|>{% endfor %}"
    "{% if add_generation_prompt %}<|start_header_id|>assistant"
    "<|end_header_id|>\n\n{% endif %}")}
# Words for the user's messages (about 1.4 tokens each in llama.cpp's
# SPM vocabulary): 180 of them make a message of about 250 tokens.
WORDS = ("the river ran past an old mill where children played in summer "
         "and their parents talked about rain harvest market prices roads "
         "letters from cousins far away a teacher counted chairs before "
         "school began while the baker sold warm bread to travellers who "
         "asked for directions to the station near the green hill").split()


def message(turn: int) -> str:
    rng = random.Random(turn)
    return " ".join(rng.choice(WORDS) for _ in range(180)) + "?"


def chat(port: int, turns: int) -> List[dict]:
    """The chat's turns on the server at port: a record each, then the
    refused one's (its "error"), if any."""
    msgs: List[dict] = [{"role": "system",
                         "content": "You answer briefly."}]
    recs: List[dict] = []
    for turn in range(1, turns + 1):
        msgs.append({"role": "user", "content": message(turn)})
        body = {"messages": msgs, "max_tokens": ANSWER, "temperature": 0,
                "ignore_eos": True}
        if API == "messages":  # Anthropic's: the system prompt apart
            body = dict(body, model="m", system=msgs[0]["content"],
                        messages=msgs[1:])
        status, ans, dt = bc.post(port, body, "/v1/" + (
            "messages" if API == "messages" else "chat/completions"))
        if status != 200:
            recs.append({"turn": turn, "error": "HTTP %d %s" % (
                status, bc.error_text(ans))})
            return recs
        t = ans.get("timings", {})
        u = ans["usage"]
        if API == "messages":  # input_tokens: those not read from cache
            t = {"prompt_n": u["input_tokens"]}
            u = {"prompt_tokens": u["input_tokens"] +
                 u.get("cache_read_input_tokens", 0)}
        recs.append({"turn": turn, "s": dt, "prompt": u["prompt_tokens"],
                     "prompt_n": t.get("prompt_n"),
                     "kind": t.get("cache_kind")})
        msgs.append({"role": "assistant", "content": (
            "".join(b.get("text", "") for b in ans["content"])
            if API == "messages"
            else ans["choices"][0]["message"]["content"])})
        if turn % 50 == 0:
            print("  ... turn %d (%.0f ms)" % (turn, dt * 1e3),
                  file=sys.stderr)
    return recs


def part_families(evictd: str, engine: str, lserver: str, model: str,
                  tmp: str) -> None:
    del model  # the families' own
    print("== families (issues 40, 41): a chat of %d turns through "
          "%s (a user message of ~250 tokens, a %d-token "
          "answer), one slot, %d thread, f16 K/V, flash attention off; "
          "llama-server -c %d, serve %s" % (
              TURNS, "/v1/messages" if API == "messages"
              else "/v1/chat/completions", ANSWER, bc.THREADS, CONTEXT,
              " ".join(SERVE)))
    blocks = sorted({min(b, TURNS) for b in (19, 49, 99, 150, 200, 300)})
    for fam in FAMILIES:
        arch, _, vocab = fam.partition(":")
        vocab = vocab or "llama-spm"
        path = arch_models.write(arch, vocab, tmp, context=CONTEXT,
                                 template=TEMPLATES.get(vocab))
        res: Dict[str, List[dict]] = {}
        ls = bc.LlamaServer(lserver, path, "-np", "1", "-c", str(CONTEXT),
                            "-t", str(bc.THREADS), "--no-webui", *bc.COMMON,
                            log_path=os.path.join(tmp, "llama-server.log"))
        try:
            res["llama-server"] = chat(ls.port, TURNS)
        finally:
            ls.close()
        srv = bc.Pair(evictd, engine, path, tmp, SERVE)
        try:
            res["serve"] = chat(srv.port, TURNS)
            m = srv.metrics()
        finally:
            srv.close()
        print("-- %s (%s vocabulary, %s)" % (
            arch, vocab, "a Llama 3 template" if vocab == "llama-bpe"
            else "ChatML: no template" if vocab == "llama-spm"
            else "its template"))
        print("%-13s %7s | %9s %9s %9s | %s" % (
            "", "turns", "median", "prompt_n", "prompt", "cache from"))
        med: Dict[tuple, float] = {}
        for name, recs in res.items():
            for b in blocks:
                lo = max(1, b - 9)
                rs = [r for r in recs if lo <= r["turn"] <= b and
                      "error" not in r]
                if not rs:
                    print("%-13s %3d-%-3d | refused" % (name, lo, b))
                    continue
                med[(name, b)] = statistics.median(r["s"] for r in rs)
                kinds = sorted({KINDS[r["kind"]] for r in rs
                                if isinstance(r["kind"], int)})
                print("%-13s %3d-%-3d | %7.1fms %9.0f %9.0f | %s" % (
                    name, lo, b, med[(name, b)] * 1e3,
                    statistics.median(r["prompt_n"] or 0 for r in rs),
                    statistics.median(r["prompt"] for r in rs),
                    ",".join(kinds) or "-"))
            err = [r for r in recs if "error" in r]
            if err:
                print("  %s refused turn %d: %s" % (name, err[0]["turn"],
                                                     err[0]["error"]))
        sv = [r for r in res["serve"] if "error" not in r]
        worst = max((r["prompt_n"] / r["prompt"] for r in sv
                     if r["turn"] >= 10), default=0.0)
        print("serve: at most %.0f%% of a prompt decoded past turn 10; "
              "conversation hits %d, checkpoint hits %d, decoded afresh "
              "after parting %d" % (
                  worst * 100, m.get("evictd_llama_conversation_hits_total",
                                     0),
                  m.get("evictd_llama_checkpoint_hits_total", 0),
                  m.get("evictd_llama_conversation_no_back_total", 0)))
        first, last = blocks[0], blocks[-1]
        if ("serve", first) in med and ("serve", last) in med:
            r = med[("serve", last)] / med[("serve", first)]
            print("target: turns %d-%d within 1.3x of turns 10-19: %.2fx "
                  "%s" % (last - 9, last, r, "MET" if r <= 1.3
                          else "NOT MET"))
        print("target: no turn past 10 decodes its whole history: %s" % (
            "MET" if worst <= 0.2 else "NOT MET"))
        both = [b for b in blocks if ("llama-server", b) in med
                and ("serve", b) in med]
        if both:
            over = [b for b in both if med[("serve", b)] >
                    med[("llama-server", b)]]
            print("target: serve's turn at most llama-server's where it "
                  "answers (%d blocks): %s" % (
                      len(both), "MET" if not over else
                      "NOT MET at turns ending %s" % over))
        print()

"""The hostile sweep runs while streams decode (issue 32): one empty prompt
failed every sequence decoding beside it (the batch of steps refused as a
whole, evictd_unavailable) and got 503 itself. The real daemon and the real
`evictd-llama serve` on stories260K ($STORIES_GGUF), a window small enough
that long streams evict. Four long greedy streams (OpenAI's completions and
chat, llama.cpp's /completion) are decoded once undisturbed, then again
while threads send every route of serve, the empty and degenerate prompts
and fields (llama-server's too: token-id prompts, the sampler's fields,
response formats, the chat template's rules), and 1,200 bodies mutated
from valid ones with a seeded generator. Every stream must end with its
undisturbed text, every valid request get 200 and a well-formed answer,
every bad one the 4xx serve's rules give it (hostile_oracle.py, written
from those rules), in serve's one error shape; nothing a 5xx; evictd's
sessions and serve's gauges come back to where they were."""

import collections
import copy
import http.client
import json
import os
import random
import sys
import tempfile
import threading
import time
import unittest
from typing import Any, Dict, List, NamedTuple, Optional, Tuple

from hostile_oracle import (
    BODY_MAX, BOS, NMAX, NP, ROUTES, VOCAB, Verdict, judge, parse)
from support import metrics, paths
from support.daemon import Daemon
from support.http import connect
from support.serve import Serve

STORIES = paths.stories_gguf()
# Room for the streams and every sweep thread's request (n at most 2 each),
# so that no valid request waits, and a queue nothing can fill: a 503 busy
# is then a failure like any 5xx.
STREAMS, THREADS, QUEUE = 4, 4, 1024
SETTINGS = ["--budget", "64", "--sinks", "4", "--lookahead", "16",
            "--exact", "-np", str(NP), "--queue", str(QUEUE)]
# Each stream's length, so that the streams outlast the sweep: on the
# 2-core development machine (busy) four streams of 15,000 tokens take
# about 10 s undisturbed and more beside the sweep, which takes about 4 s.
TOKENS = int(os.environ.get("HOSTILE_TOKENS", "15000"))
MUTATED = 1200
SEED = 32
# What a valid sweep request may ask: short, so the sweep is quick.
MAX_GEN, MAX_N, MAX_PROMPT = 8, 2, 4096
# stories260K's greedy text from BOS (its README; test_stories checks it).
FROM_BOS = "Once upon a time, there was a little girl named Lily."

def short(v: Verdict) -> bool:
    """Whether a valid request is one the sweep may send (quick, never
    waiting for a sequence)."""
    return v.tokens <= MAX_GEN and v.n <= MAX_N and v.prompt <= MAX_PROMPT


# ---- the requests ----------------------------------------------------------


class Case(NamedTuple):
    kind: str  # route, degenerate, mutated
    note: str
    method: str
    path: str
    raw: Optional[bytes]
    want: Verdict


class Raw:
    """A value written as this text into the body (what json.dumps cannot
    write: nesting deeper than it recurses, numbers jansson refuses)."""

    def __init__(self, text: str) -> None:
        self.text = text


def encode(body: Any, ascii_only: bool = True) -> bytes:
    raws: List[str] = []

    def mark(o: Any) -> str:
        if not isinstance(o, Raw):
            raise TypeError(o)
        raws.append(o.text)
        return "@@RAW%d@@" % (len(raws) - 1)

    out = json.dumps(body, ensure_ascii=ascii_only, default=mark).encode(
        "utf-8", "surrogatepass")
    for i, text in enumerate(raws):
        out = out.replace(b'"@@RAW%d@@"' % i, text.encode())
    return out


def deep(d: int, obj: bool = False) -> Raw:
    return Raw('{"a":' * d + "1" + "}" * d if obj else "[" * d + "]" * d)


def make(kind: str, note: str, method: str, path: str, body: Any = None,
         raw: Optional[bytes] = None, want: Optional[int] = None) -> Case:
    if raw is None and body is not None:
        raw = encode(body)
    v = judge(method, path, raw)
    if want is not None and v.status != want:  # the oracle checks itself
        raise AssertionError("the oracle says %d for %s (%s %s %r), not %d"
                             % (v.status, note, method, path, raw[:200]
                                if raw else raw, want))
    if v.status == 200 and not short(v):
        raise AssertionError("%s would be long: %s" % (note, v))
    return Case(kind, note, method, path, raw, v)


OAI, CHAT, NATIVE = "/v1/completions", "/v1/chat/completions", "/completion"


def routes() -> List[Case]:
    """Every route, wrong methods, unknown paths, and llama-server's
    tokenizer and template routes with degenerate bodies. (OPTIONS, a
    CORS preflight on any path, and the Responses API are test_routes.py's
    and test_openai's.)"""
    out = []
    for path in ("/v1/models", "/models", "/health", "/v1/health",
                 "/metrics", "/v1/models?x=1", "/props", "/slots"):
        out.append(make("route", "GET " + path, "GET", path, want=200))
    for method, path in (("GET", OAI), ("GET", CHAT), ("GET", NATIVE),
                         ("PUT", OAI), ("DELETE", CHAT), ("PATCH", NATIVE),
                         ("POST", "/v1/models"),
                         ("POST", "/health"), ("POST", "/metrics"),
                         ("DELETE", "/metrics"), ("PUT", "/health"),
                         ("HEAD", "/health"), ("HEAD", OAI),
                         ("FROB", "/v1/models"), ("GET", "/tokenize"),
                         ("GET", "/completions"), ("POST", "/props"),
                         ("POST", "/slots"), ("PUT", "/apply-template"),
                         ("GET", "/v1/responses")):
        out.append(make("route", "wrong method %s %s" % (method, path),
                        method, path, want=405))
    tok, detok, tmpl = "/tokenize", "/detokenize", "/apply-template"
    user = [{"role": "user", "content": "hi"}]
    for path, body, want in (
            (tok, {}, 200), (tok, {"content": ""}, 200),
            (tok, {"content": "Once <s>", "with_pieces": True}, 200),
            (tok, {"content": ["a", 5, "b"], "add_special": True}, 200),
            (tok, {"content": [511, 0]}, 200), (tok, {"content": None}, 200),
            (tok, {"content": [512]}, 400), (tok, {"content": [-1]}, 400),
            (tok, {"content": [1.0]}, 400), (tok, {"content": [True]}, 400),
            (tok, {"content": [[1]]}, 400), (tok, {"content": 5}, 400),
            (tok, {"content": {"a": 1}}, 400),
            (tok, {"content": "a", "with_pieces": "yes"}, 400),
            (tok, {"content": "\u00e9" * 5000}, 200),
            (detok, {}, 200), (detok, {"tokens": []}, 200),
            (detok, {"tokens": list(range(VOCAB))}, 200),
            (detok, {"tokens": [VOCAB]}, 400), (detok, {"tokens": [-1]}, 400),
            (detok, {"tokens": ["a"]}, 400), (detok, {"tokens": 5}, 400),
            (detok, {"tokens": [None]}, 400),
            (tmpl, {"messages": user}, 200),
            (tmpl, {"messages": user + [{"role": "assistant",
                                         "content": "x"}]}, 200),
            (tmpl, {"messages": [{"role": "assistant", "content": "x"}] * 2},
             400),
            (tmpl, {"messages": []}, 400), (tmpl, {}, 400),
            (tmpl, {"messages": [{"role": "user", "content": 5}]}, 400),
            (tmpl, {"messages": user, "response_format": 5}, 400),
            (tmpl, {"messages": user, "tools": {}}, 400)):
        out.append(make("route", "%s %s" % (path, json.dumps(body)[:40]),
                        "POST", path, body, want=want))
    # "/" is the web UI's page: gzip only (llama-server's 415), GET only
    out.append(make("route", "the page without gzip", "GET", "/", want=415))
    out.append(make("route", "POST to the page", "POST", "/",
                    {"prompt": "a", "max_tokens": 1}, want=405))
    for path in ("/v1", "/v1/", "/v1/completions/", "/completionz",
                 "/v2/completions", "/v1/chat/completion", "/V1/MODELS",
                 "/health/", "/metrics/x", "/v1/models/evictd-lm",
                 "/v1/embeddings", "/v1/tokenize", "/infill", "/embedding",
                 "/%2e%2e/etc/passwd", "/a%20b", "/%FF", "/%C3",
                 "/" + "%C3%A9" * 300, "/x" + "%C3%A9" * 300,
                 "/" + "x" * 2000):
        out.append(make("route", "unknown path %s" % path[:40], "GET", path,
                        want=404))
        out.append(make("route", "unknown path %s" % path[:40], "POST",
                        path, {"prompt": "a", "max_tokens": 1}, want=404))
    return out


# llama-server's sampler fields, and what serve answers them with.
SAMPLER_CASES: Tuple[Tuple[dict, int], ...] = (
    ({"top_k": 1}, 200), ({"top_k": -5}, 200), ({"top_k": 1e300}, 200),
    ({"top_k": 3.0}, 200), ({"top_k": 1.5}, 400), ({"top_k": "x"}, 400),
    ({"top_k": True}, 400), ({"min_p": 2}, 200), ({"min_p": "0"}, 400),
    ({"typical_p": 1e39}, 200), ({"mirostat": 5}, 200),
    ({"mirostat": 2, "mirostat_tau": 3}, 200), ({"mirostat": 0.5}, 400),
    ({"repeat_penalty": 1.1}, 200), ({"repeat_penalty": 0}, 400),
    ({"repeat_penalty": -1}, 400), ({"repeat_penalty": 1e300}, 400),
    ({"repeat_penalty": 1e-300}, 400), ({"repeat_last_n": -1}, 400),
    ({"repeat_last_n": 64}, 200), ({"presence_penalty": 1e39}, 400),
    ({"frequency_penalty": -2}, 200), ({"frequency_penalty": [1]}, 400),
    ({"dry_multiplier": 0.8}, 200), ({"dry_penalty_last_n": -1}, 400),
    ({"dry_allowed_length": 2.5}, 400),
    ({"dry_sequence_breakers": []}, 400),
    ({"dry_sequence_breakers": ["\n", 5]}, 400),
    ({"dry_sequence_breakers": ["\n"]}, 200),
    ({"xtc_probability": 5, "xtc_threshold": -1}, 200),
    ({"min_keep": -1}, 400), ({"adaptive_decay": 1}, 400),
    ({"post_sampling_probs": "yes"}, 400),
    ({"logit_bias": {"5": -100}}, 200), ({"logit_bias": [[5, False]]}, 200),
    ({"logit_bias": [["a", 1]]}, 200), ({"logit_bias": {"x": 1}}, 200),
    ({"logit_bias": {" 5": 1e300}}, 200), ({"logit_bias": {}}, 200),
    ({"logit_bias": {"512": 1}}, 400), ({"logit_bias": {"-1": 1}}, 400),
    ({"logit_bias": {"5": True}}, 400), ({"logit_bias": {"5": None}}, 400),
    ({"logit_bias": [[5]]}, 400), ({"logit_bias": [[5.0, 1]]}, 400),
    ({"logit_bias": [[512, 1]]}, 400), ({"logit_bias": [[None, 1]]}, 400),
    ({"logit_bias": 5}, 400), ({"logit_bias": "x"}, 400),
    ({"grammar": 'root ::= "a"'}, 200), ({"grammar": "root ::= [a-z ]+"},
                                          200),
    ({"grammar": ""}, 200), ({"grammar": "junk ::="}, 400),
    ({"grammar": "root ::= ("}, 400), ({"grammar": 5}, 400),
    ({"grammar": 'root ::= "a"', "grammar_lazy": True}, 400),
    ({"json_schema": {"type": "object"}}, 200),
    ({"json_schema": {"type": "object"}, "grammar": ""}, 200))
# response_format on OpenAI's routes.
RF_CASES: Tuple[Tuple[dict, int], ...] = (
    ({"response_format": {"type": "text"}}, 200),
    ({"response_format": {"type": "json_object"}}, 200),
    ({"response_format": {"type": "json_object", "schema": {}}}, 200),
    ({"response_format": {"type": "json_object",
                          "schema": {"type": "object"}}}, 200),
    ({"response_format": {"type": "json_schema", "json_schema": {
        "schema": {"type": "object"}}}}, 200),
    ({"response_format": {"type": "json_schema", "json_schema": {
        "schema": {}}}}, 200),
    ({"response_format": None}, 200),
    ({"response_format": {"type": "json_object"}, "grammar": ""}, 200),
    ({"response_format": {"type": "json_object"},
      "grammar": 'root ::= "a"'}, 400),
    ({"response_format": {"type": "json_schema"}}, 400),
    ({"response_format": {"type": "json_object", "schema": 5}}, 400),
    ({"response_format": {}}, 400), ({"response_format": []}, 400),
    ({"response_format": "json"}, 400),
    ({"response_format": {"type": "xml"}}, 400),
    ({"response_format": {"type": 5}}, 400))


def degenerate() -> List[Case]:
    """The empty and degenerate prompts and fields, by hand."""
    out = []

    def add(note: str, path: str, body: Any = None, want: int = 200,
            raw: Optional[bytes] = None) -> None:
        out.append(make("degenerate", note, "POST", path, body, raw, want))

    small = {OAI: "max_tokens", CHAT: "max_tokens", NATIVE: "n_predict"}
    for stream in (False, True):
        s = {"stream": stream}
        for path in (OAI, NATIVE):
            mt = small[path]
            for p in ("", " ", "<s>", "</s>", "<unk>", "a", "\n", "\u00e9",
                      "\U0001F409", "\u200b"):
                add("prompt %r" % p, path, dict(prompt=p, temperature=0,
                                                **{mt: 8}, **s))
            add("empty prompt, 1 token", path,
                dict(prompt="", **{mt: 1}, **s))
            add("empty prompt, ignore_eos", path,
                dict(prompt="", ignore_eos=True, **{mt: 8}, **s))
            add("empty prompt, stop at once", path,
                dict(prompt="", temperature=0, stop=["O", "n"], **{mt: 8},
                     **s))
            add("empty prompt, stop empty", path,
                dict(prompt="", stop="", **{mt: 4}, **s), 400)
            add("empty prompt, stop [\"\"]", path,
                dict(prompt="", stop=[""], **{mt: 4}, **s), 400)
            add("empty prompt, sampled", path,
                dict(prompt="", temperature=0.9, seed=3, **{mt: 8}, **s))
            add("prompt \\u0000", path,
                dict(prompt="\0", **{mt: 4}, **s), 400)
            add("prompt with a lone surrogate", path,
                dict(prompt="\ud800", **{mt: 4}, **s), 400)
            add("prompt of invalid UTF-8", path, raw=b'{"prompt":"a\xff\xfe'
                b'b","%s":4,"stream":%s}' % (mt.encode(),
                                              b"true" if stream else b"false"),
                want=400)
            add("prompt of a lone UTF-8 lead byte", path,
                raw=b'{"prompt":"\xc3","%s":4}' % mt.encode(), want=400)
            add("prompt of an encoded surrogate", path,
                raw=b'{"prompt":"\xed\xa0\x80","%s":4}' % mt.encode(),
                want=400)
            add("prompt unquoted non-ASCII", path,
                raw=b'{"prompt":\xc3\xa9\xc3\xa9,"%s":4}' % mt.encode(),
                want=400)
            add("prompt with a raw control byte", path,
                raw=b'{"prompt":"a\x01b","%s":4}' % mt.encode(), want=400)
            # A prompt of token ids, as given (the BOS is the client's),
            # or a list of one prompt.
            for p in ([1, 2, 3], [[1, 2]], [5], [0], [VOCAB - 1], [BOS],
                      [[BOS]], [""], [" "], ["a"]):
                add("prompt %s" % json.dumps(p), path,
                    dict(prompt=p, temperature=0, **{mt: 4}, **s))
            # llama-server's /completion takes several prompts (each its
            # own answer, not streamed), ids and strings mixed, and an
            # object {"prompt_string"}; OpenAI's route takes one.
            native = path == NATIVE
            for p, want in (
                    (["a", "b"], 400 if stream or not native else 200),
                    ([[1], [2]], 400 if stream or not native else 200),
                    ([[5], {"prompt_string": "b"}],
                     400 if stream or not native else 200),
                    (["a", 5], 200 if native else 400),
                    ([5, "a"], 200 if native else 400),
                    ({"prompt_string": "a"}, 200 if native else 400),
                    ({"prompt_string": [5, "a"]}, 200 if native else 400),
                    ({"prompt_string": "a", "multimodal_data": ["AAAA"]},
                     400), ({"prompt_string": 5}, 400), ([["a"]], 400),
                    (["a", ["b"]], 400), ([[]], 400), ([[[1]]], 400),
                    ([], 400), ([VOCAB], 400), ([-1], 400), ([1.0], 400),
                    ([True], 400), ([None], 400),
                    ([Raw("18446744073709551616")], 400), ({}, 400),
                    ({"a": [{"b": {}}]}, 400), (None, 400), (0, 400),
                    (True, 400), (Raw("NaN"), 400)):
                add("prompt %s" % json.dumps(p, default=lambda r: r.text),
                    path, dict(prompt=p, **{mt: 4}, **s), want)
            add("prompt nested 3000 deep", path,
                dict(prompt=deep(3000), **{mt: 4}, **s), 400)
            add("junk nested 1500 deep, ignored", path,
                dict(prompt="", junk=deep(1500), **{mt: 4}, **s))
            add("junk objects nested 1500 deep, ignored", path,
                dict(prompt="", junk=deep(1500, True), **{mt: 4}, **s))
            add("junk nested 3000 deep", path,
                dict(prompt="", junk=deep(3000), **{mt: 4}, **s), 400)
            # The length: -1 (until an end token or --n-predict-max) would
            # be long here; test_routes asks it.
            for v in (0, -2, 40000, NMAX + 1, (1 << 63) - 1, Raw("1e400"),
                      Raw("18446744073709551616"), Raw("8.0"), Raw("8e0"),
                      Raw("-1.0"), "8", "-1", "NaN", Raw("NaN"),
                      Raw("Infinity"), Raw("-Infinity"), True, [8], {}):
                add("%s %s" % (mt, v.text if isinstance(v, Raw) else
                               json.dumps(v)),
                    path, dict(prompt="", **{mt: v}, **s), 400)
            for names in (("n_predict", "max_tokens"),
                          ("n_predict", "max_completion_tokens"),
                          ("max_completion_tokens", "max_tokens")):
                add("%s before %s" % names, path,
                    dict(prompt="", **{names[0]: 2, names[1]: NMAX}, **s))
                add("%s null, %s" % names, path,
                    dict(prompt="", **{names[0]: None, names[1]: 2}, **s))
                add("%s 0 before %s" % names, path,
                    dict(prompt="", **{names[0]: 0, names[1]: 2}, **s), 400)
            # OpenAI's temperature is 0 to 2; llama-server's any number,
            # below 0 greedy, clamped.
            for v in (-0.5, 1e308, 2.5, -1e308, 1e-300):
                add("temperature %s" % v, path,
                    dict(prompt="", temperature=v, **{mt: 4}, **s),
                    400 if path == OAI and not 0 <= v <= 2 else 200)
            for v in (Raw("1e400"), "0", Raw("-Infinity"), [0], {}, True):
                add("temperature %s" % (v.text if isinstance(v, Raw) else v),
                    path, dict(prompt="", temperature=v, **{mt: 4}, **s),
                    400)
            add("seed -5", path, dict(prompt="", seed=-5, **{mt: 4}, **s))
            add("seed -1", path, dict(prompt="", seed=-1, **{mt: 4}, **s))
            add("seed 2^63-1", path,
                dict(prompt="", seed=(1 << 63) - 1, **{mt: 4}, **s))
            for v in (Raw("9223372036854775808"), 0.5, Raw("1.0"), "1",
                      [1], {}, True):
                add("seed %s" % (v.text if isinstance(v, Raw) else v), path,
                    dict(prompt="", seed=v, **{mt: 4}, **s), 400)
            add("stop of 300 bytes", path,
                dict(prompt="", stop="x" * 300, **{mt: 4}, **s), 400)
            add("stream \"true\"", path,
                dict(prompt="", **{mt: 4}, stream="true"), 400)
            # llama-server's sampler fields: clamped where it clamps them,
            # refused where it refuses them.
            for extra, want in SAMPLER_CASES:
                add("sampler %s" % json.dumps(extra)[:60], path,
                    dict(prompt="", **{mt: 4}, **extra, **s), want)
        # llama-server's /completion: one choice; logprobs is n_probs
        for extra, want in (({"n": 1}, 200), ({"n_cmpl": 1}, 200),
                            ({"n": 2}, 400), ({"n_cmpl": 2}, 400),
                            ({"n": 0}, 400), ({"logprobs": 2}, 200),
                            ({"logprobs": 0}, 200), ({"logprobs": 101}, 400),
                            ({"logprobs": True}, 400),
                            ({"logprobs": "x", "n_probs": 2}, 200),
                            ({"n_probs": 100}, 200), ({"n_probs": 101}, 400),
                            ({"n_probs": -1}, 400), ({"n_probs": 2.5}, 400),
                            ({"n_probs": "2"}, 400),
                            ({"return_tokens": True}, 200),
                            ({"return_tokens": 1}, 400),
                            ({"response_fields": ["content"]}, 200),
                            ({"response_fields": "content"}, 400),
                            ({"response_fields": [""]}, 400),
                            ({"response_fields": []}, 200),
                            ({"lora": [{"id": 0, "scale": 1}]}, 400),
                            ({"lora": []}, 200)):
            add("/completion %s" % json.dumps(extra), NATIVE,
                dict(prompt="", n_predict=3, **extra, **s), want)
        # OpenAI's logprobs: chat's a boolean, the legacy completions' a
        # count; response_format
        for extra, want in (({"logprobs": 2}, 200), ({"logprobs": 0}, 200),
                            ({"logprobs": 6}, 400),
                            ({"logprobs": True}, 400),
                            ({"top_logprobs": 3}, 200)) + RF_CASES:
            add("/v1/completions %s" % json.dumps(extra), OAI,
                dict(prompt="", max_tokens=3, **extra, **s), want)
        user = [{"role": "user", "content": "hi"}]
        for extra, want in (({"logprobs": True}, 200),
                            ({"logprobs": True, "top_logprobs": 20}, 200),
                            ({"logprobs": True, "top_logprobs": 21}, 400),
                            ({"logprobs": 3}, 400),
                            ({"top_logprobs": 3}, 400),
                            ({"top_logprobs": 0}, 400),
                            ({"logprobs": False, "top_logprobs": None}, 200),
                            ({"tools": []}, 200), ({"tools": 5}, 400),
                            ({"tool_choice": "required"}, 200),
                            ({"tool_choice": "x"}, 400),
                            ({"tool_choice": 5}, 400),
                            ({"json_schema": {}}, 200),
                            ({"json_schema": {"type": "object"}}, 200),
                            ({"json_schema": {"type": "object"},
                              "grammar": 'root ::= "a"'}, 400),
                            ({"json_schema": 5}, 400),
                            ({"reasoning_format": "x"}, 400),
                            ({"reasoning_format": "none"}, 200),
                            ({"parallel_tool_calls": 5}, 400)) + RF_CASES:
            add("chat %s" % json.dumps(extra), CHAT,
                dict(messages=user, max_tokens=3, **extra, **s), want)
        # OpenAI's own: n, stream_options, max_completion_tokens, model
        add("n 2, empty prompt", OAI, dict(prompt="", n=2, max_tokens=8,
                                           temperature=0, **s))
        add("n 2, [\"\"]", OAI, dict(prompt=[""], n=2, max_tokens=3, **s))
        add("n 2, empty prompt, sampled", OAI,
            dict(prompt="", n=2, max_tokens=8, temperature=1, seed=9, **s))
        add("n 2, empty prompt, 1 token", OAI,
            dict(prompt="", n=2, max_tokens=1, **s))
        add("n 2, empty prompt, usage", OAI,
            dict(prompt="", n=2, max_tokens=2, **s,
                 stream_options={"include_usage": True}))
        add("n 0", OAI, dict(prompt="", n=0, max_tokens=2, **s), 400)
        add("n -1", OAI, dict(prompt="", n=-1, max_tokens=2, **s), 400)
        add("n over -np", OAI, dict(prompt="", n=NP + 1, max_tokens=2, **s),
            400)
        add("max_completion_tokens 2", OAI,
            dict(prompt="", max_completion_tokens=2, max_tokens=NMAX, **s))
        add("max_completion_tokens 0", OAI,
            dict(prompt="", max_completion_tokens=0, max_tokens=2, **s), 400)
        add("model 5", OAI, dict(prompt="", model=5, max_tokens=2, **s), 400)
        add("model huge", OAI, dict(prompt="", model="m" * 200000,
                                    max_tokens=2, **s))
        add("top_p 1.5", OAI, dict(prompt="", top_p=1.5, max_tokens=2, **s),
            400)
        add("stream_options junk", OAI,
            dict(prompt="", stream_options=[], max_tokens=2, **s), 400)
        add("stream_options.include_usage \"yes\"", OAI,
            dict(prompt="", stream_options={"include_usage": "yes"},
                 max_tokens=2, **s), 400)
        add("five stop strings", OAI, dict(prompt="", stop=list("abcde"),
                                           max_tokens=2, **s), 400)
        add("sixteen stop strings", NATIVE, dict(prompt="", stop=list(
            "abcdefghijklmnop"), n_predict=2, **s))
        add("seventeen stop strings", NATIVE, dict(prompt="", stop=list(
            "abcdefghijklmnopq"), n_predict=2, **s), 400)
        # the chat: empty and degenerate messages
        for content in ("", None, [], " ", "<s>", "</s>", "<|im_start|>",
                        "<|im_end|>", "a", [{"type": "text", "text": ""}],
                        [{"type": "text", "text": "<s>"},
                         {"type": "text", "text": "</s>", "x": 1}]):
            add("chat content %s" % json.dumps(content), CHAT,
                dict(messages=[{"role": "user", "content": content}],
                     max_tokens=4, **s))
        add("chat n 2, empty content", CHAT,
            dict(messages=[{"role": "user", "content": ""}], n=2,
                 max_tokens=4, temperature=0, **s))
        add("chat every role", CHAT, dict(messages=[
            {"role": r, "content": ""} for r in
            ("system", "developer", "user", "assistant", "tool")],
            max_tokens=4, **s))
        for msgs in ([], {}, "hi", None, [None], ["hi"], [[]], [{}],
                     [{"role": "user"}], [{"content": "hi"}],
                     [{"role": "User", "content": "hi"}],
                     [{"role": "", "content": "hi"}],
                     [{"role": None, "content": "hi"}],
                     [{"role": 5, "content": "hi"}],
                     [{"role": "bot", "content": "hi"}],
                     [{"role": "user", "content": 5}],
                     [{"role": "user", "content": {"text": "hi"}}],
                     [{"role": "user", "content": [{"type": "image_url",
                                                    "image_url": "x"}]}],
                     [{"role": "user", "content": [{"type": "text"}]}],
                     [{"role": "user", "content": [{"type": "text",
                                                    "text": 5}]}],
                     [{"role": "user", "content": ["hi"]}],
                     [{"role": "user", "content": "\0"}],
                     [{"role": "user\0", "content": "hi"}],
                     [{"role": "user", "content": "a"}] * 4097):
            add("chat messages %s" % json.dumps(msgs)[:60], CHAT,
                dict(messages=msgs, max_tokens=4, **s), 400)
        add("chat without max_tokens, bad message", CHAT,
            dict(messages=[{"role": "user"}], **s), 400)
    # the body itself
    for path in (OAI, CHAT, NATIVE):
        for raw in (b"", b" ", b"{", b"}", b"[]", b"null", b"0", b'""',
                    b"{}", b"[{}]", b'{"prompt":""', b'{"prompt":""}}',
                    b"\xef\xbb\xbf{}", b"\xff\xfe", b"\0", b"{\0}",
                    b'{"prompt":"",}', b"{'prompt':''}", b'{prompt:""}',
                    b'{"prompt":"" "max_tokens":1}', b"[" * 3000,
                    b"{" * 100, b'{"prompt":"\\x41"}', b'{"prompt":"\\ud800"}',
                    b'{"prompt":"\\u0000"}', b'{"\\u0000":1}',
                    b'{"prompt":"\\uD83D\\uDC09"} trailing'):
            add("body %r" % raw[:30], path, raw=raw, want=400)
        add("body over 1 MiB", path, dict(prompt="", pad="x" * BODY_MAX),
            413)
        add("body of invalid UTF-8 over 1 MiB", path, raw=b"\xff" *
            (BODY_MAX + 1), want=413)
        head = b'{"prompt":"","%s":1,"junk":"' % small[path].encode()
        if path == CHAT:
            head = (b'{"messages":[{"role":"user","content":""}],'
                    b'"max_tokens":1,"junk":"')
        pad = BODY_MAX - len(head) - 2
        add("body of 1 MiB exactly", path,
            raw=head + b"x" * pad + b'"}', want=200)
        add("body of 1 MiB and a byte", path,
            raw=head + b"x" * (pad + 1) + b'"}', want=413)
    return out


# ---- the mutated bodies ----------------------------------------------------

PROMPTS = ["Once upon a time", "The cat sat", "Lily and Ben went",
           "A big red ball", "Tom was sad because", "", " "]
JUNK_KEYS = ["x_junk", "foo", "Prompt", "prompt ", "", "__proto__",
             "constructor", "\u00e9t\u00e9", "\U0001F409", "k" * 300,
             "MAX_TOKENS", "0", "stream\u200b", "n ", "null"]
JUNK = [None, True, False, 0, -1, 1, 2, 3, 7, 1.5, -0.0, 0.5, 3.0, 1e300,
        -1e300, 1e-300, (1 << 63) - 1, -(1 << 63), "", " ", "1", "true",
        "NaN", "Infinity", "-1", "null", "0x10", "<s>", "</s>", "\u00e9",
        "\U0001F409", [], [1], [1, 2, 3], ["a"], [""], [None], ["a", "b"],
        {}, {"a": 1}, {"type": "text"}, {"type": "text", "text": "hi"},
        [[[]]], {"role": "user", "content": "hi"}, {"include_usage": True}]
NUMBERS = ["1e400", "-1e400", "NaN", "Infinity", "-Infinity",
           "9223372036854775808", "-9223372036854775809",
           "18446744073709551616", "8e0", "8.0", "-0", "0.0", "1E-400",
           "00", "+1", ".5", "1.", "0x10", "1_000", "2", "1", "0", "-1",
           "4", "2.5", "1e2", "true", "null"]
UNICODE = ["\u65e5\u672c\u8a9e", "\U0001F409", "\u200b", "\ufeff",
           "\u202e", "e\u0301", "\ud800", "\udc00", "\0", "\x7f", "\x1f",
           "\u00e9" * 200, "\n\n", "<|im_start|>", "<|im_end|>", "<unk>",
           "\U0010FFFF", "\ufffd"]
ROLES = ["system", "developer", "user", "assistant", "tool", "User", "",
         "bot", "function", None, 5, ["user"], "user\u200b"]
CONTENTS = ["", None, [], "hi", " ", "<s>", 5, {"text": "x"}, ["hi"],
            [{"type": "text", "text": "hi"}], [{"type": "text"}],
            [{"type": "input_text", "text": "hi"}],
            [{"type": "text", "text": 5}], [{"type": "text", "text": ""}],
            [{"type": "image_url", "image_url": {"url": "x"}}], True]


def base(rng: random.Random, path: str) -> dict:
    """A valid body of path, its optional fields at random."""
    mt = "n_predict" if path == NATIVE else (
        "max_completion_tokens" if rng.random() < 0.2 else "max_tokens")
    b: Dict[str, Any] = {mt: rng.randint(1, MAX_GEN)}
    if path == CHAT:
        msgs = [{"role": "user", "content": rng.choice(PROMPTS)}]
        if rng.random() < 0.5:
            msgs.insert(0, {"role": "system", "content": "Be brief."})
        if rng.random() < 0.3:
            msgs[-1]["content"] = [{"type": "text", "text": rng.choice(
                PROMPTS)}]
        b["messages"] = msgs
    else:
        b["prompt"] = rng.choice(PROMPTS + [[BOS, 426, 27], [5], [BOS]])
        if rng.random() < 0.2:
            b["prompt"] = [b["prompt"]]
    opt = {"temperature": rng.choice([0, 0.5, 1]), "seed": rng.randint(0, 99),
           "stop": rng.choice(["\n", ["."], [], ["zz", "q"]]),
           "ignore_eos": rng.random() < 0.5, "stream": rng.random() < 0.4,
           "top_p": rng.choice([1, 0.9])}
    if path != NATIVE:
        opt.update(model=rng.choice(["x", "gpt-4o", ""]),
                   n=rng.choice([1, 1, 2]),
                   stream_options={"include_usage": rng.random() < 0.5},
                   user="u", response_format=rng.choice(
                       [{"type": "text"}, {"type": "json_object"}]))
    if path == CHAT:
        opt.update(logprobs=True)
    elif path == OAI:
        opt.update(logprobs=rng.choice([0, 2]))
    else:
        opt.update(n_probs=rng.choice([0, 2]), return_tokens=True)
    # llama-server's sampler fields (less often: each is a place to mutate)
    for k, v in {"top_k": rng.choice([0, 1, 40]),
                 "min_p": rng.choice([0, 0.05]),
                 "repeat_penalty": rng.choice([1, 1.1]),
                 "presence_penalty": rng.choice([0, 0.5]),
                 "mirostat": rng.choice([0, 2]),
                 "logit_bias": rng.choice([{}, {"5": -1}, [[5, False]],
                                           [["a", 1]]])}.items():
        if rng.random() < 0.15:
            b[k] = v
    for k, v in opt.items():
        if rng.random() < 0.5:
            b[k] = v
    if path == CHAT and b.get("logprobs") and rng.random() < 0.5:
        b["top_logprobs"] = rng.choice([0, 2])
    return b


def places(b: Any) -> List[Tuple[Any, Any]]:
    """Every (container, key) of a body, nested ones too."""
    out = []
    stack = [b]
    while stack:
        x = stack.pop()
        keys = list(x) if isinstance(x, dict) else range(len(x)) \
            if isinstance(x, list) else []
        for k in keys:
            out.append((x, k))
            stack.append(x[k])
    return out


def mutate(rng: random.Random, path: str, b: dict) -> Tuple[Any, str]:
    """One mutation of body b (in place, or a new root); what it did."""
    spots = places(b)
    dicts = [b] + [x[k] for x, k in spots if isinstance(x[k], dict)]
    op = rng.choices(["type", "missing", "unknown", "number", "huge", "deep",
                      "unicode", "prompt", "messages", "root", "empty"],
                     [20, 10, 12, 12, 4, 3, 8, 8, 10, 2, 6])[0]
    if op in ("type", "number", "huge", "deep", "unicode", "missing",
              "empty") and not spots:
        op = "unknown"
    if op == "type":
        x, k = rng.choice(spots)
        x[k] = copy.deepcopy(rng.choice(JUNK))
        return b, "%s=%s" % (k, json.dumps(x[k])[:40])
    if op == "missing":
        x, k = rng.choice(spots)
        del x[k]
        return b, "without %s" % k
    if op == "unknown":
        x = rng.choice(dicts)
        k = rng.choice(JUNK_KEYS)
        x[k] = copy.deepcopy(rng.choice(JUNK + [deep(rng.choice([8, 200])),
                                                "y" * 5000]))
        return b, "unknown %r" % k[:20]
    if op == "number":
        x, k = rng.choice(spots)
        x[k] = Raw(rng.choice(NUMBERS))
        return b, "%s=%s" % (k, x[k].text)
    if op == "huge":
        x, k = rng.choice(spots)
        size = rng.choice([257, 257, 5000, 70000, 500000, 1000000])
        x[k] = rng.choice(["x", "\u00e9", "\U0001F409", "ab "]) * (
            size // 4 + 1)
        return b, "%s huge (%d chars)" % (k, len(x[k]))
    if op == "deep":
        x, k = rng.choice(spots)
        d = rng.choice([64, 1500, 3000])
        x[k] = deep(d, rng.random() < 0.5)
        return b, "%s nested %d deep" % (k, d)
    if op == "unicode":
        strs = [(x, k) for x, k in spots if isinstance(x[k], str)]
        x, k = rng.choice(strs or spots)
        x[k] = rng.choice(UNICODE) + (x[k] if isinstance(x[k], str) and
                                      rng.random() < 0.5 else "")
        return b, "%s unicode %r" % (k, x[k][:12])
    if op == "prompt" and path != CHAT:
        b["prompt"] = rng.choice(["", [""], " ", "<s>", "a", ["a", "b"],
                                  [1, 2], [5], [[1]], [], None, {}, "\0",
                                  "\u00e9", ["", ""], 0])
        return b, "prompt=%s" % json.dumps(b["prompt"])
    if op in ("prompt", "messages"):
        msgs = b.get("messages")
        if path != CHAT or not isinstance(msgs, list) or not msgs:
            b["messages" if path == CHAT else "prompt"] = rng.choice(
                [[], {}, "hi", None, [None], [{}]])
            return b, "messages/prompt replaced"
        m = rng.choice(msgs)
        what = rng.choice(["role", "content", "drop", "many", "replace",
                           "extra"])
        if not isinstance(m, dict):
            what = "replace"
        if what == "role":
            m["role"] = rng.choice(ROLES)
        elif what == "content":
            m["content"] = copy.deepcopy(rng.choice(CONTENTS))
        elif what == "drop" and m:
            del m[rng.choice(list(m))]
        elif what == "many":
            msgs.extend({"role": rng.choice(["user", "assistant"]),
                         "content": rng.choice(PROMPTS)}
                        for _ in range(rng.randint(2, 40)))
        elif what == "replace":
            msgs[msgs.index(m)] = copy.deepcopy(rng.choice([None, "hi", [],
                                                            5, {}]))
        else:
            m[rng.choice(JUNK_KEYS)] = copy.deepcopy(rng.choice(JUNK))
        return b, "message %s" % what
    if op == "root":
        return rng.choice([[], [b], "hi", 5, None, True, deep(10)]), "root"
    # empty: a field as an empty value of its own kind
    x, k = rng.choice(spots)
    v = x[k]
    x[k] = "" if isinstance(v, str) else [] if isinstance(v, list) else \
        {} if isinstance(v, dict) else 0 if isinstance(v, (int, float)) \
        else None
    return b, "%s emptied" % k


def mangle(rng: random.Random, raw: bytes) -> Tuple[bytes, str]:
    """One mutation of the encoded bytes."""
    i = rng.randrange(len(raw) + 1)
    op = rng.choice(["truncate", "delete", "insert", "replace", "utf8",
                     "bom", "append", "wrap", "unquoted"])
    if op == "truncate":
        return raw[:i], "truncated at %d" % i
    if op == "delete":
        return raw[:i] + raw[i + 1:], "byte %d deleted" % i
    pick = rng.choice([b"\xff", b"\0", b'"', b"{", b"}", b",", b":", b"\\",
                       b"[", b"]", b"1", b"-", b" ", b"\n", b"e", b"."])
    if op == "insert":
        return raw[:i] + pick + raw[i:], "%r inserted at %d" % (pick, i)
    if op == "replace":
        return raw[:i] + pick + raw[i + 1:], "byte %d now %r" % (i, pick)
    if op == "utf8":
        bad = rng.choice([b"\xff", b"\xc3", b"\xc3\x28", b"\xed\xa0\x80",
                          b"\xf4\x90\x80\x80", b"\xc0\xaf", b"\xe2\x82"])
        return raw[:i] + bad + raw[i:], "%r inserted at %d" % (bad, i)
    if op == "bom":
        return b"\xef\xbb\xbf" + raw, "BOM"
    if op == "append":
        return raw + rng.choice([b"x", b"}", b" ", b"\n\n", b"{}", b"\0"]), \
            "appended"
    if op == "wrap":
        return b"[" + raw + b"]", "wrapped in a list"
    return b'{"a":\xc3\xa9,' + raw[1:], "an unquoted non-ASCII value"


def mutated(n: int) -> List[Case]:
    """n bodies mutated from valid ones, deterministically; valid results
    that would be long (more tokens, choices or prompt than the sweep
    takes) are drawn again."""
    rng = random.Random(SEED)
    out = []
    while len(out) < n:
        path = rng.choice([OAI, OAI, CHAT, CHAT, NATIVE, NATIVE])
        for _ in range(100):
            body: Any = base(rng, path)
            notes = []
            for _ in range(rng.choice([0, 1, 1, 1, 2, 2, 3])):
                if not isinstance(body, dict):
                    break
                body, what = mutate(rng, path, body)
                notes.append(what)
            raw = encode(body, rng.random() < 0.7)
            if rng.random() < 0.15:
                raw, what = mangle(rng, raw)
                notes.append(what)
            v = judge("POST", path, raw)
            if v.status != 200 or short(v):
                break
        else:
            raise AssertionError("no short body for %s" % path)
        out.append(Case("mutated", "; ".join(notes) or "valid", "POST", path,
                        raw, v))
    return out


# ---- answers ---------------------------------------------------------------


def sse(raw: bytes) -> List[str]:
    """An event stream's data lines."""
    out = []
    for block in raw.decode("utf-8").split("\n\n"):
        if block.strip():
            if not block.startswith("data: "):
                raise ValueError("not an event: %r" % block[:100])
            out.append(block[6:])
    return out


def error_problem(status: int, ctype: Optional[str], body: bytes,
                  want: int) -> Optional[str]:
    """What is wrong with an error answer (None: it is the one shape)."""
    if status != want:
        return "status %d, not %d" % (status, want)
    if want == 415:  # the web UI's page, llama-server's text
        return None if ctype == "text/plain" and b"gzip" in body else \
            "Content-Type %s" % ctype
    if ctype != "application/json":
        return "Content-Type %s" % ctype
    try:
        j = json.loads(body)
        e = j["error"]
        if set(j) != {"error"} or set(e) != {"message", "type", "param",
                                             "code"}:
            return "keys %s / %s" % (sorted(j), sorted(e))
        if not (isinstance(e["message"], str) and e["message"] and
                isinstance(e["code"], str) and e["code"] and
                e["type"] == ("not_found_error" if want == 404 else
                              "invalid_request_error") and
                (e["param"] is None or isinstance(e["param"], str))):
            return "fields %r" % e
    except (ValueError, KeyError, TypeError) as x:
        return "not the error shape: %s" % x
    return None


def bos_text(text: str) -> bool:
    """Whether a greedy text from BOS alone agrees with the model's. Its
    first token is SentencePiece's word " Once", whose space serve sends
    (each token's piece, as llama-server does)."""
    text = text[1:] if text.startswith(" ") else text
    return FROM_BOS.startswith(text) or text.startswith(FROM_BOS)


def ok_problem(c: Case, ctype: Optional[str], body: bytes) -> Optional[str]:
    """What is wrong with a 200 answer (None: well formed)."""
    v = c.want
    try:
        if c.method == "GET":
            path = c.path.split("?")[0]
            if path == "/metrics":
                return None if b"evictd_llama_requests_total" in body else \
                    "no metrics"
            j = json.loads(body)
            if path in ("/health", "/v1/health"):
                return None if j == {"status": "ok"} else "health %r" % j
            if path == "/props":
                return None if j["total_slots"] == NP and \
                    "params" in j["default_generation_settings"] else \
                    "props %r" % j
            if path == "/slots":
                return None if len(j) == NP else "slots %r" % j
            return None if j["object"] == "list" and j["data"] else \
                "models %r" % j
        if v.route == "native-fields":
            # response_fields: the fields asked alone, on the answer or a
            # stream's last event.
            if v.stream:
                return None if ctype == "text/event-stream" and \
                    sse(body) else "stream %r" % body[:200]
            j = json.loads(body)
            return None if ctype == "application/json" and \
                all(type(x) is dict for x in (j if type(j) is list
                                              else [j])) else \
                "answer %r" % j
        if v.route in ("tokenize", "detokenize", "apply-template"):
            j = json.loads(body)
            key, kind = {"tokenize": ("tokens", list),
                         "detokenize": ("content", str),
                         "apply-template": ("prompt", str)}[v.route]
            return None if ctype == "application/json" and \
                set(j) == {key} and type(j[key]) is kind else \
                "%s answered %r" % (v.route, j)
        texts: Dict[int, str] = collections.defaultdict(str)
        ends: Dict[int, str] = {}
        tokens = 0
        if v.stream:
            if ctype != "text/event-stream":
                return "Content-Type %s" % ctype
            data = sse(body)
            if v.route != "native":
                if data[-1] != "[DONE]":
                    return "no [DONE] at the end: %r" % data[-1][:200]
                data = data[:-1]
            for d in data:
                e = json.loads(d)
                if "error" in e:
                    return "error event %r" % e
                if v.route == "native":
                    texts[0] += e["content"]
                    if e["stop"]:
                        ends[0] = e["stop_type"]
                        tokens = e["tokens_predicted"]
                    continue
                for ch in e["choices"]:
                    i = ch["index"]
                    texts[i] += ch["text"] if v.route == "completions" else \
                        (ch["delta"].get("content") or "")
                    if ch["finish_reason"] is not None:
                        if i in ends:
                            return "choice %d ended twice" % i
                        ends[i] = ch["finish_reason"]
                if e.get("usage"):
                    tokens = e["usage"]["completion_tokens"]
        else:
            if ctype != "application/json":
                return "Content-Type %s" % ctype
            j = json.loads(body)
            if v.route == "native":
                # several prompts: a list of answers, each its index's
                if (type(j) is list) != (v.n > 1):
                    return "%d prompts answered %r" % (v.n, body[:200])
                for a in j if type(j) is list else [j]:
                    i = a["index"]
                    texts[i], ends[i] = a["content"], a["stop_type"]
                    tokens += a["tokens_predicted"]
                    if not a["session"].startswith("serve-") or \
                            a["tokens_evaluated"] < 1:
                        return "answer %r" % a
            else:
                if j["object"] != ("chat.completion" if v.route == "chat"
                                   else "text_completion"):
                    return "object %r" % j["object"]
                for ch in j["choices"]:
                    i = ch["index"]
                    texts[i] = ch["text"] if v.route == "completions" else \
                        ch["message"]["content"]
                    ends[i] = ch["finish_reason"]
                tokens = j["usage"]["completion_tokens"]
                if j["usage"]["prompt_tokens"] < 1:
                    return "usage %r" % j["usage"]
        finishes = ("eos", "limit", "word") if v.route == "native" else \
            ("length", "stop")
        if sorted(ends) != list(range(v.n)) or \
                any(f not in finishes for f in ends.values()):
            return "choices ended %r, not %d" % (ends, v.n)
        if not 0 <= tokens <= v.n * v.tokens:
            return "%d tokens for %d choices of at most %d" % (tokens, v.n,
                                                               v.tokens)
        if v.empty and v.greedy and not v.stops:
            for t in texts.values():
                if not bos_text(t):
                    return "greedy from BOS gave %r" % t
    except (ValueError, KeyError, TypeError, IndexError, AttributeError) as x:
        return "malformed answer: %r" % x
    return None


def exchange(addr: str, c: Case) -> Tuple[Optional[int], Optional[str],
                                          bytes]:
    """One request on its own connection: status (None: no answer),
    Content-Type, body."""
    conn = connect(addr, 120)
    try:
        conn.request(c.method, c.path, body=c.raw)
        r = conn.getresponse()
        return r.status, r.getheader("Content-Type"), r.read()
    except (http.client.HTTPException, OSError) as x:
        return None, None, repr(x).encode()
    finally:
        conn.close()


# ---- the streams -----------------------------------------------------------

STORY = ["Once upon a time there", "The little dog ran", "Lily had a",
         "Tim and his mom"]


def stream_specs() -> List[Tuple[str, dict]]:
    g = dict(temperature=0, ignore_eos=True, stream=True)
    return [
        (OAI, dict(prompt=STORY[0], max_tokens=TOKENS, **g)),
        (CHAT, dict(messages=[{"role": "user", "content": STORY[1]}],
                    max_tokens=TOKENS, stream_options={"include_usage":
                                                       True}, **g)),
        (NATIVE, dict(prompt=STORY[2], n_predict=TOKENS, **g)),
        (OAI, dict(prompt=[STORY[3]], max_tokens=TOKENS, seed=1,
                   stream_options={"include_usage": True}, **g)),
    ][:STREAMS]


class Stream(threading.Thread):
    """One long stream, read as it comes; `started` once 20 events came."""

    def __init__(self, addr: str, path: str, body: dict) -> None:
        super().__init__(daemon=True)
        self.addr, self.path, self.body = addr, path, body
        self.started = threading.Event()
        self.status: Optional[int] = None
        self.raw, self.exc, self.ended = b"", None, 0.0
        # How it ends undisturbed: finish, and tokens (-1: not told)
        usage = path == NATIVE or "stream_options" in body
        self.expect = ("limit" if path == NATIVE else "length",
                       TOKENS if usage else -1)

    def run(self) -> None:
        parts = []
        seen = 0
        try:
            c = connect(self.addr, 300)
            c.request("POST", self.path, body=json.dumps(self.body))
            r = c.getresponse()
            self.status = r.status
            while True:
                chunk = r.read1(65536)
                if not chunk:
                    break
                parts.append(chunk)
                seen += chunk.count(b"\n\n")
                if seen >= 20:
                    self.started.set()
            c.close()
        except Exception as x:  # noqa: BLE001: reported by the test
            self.exc = x
        self.ended = time.monotonic()
        self.raw = b"".join(parts)
        self.started.set()

    def outcome(self) -> Tuple[str, str, int, Optional[dict]]:
        """Text, finish, tokens, and the error event if one came."""
        text, finish, tokens = "", "", -1
        data = sse(self.raw)
        for d in data:
            if d == "[DONE]":
                continue
            e = json.loads(d)
            if "error" in e:
                return text, "error", tokens, e
            if self.path == NATIVE:
                text += e["content"]
                if e["stop"]:
                    finish, tokens = e["stop_type"], e["tokens_predicted"]
                continue
            for ch in e["choices"]:
                text += ch["text"] if self.path == OAI else \
                    (ch["delta"].get("content") or "")
                finish = ch["finish_reason"] or finish
            if e.get("usage"):
                tokens = e["usage"]["completion_tokens"]
        if self.path != NATIVE and (not data or data[-1] != "[DONE]"):
            finish += " (no [DONE])"
        return text, finish, tokens, None


def run_streams(addr: str) -> List[Stream]:
    ss = [Stream(addr, p, b) for p, b in stream_specs()]
    for s in ss:
        s.start()
    return ss


class HostileSweep(unittest.TestCase):

    @classmethod
    def setUpClass(cls) -> None:
        paths.require(paths.evictd_llama(), STORIES, error=AssertionError)
        cls.tmp = tempfile.TemporaryDirectory(prefix="evictd-hostile-")
        cls.d = Daemon.started(cls.tmp.name)
        try:
            cls.sv = Serve(cls.tmp.name, cls.d.url, *SETTINGS, model=STORIES)
        except BaseException:
            cls.d.stop()
            cls.tmp.cleanup()
            raise

    @classmethod
    def tearDownClass(cls) -> None:
        rc = cls.sv.stop()
        log = cls.sv.log()
        cls.d.stop()
        cls.tmp.cleanup()
        if rc != 0:
            raise AssertionError("serve exited %s:\n%s" % (rc, log[-4000:]))

    def sweep(self, cases: List[Case]) -> List[Tuple[Case, Optional[int],
                                                     Optional[str]]]:
        """Every case from THREADS threads: (case, status, problem)."""
        out: List[Any] = [None] * len(cases)
        nxt = iter(range(len(cases)))
        lock = threading.Lock()

        def work() -> None:
            while True:
                with lock:
                    i = next(nxt, None)
                if i is None:
                    return
                c = cases[i]
                status, ctype, body = exchange(self.sv.addr, c)
                if status is None:
                    why = "no answer: %s" % body.decode()
                elif status >= 500:
                    why = "%d: %s" % (status, body[:300])
                elif c.want.status == 200:
                    why = ("status %d: %s" % (status, body[:300])
                           if status != 200 else
                           ok_problem(c, ctype, body))
                elif c.method == "HEAD":  # no body
                    why = None if status == c.want.status else \
                        "status %d" % status
                else:
                    why = error_problem(status, ctype, body, c.want.status)
                    if why:
                        why += ": %s" % body[:300]
                out[i] = (c, status, why)

        ws = [threading.Thread(target=work) for _ in range(THREADS)]
        for w in ws:
            w.start()
        for w in ws:
            w.join()
        return out

    def live(self, want: int, secs: float = 10) -> float:
        """evictd's sessions but those serve keeps for conversations
        (parked in a slot, or saved: kept on purpose, with caching on, the
        default), once they are `want` (or after secs)."""
        deadline = time.monotonic() + secs
        while True:
            m = metrics.scrape(self.sv.addr)
            n = metrics.total(self.d.addr, "evictd_sessions") - (
                m["evictd_llama_conversations_parked"] +
                m["evictd_llama_conversations_saved"])
            if n == want or time.monotonic() > deadline:
                return n
            time.sleep(0.05)

    def test_no_input_fails_another_stream(self) -> None:
        """Issue 32: whatever comes in while streams decode (empty prompts
        above all), no stream is failed, nothing gets a 5xx, and every
        session and gauge comes back."""
        say = sys.stderr.write
        cases = routes() + degenerate() + mutated(MUTATED)
        random.Random(SEED).shuffle(cases)
        addr, d = self.sv.addr, self.d
        self.assertEqual(self.live(0), 0)

        # The undisturbed reference.
        t0 = time.monotonic()
        ref = run_streams(addr)
        for s in ref:
            s.join(600)
        t_ref = time.monotonic() - t0
        want = [s.outcome() for s in ref]
        for s, (text, finish, tokens, err) in zip(ref, want):
            self.assertEqual((s.status, s.exc, err), (200, None, None),
                             self.sv.log()[-3000:])
            self.assertEqual((finish, tokens), s.expect)
        self.assertEqual(self.live(0), 0)
        m0 = metrics.scrape(addr)

        # The same streams, and the sweep while they decode.
        t1 = time.monotonic()
        streams = run_streams(addr)
        for s in streams:
            s.started.wait(120)
        t_sweep = time.monotonic()
        results = self.sweep(cases)
        sweep_end = time.monotonic()
        running = all(s.is_alive() for s in streams)
        # Every sweep request's session is gone while the streams go on
        # (told only if they still did when it was read).
        during = self.live(len(streams), 10) if running else None
        still = running and all(s.is_alive() for s in streams)
        for s in streams:
            s.join(600)
        t_streams = max(s.ended for s in streams) - t1
        after = self.live(0)
        deadline = time.monotonic() + 10
        while True:
            m1 = metrics.scrape(addr)
            gauges = (m1["evictd_llama_requests_active"],
                      m1["evictd_llama_sequences_active"],
                      m1["evictd_llama_requests_queued"])
            if gauges == (0, 0, 0) or time.monotonic() > deadline:
                break
            time.sleep(0.05)

        # What it did.
        by = collections.Counter()
        statuses = collections.Counter()
        for c, status, _ in results:
            kind = c.kind if c.want.status != 200 or c.method == "GET" else \
                "%s, valid%s" % (c.kind, ", streamed" if c.want.stream
                                 else "")
            path = c.path.split("?")[0]
            by[(kind, c.method + " " + (path if path in ROUTES else
                                        "(unknown)"), c.want.status)] += 1
            statuses[status] += 1
        sent = sum(len(c.raw or b"") for c in cases)
        say("\nreference: %d streams of %d tokens in %.1f s\n"
            % (len(ref), TOKENS, t_ref))
        say("disturbed: the sweep began %.1f s in, took %.1f s (%d requests,"
            " %d threads, %.1f MB of bodies); the streams took %.1f s\n"
            % (t_sweep - t1, sweep_end - t_sweep, len(cases), THREADS,
               sent / 1e6, t_streams))
        say("requests (kind, route, expected status: count):\n")
        for (kind, route, st), k in sorted(by.items()):
            say("  %-28s %-26s %d: %d\n" % (kind, route, st, k))
        say("statuses seen: %s\n" % ", ".join(
            "%s: %d" % (k, v) for k, v in sorted(statuses.items(),
                                                 key=lambda x: str(x[0]))))
        # The valid completions (tasks; not the tokenizer's or template's
        # answers): /completion's several prompts are a task each.
        valid = sum(c.want.n if c.want.route == "native" else 1
                    for c in cases if c.want.status == 200 and
                    c.want.route in ("chat", "completions", "native",
                                     "native-fields"))
        say("valid completions: %d (%d streamed); requests to refuse: %d; "
            "mutated bodies: %d (%d valid)\n" % (
                valid, sum(1 for c in cases if c.want.status == 200 and
                           c.want.stream),
                sum(1 for c in cases if c.want.status != 200), MUTATED,
                sum(1 for c in cases if c.kind == "mutated" and
                    c.want.status == 200)))
        say("evictd sessions: %s during (after the sweep), %s after; serve "
            "gauges (active, sequences, queued) %s\n" % (during, after,
                                                         gauges))

        failures = []
        for i, (s, (text, finish, tokens, _)) in enumerate(zip(streams,
                                                               want)):
            got = s.outcome() if s.status == 200 and s.raw else \
                ("", "status %s %s" % (s.status, s.exc), -1, None)
            if s.exc is not None or got[3] is not None or \
                    got[:3] != (text, finish, tokens):
                failures.append(
                    "stream %d (%s) ended %r, %d tokens, after %d "
                    "characters, not as undisturbed (%r, %d tokens, %d "
                    "characters)%s: %s" % (
                        i, s.path, got[1], got[2], len(got[0]), finish,
                        tokens, len(text), "" if got[3] else ", text %s" % (
                            "equal" if got[0] == text else "differs"),
                        json.dumps(got[3])[:400] if got[3] else s.exc))
        bad = [(c, st, why) for c, st, why in results if why]
        for c, st, why in bad[:25]:
            failures.append("%s %s (%s; want %d) got %s: %s\n    body %r" % (
                c.method, c.path[:60], c.note, c.want.status, st, why,
                (c.raw or b"")[:200]))
        if len(bad) > 25:
            failures.append("... and %d more requests" % (len(bad) - 25))
        if not running:
            failures.append("a stream ended before the sweep did (it took "
                            "%.1f s): raise HOSTILE_TOKENS" %
                            (sweep_end - t_sweep))
        if still and during != len(streams):
            failures.append("evictd holds %s sessions after the sweep "
                            "beside %d streams (but the conversations serve "
                            "keeps)" % (during, len(streams)))
        if after != 0:
            failures.append("evictd holds %s sessions at the end (but the "
                            "conversations serve keeps)" % after)
        if gauges != (0, 0, 0):
            failures.append("serve's gauges (active, sequences, queued) "
                            "%s at the end" % (gauges,))
        done = {o: m1['evictd_llama_requests_finished_total{outcome="%s"}'
                      % o] -
                m0['evictd_llama_requests_finished_total{outcome="%s"}' % o]
                for o in ("ok", "failed", "cancelled", "rejected")}
        say("serve's finished requests during the sweep: %s\n" % done)
        if done != {"ok": valid + len(streams), "failed": 0, "cancelled": 0,
                    "rejected": 0}:
            failures.append("serve finished %s, not %d ok" % (
                done, valid + len(streams)))
        if failures:
            failures.append("serve's log, its end:\n" + self.sv.log()[-3000:])
        self.assertFalse(failures, "\n".join(failures))


if __name__ == "__main__":
    unittest.main()

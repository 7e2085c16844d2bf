"""test_hostile's oracle: what evictd-llama serve answers a request, 200
(and the answer's shape) or its 4xx, written from serve's rules
(deploy/llama/README.md; serve's routes in serve/api/, shared/fields.c,
render.c, chain.c, and upstream/'s up_chat_apply and up_sampler_new,
which follow llama-server's oaicompat_chat_params_parse
and completion schema), never from what the binary answers. Every rule a
body of the sweep can meet is here; what the sweep never sends (valid
tool calls, a grammar it has not listed) is refused loudly rather than
guessed."""

import json
import math
import re
import struct
import sys
from typing import Any, Dict, NamedTuple, Optional, Tuple

NP = 12  # the -np test_hostile's serve runs with
NMAX = 32768  # serve's --n-predict-max default
BODY_MAX = 1 << 20  # serve's request body limit
# stories260K's vocabulary (ids 0 to 511; test_routes reads it from
# /tokenize) and its BOS; the most n_probs serve reports (tasks.h).
VOCAB, BOS, PROBS_MAX = 512, 1, 100

# json.loads recurses: jansson's 2048 levels must not be refused here.
sys.setrecursionlimit(max(sys.getrecursionlimit(), 20000))

class Verdict(NamedTuple):
    status: int
    route: str = ""
    stream: bool = False
    n: int = 1
    tokens: int = 0  # the most a choice may generate
    prompt: int = 0  # bytes of the prompt's text
    greedy: bool = False
    stops: int = 0
    empty: bool = False  # the prompt is the BOS alone


class Bad(Exception):
    pass


NOPE = object()


def _no_constant(name: str) -> Any:
    raise ValueError(name)


def _ok_str(s: str) -> bool:
    return "\0" not in s and not any("\ud800" <= ch <= "\udfff" for ch in s)


def parse(raw: bytes) -> Any:
    """The body as jansson's json_loadb reads it (serve's flags: none), or
    NOPE where jansson refuses it: Python's strict parser, less what
    jansson does not take (NaN and Infinity, integers beyond 64 bits, reals
    that overflow, \\u0000, lone surrogates, nesting deeper than 2048
    values)."""
    try:
        v = json.loads(raw.decode("utf-8"), parse_constant=_no_constant)
    except (ValueError, RecursionError):
        return NOPE
    stack = [(v, 1)]
    while stack:
        x, depth = stack.pop()
        if depth > 2048:
            return NOPE
        if isinstance(x, dict):
            for k, y in x.items():
                if not _ok_str(k):
                    return NOPE
                stack.append((y, depth + 1))
        elif isinstance(x, list):
            stack.extend((y, depth + 1) for y in x)
        elif type(x) is int and not -(1 << 63) <= x < (1 << 63):
            return NOPE
        elif type(x) is float and not math.isfinite(x):
            return NOPE
        elif type(x) is str and not _ok_str(x):
            return NOPE
    return v


def f_int(b: dict, name: str, lo: int, hi: int, default: int) -> int:
    v = b.get(name)
    if v is None:
        return default
    if type(v) is not int or not lo <= v <= hi:
        raise Bad(name)
    return v


def f_num(b: dict, name: str, lo: float, hi: float,
          default: Optional[float]) -> Optional[float]:
    v = b.get(name)
    if v is None:
        return default
    if type(v) not in (int, float) or not lo <= v <= hi:
        raise Bad(name)
    return v


def f_bool(b: dict, name: str, default: bool) -> bool:
    v = b.get(name)
    if v is None:
        return default
    if type(v) is not bool:
        raise Bad(name)
    return v


def f_str(b: dict, name: str) -> str:
    v = b.get(name)
    if v is None:
        return ""
    if type(v) is not str:
        raise Bad(name)
    return v


def f_stop(b: dict, name: str, most: int) -> int:
    v = b.get(name)
    if v is None:
        return 0
    if type(v) is str:
        v = [v]
    if type(v) is not list or len(v) > most:
        raise Bad(name)
    for s in v:
        if type(s) is not str or not 1 <= len(s.encode()) <= 256:
            raise Bad(name)
    return len(v)


def f_n_predict(b: dict, most: int, default: int) -> int:
    """The length, under llama-server's three names: the first there and
    not null counts; -1 is until an end token or --n-predict-max."""
    for name in ("n_predict", "max_completion_tokens", "max_tokens"):
        if b.get(name) is not None:
            return most if b[name] == -1 and type(b[name]) is int else \
                f_int(b, name, 1, most, default)
    return default


def f32(x: float) -> float:
    """x as C++'s static_cast<float> makes it (too large: infinite)."""
    try:
        return struct.unpack("f", struct.pack("f", x))[0]
    except OverflowError:
        return math.copysign(math.inf, x)


def neutral(v: Any, same: float, text: Optional[str]) -> bool:
    """Whether a value asks for nothing (fields.c's neutral)."""
    if v is None or v is False:
        return True
    if type(v) in (int, float):
        return v == same
    if type(v) is str:
        return v == "" or v == text
    if type(v) is list:
        return not v
    if type(v) is dict:
        return not v or (text is not None and len(v) == 1 and
                         v.get("type") == text)
    return False


def unhonoured(b: dict, names: Dict[str, float]) -> None:
    for name, same in names.items():
        if not neutral(b.get(name), same, None):
            raise Bad(name)


# Fields that would change the answer and that serve does not honour
# (openai.c's and native.c's lists): refused unless neutral (the number
# given, null, false, empty).
OPENAI_UNHONOURED = {"functions": 0, "echo": 0, "best_of": 1, "suffix": 0,
                     "audio": 0, "t_max_predict_ms": 0, "n_indent": 0,
                     "lora": 0}
NATIVE_UNHONOURED = {"t_max_predict_ms": 0, "n_indent": 0, "lora": 0,
                     "image_data": 0, "multimodal_data": 0,
                     "n_cmpl": 1, "n": 1}

# llama-server's sampler fields as serve's sampler (upstream.h's
# up_sampler_new) reads them, each a number: (whole, lo, hi, clamped):
# out of [lo, hi] clamped into it where llama-server clamps, refused where
# it refuses; a whole number's field refuses a fraction.
BIG = (1 << 31) - 1
NUMBERS_OF_SAMPLER = {
    "top_k": (True, 0, BIG, True), "top_p": (False, 0, 1, True),
    "min_p": (False, 0, 1, True), "top_n_sigma": (False, -math.inf,
                                                  math.inf, True),
    "xtc_probability": (False, 0, 1, True),
    "xtc_threshold": (False, 0, 1, True),
    "typical_p": (False, -math.inf, math.inf, True),
    "temperature": (False, 0, math.inf, True),
    "dynatemp_range": (False, -math.inf, math.inf, True),
    "dynatemp_exponent": (False, -math.inf, math.inf, True),
    "repeat_last_n": (True, 0, BIG, False),
    "repeat_penalty": (False, -math.inf, math.inf, True),
    "frequency_penalty": (False, -math.inf, math.inf, True),
    "presence_penalty": (False, -math.inf, math.inf, True),
    "dry_multiplier": (False, -math.inf, math.inf, True),
    "dry_base": (False, -math.inf, math.inf, True),
    "dry_allowed_length": (True, 0, BIG, False),
    "dry_penalty_last_n": (True, 0, BIG, False),
    "mirostat": (True, 0, 2, True),
    "mirostat_tau": (False, -math.inf, math.inf, True),
    "mirostat_eta": (False, -math.inf, math.inf, True),
    "adaptive_target": (False, -math.inf, 1, True),
    "adaptive_decay": (False, 0, 0.99, False),
    "min_keep": (True, 0, BIG, False), "n_probs": (True, 0, BIG, False)}
BOOLS_OF_SAMPLER = ("ignore_eos", "post_sampling_probs", "grammar_lazy")
# A chat's template answer sets these, over the request's own.
FORMAT_OWNS = ("grammar_lazy", "grammar_triggers", "preserved_tokens",
               "generation_prompt")
# Fields after which greedy need not be the model's argmax.
NOT_ARGMAX = set(NUMBERS_OF_SAMPLER) - {"top_k", "top_p", "min_p",
                                        "temperature", "min_keep",
                                        "n_probs"} | {
    "logit_bias", "grammar", "json_schema", "response_format",
    "samplers", "dry_sequence_breakers"}
# Grammars the sweep sends, and whether llama.cpp parses them.
GRAMMARS = {'root ::= "a"': True, 'root ::= [a-z ]+': True,
            "junk ::=": False, "root ::= (": False}


def strtoll(key: str) -> Optional[int]:
    """A key of logit_bias read as C's strtoll reads it, whole (its id),
    or None (a text)."""
    m = re.match(r"[ \t\n\v\f\r]*([+-]?[0-9]+)\Z", key)
    if not key or not m:
        return None
    return max(-(1 << 63), min((1 << 63) - 1, int(m.group(1))))


def logit_bias(v: Any) -> None:
    """[[token, bias], ...] (an id of the vocabulary or a text) or
    {"id or text": bias}, each bias a number or false."""
    def bias(x: Any) -> None:
        if type(x) not in (int, float) and x is not False:
            raise Bad("logit_bias")

    if type(v) is list:
        for el in v:
            if type(el) is not list or len(el) != 2:
                raise Bad("logit_bias")
            bias(el[1])
            if type(el[0]) is int:
                if not 0 <= el[0] < VOCAB:
                    raise Bad("logit_bias")
            elif type(el[0]) is not str:
                raise Bad("logit_bias")
    elif type(v) is dict:
        for k, x in v.items():
            bias(x)
            i = strtoll(k)
            if i is not None and not 0 <= i < VOCAB:
                raise Bad("logit_bias")
    else:
        raise Bad("logit_bias")


def sampler(p: dict) -> None:
    """The sampler's own checks of its parameters p (the request's fields
    but those that are no sampler's, the chat format's over them)."""
    for name, (whole, lo, hi, clamp) in NUMBERS_OF_SAMPLER.items():
        v = p.get(name)
        if v is None:
            continue
        if type(v) not in (int, float) or (whole and v != math.floor(v)):
            raise Bad(name)
        if not lo <= v <= hi and not clamp:
            raise Bad(name)
    for name in BOOLS_OF_SAMPLER:
        f_bool(p, name, False)
    for name in ("grammar", "grammar_type", "generation_prompt"):
        f_str(p, name)
    penalty = f32(p.get("repeat_penalty", 1))
    if not 0 < penalty < math.inf or not math.isfinite(f32(1 / penalty)):
        raise Bad("repeat_penalty")  # as common_sampler_init wants it
    for name in ("frequency_penalty", "presence_penalty"):
        if not math.isfinite(f32(p.get(name, 0))):
            raise Bad(name)
    seed = p.get("seed")
    if seed is not None and type(seed) is not int:
        raise Bad("seed")
    n_probs = p.get("n_probs")
    if type(n_probs) is int and not 0 <= n_probs <= PROBS_MAX:
        raise Bad("n_probs")
    v = p.get("dry_sequence_breakers")
    if v is not None and (type(v) is not list or not v or
                          any(type(x) is not str for x in v)):
        raise Bad("dry_sequence_breakers")
    if p.get("logit_bias") is not None:
        logit_bias(p["logit_bias"])
    g = p.get("grammar")
    if g and not GRAMMARS[g]:
        raise Bad("grammar")
    if p.get("grammar_lazy") and g:
        raise Bad("grammar_lazy")  # no triggers: the sweep sends none


# The request's fields that are no sampler's (sampling.c's not_sampling).
NOT_SAMPLING = ("messages", "prompt", "input", "tools", "tool_choice",
                "stream", "stream_options", "model", "n", "stop",
                "max_tokens", "max_completion_tokens", "max_output_tokens",
                "n_predict", "logprobs", "top_logprobs", "response_format",
                "cache_prompt", "parallel_tool_calls", "user", "metadata",
                "store")


def sampler_params(b: dict, chat: bool) -> dict:
    return {k: v for k, v in b.items() if k not in NOT_SAMPLING and
            v is not None and not (chat and k in FORMAT_OWNS)}


def prompt_any(p: Any) -> Tuple[int, bool]:
    """A legacy prompt's size and whether it is the BOS alone (fields.c's
    field_prompt_any): a string, a list of token ids of the vocabulary
    (the BOS the client's to put), or a list of one of either."""
    if type(p) is list and len(p) == 1 and type(p[0]) in (str, list):
        p = p[0]
    if type(p) is str:
        return len(p.encode()), p == ""
    if type(p) is not list or not p or \
            any(type(x) is not int or not 0 <= x < VOCAB for x in p):
        raise Bad("prompt")
    return len(p), p == [BOS]


def _no_ids(p: Any) -> bool:
    """A non-empty list without token ids: a list of prompts (fields.c's
    field_prompt_list)."""
    return type(p) is list and len(p) > 0 and \
        not any(type(x) is int for x in p)


def native_one(p: Any) -> Tuple[int, bool]:
    """One of /completion's prompts (fields.c's field_prompt_of): its size
    and whether it is the BOS alone."""
    if type(p) is dict:
        if not neutral(p.get("multimodal_data"), 0, None):
            raise Bad("prompt")
        p = p.get("prompt_string")
        if type(p) is not str and type(p) is not list:
            raise Bad("prompt")
    elif _no_ids(p):
        raise Bad("prompt")
    if type(p) is str:
        return len(p.encode()), p == ""
    if type(p) is not list or not p or any(
            type(x) is not str and (type(x) is not int or
                                    not 0 <= x < VOCAB) for x in p):
        raise Bad("prompt")
    size = sum(len(x.encode()) if type(x) is str else 1 for x in p)
    if size == 0 and type(p[0]) is not str:
        raise Bad("prompt")  # no tokens
    return size, p == [BOS] or p == [""]


def native_prompts(p: Any, queue: int) -> Tuple[int, int, bool]:
    """/completion's prompt: how many (a list of several, each its own
    answer), their largest size, whether the first is the BOS alone."""
    if _no_ids(p) and len(p) > 1:
        if len(p) > queue:
            raise Bad("prompt")
        sizes = [native_one(x) for x in p]
        return len(p), max(s for s, _ in sizes), sizes[0][1]
    if _no_ids(p):
        p = p[0]
    size, empty = native_one(p)
    return 1, size, empty


def response_fields(b: dict) -> bool:
    """native.c's response_fields: whether the answer keeps some fields
    alone."""
    v = b.get("response_fields")
    if v is None:
        return False
    if type(v) is not list or len(v) > 256 or \
            any(type(x) is not str or not x for x in v):
        raise Bad("response_fields")
    return len(v) > 0


CHAT_ROLES = ("system", "developer", "user", "assistant", "tool")


def chat_bytes(b: dict) -> Tuple[int, Optional[dict]]:
    """The chat's prompt size (about: ChatML's markers per message) and
    the JSON schema the template holds the answer to (a non-empty one
    only: its grammar is the template's), or Bad (chat.c, upstream.cpp's
    up_chat_apply: oaicompat_chat_params_parse's rules, then common's
    reading of the messages)."""
    msgs = b.get("messages")
    if type(msgs) is not list or not 1 <= len(msgs) <= 4096:
        raise Bad("messages")
    for m in msgs:
        if (m.get("role") if type(m) is dict else None) not in CHAT_ROLES:
            raise Bad("messages")
    tools = b.get("tools")
    if tools is not None and type(tools) is not list:
        raise Bad("tools")
    choice = b.get("tool_choice")
    if choice is not None and choice not in ("auto", "none", "required"):
        raise Bad("tool_choice")  # the sweep names no function
    if tools:
        raise AssertionError("the oracle knows no tools")
    schema = b.get("json_schema")
    grammar = f_str(b, "grammar")
    if schema is not None and grammar:
        raise Bad("json_schema")
    rf = b.get("response_format")
    if rf is not None:
        if type(rf) is not dict:
            raise Bad("response_format")
        kind = f_str(rf, "type")
        if kind == "json_object":
            if "schema" in rf or schema is None:
                schema = rf.get("schema", {})
        elif kind == "json_schema":
            w = rf.get("json_schema")
            schema = w.get("schema", {}) if type(w) is dict else {}
        elif kind not in ("", "text"):
            raise Bad("response_format")
    if schema is not None and type(schema) is not dict:
        raise Bad("json_schema")
    size = 22
    for m in msgs:
        if "content" not in m and (m["role"] != "assistant" or
                                   "tool_calls" not in m):
            raise Bad("messages")
        c = m.get("content")
        if c is None:
            c = ""
        elif type(c) is list:
            texts = []
            for part in c:
                if type(part) is not dict or f_str(part, "type") != "text" \
                        or type(part.get("text")) is not str:
                    raise Bad("messages")
                texts.append(part["text"])
            c = "\n".join(texts)
        elif type(c) is not str:
            raise Bad("messages")
        if m.get("tool_calls") not in (None, [], {}):
            raise Bad("messages")  # the sweep makes no valid tool call
        for name in ("reasoning_content", "name", "tool_call_id"):
            if name in m and type(m[name]) is not str:
                raise Bad("messages")
        size += 24 + len(m["role"]) + len(c.encode())
    if len(msgs) > 1 and msgs[-1]["role"] == msgs[-2]["role"] == \
            "assistant":
        raise Bad("messages")  # two assistant messages at the end
    if b.get("logprobs") is not True and b.get("top_logprobs") is not None:
        raise Bad("top_logprobs")
    if b.get("reasoning_format") is not None and b["reasoning_format"] not \
            in ("none", "auto", "deepseek", "deepseek-legacy"):
        raise Bad("reasoning_format")
    f_str(b, "reasoning_effort")
    for name in ("parallel_tool_calls", "add_generation_prompt"):
        f_bool(b, name, False)
    return size, schema if schema else None


def completion_format(b: dict, p: dict) -> None:
    """response_format where the chat format made no grammar of it
    (openai.c's completion_format)."""
    rf = b.get("response_format")
    kind = rf.get("type") if type(rf) is dict else None
    if rf is None or kind == "text":
        return
    if kind == "json_object":
        schema = rf.get("schema")
        if schema is not None and type(schema) is not dict:
            raise Bad("response_format")
    elif kind == "json_schema":
        w = rf.get("json_schema")
        if type(w) is not dict or type(w.get("schema")) is not dict:
            raise Bad("response_format")
    else:
        raise Bad("response_format")
    if type(p.get("grammar")) is str and p["grammar"]:
        raise Bad("response_format")
    p["json_schema"] = {}


def judge_openai(b: dict, chat: bool) -> Verdict:
    model = b.get("model")
    if model is not None and type(model) is not str:
        raise Bad("model")
    tokens = f_n_predict(b, NMAX, NMAX if chat else 16)
    temp = f_num(b, "temperature", 0, 2, None)
    f_num(b, "top_p", 0, 1, 1)
    n = f_int(b, "n", 1, NP, 1)
    f_int(b, "seed", -(1 << 63), (1 << 63) - 1, 0)
    stops = f_stop(b, "stop", 4)
    f_bool(b, "ignore_eos", False)
    f_bool(b, "cache_prompt", True)
    stream = f_bool(b, "stream", False)
    unhonoured(b, OPENAI_UNHONOURED)
    if chat:
        lp = f_bool(b, "logprobs", False)
        if f_int(b, "top_logprobs", 0, 20, 0) > 0 and not lp:
            raise Bad("top_logprobs")
    else:
        f_int(b, "logprobs", 0, 5, 0)
    opts = b.get("stream_options")
    if opts is not None:
        if type(opts) is not dict:
            raise Bad("stream_options")
        f_bool(opts, "include_usage", False)
    p = sampler_params(b, chat)
    p["n_probs"] = 0  # serve's own, from logprobs: the request's goes
    if chat:
        (size, own), empty = chat_bytes(b), False
        if own and "grammar" in p:
            del p["grammar"]  # the template's grammar goes first
    else:
        (size, empty), own = prompt_any(b.get("prompt")), None
    if not own:
        completion_format(b, p)
    sampler(p)
    greedy = temp is not None and f32(temp) <= 0 and not NOT_ARGMAX & set(b)
    return Verdict(200, "chat" if chat else "completions", stream, n, tokens,
                   size, greedy, stops, empty)


def judge_native(b: dict, queue: int = 1024) -> Verdict:
    """queue: serve's --queue (test_hostile's), the most prompts a
    request may hold."""
    p = b.get("prompt")
    several = _no_ids(p) and len(p) > 1
    if several and len(p) > queue:
        raise Bad("prompt")
    if several and f_bool(b, "stream", False):
        raise Bad("stream")
    tokens = f_n_predict(b, NMAX, min(NMAX, 128))
    stream = f_bool(b, "stream", False)
    stops = f_stop(b, "stop", 16)
    f_bool(b, "ignore_eos", False)
    f_bool(b, "cache_prompt", True)
    f_bool(b, "return_tokens", False)
    unhonoured(b, NATIVE_UNHONOURED)
    fields = response_fields(b)
    k, size, empty = native_prompts(p, queue)
    p = sampler_params(b, False)
    if b.get("n_probs") is None and b.get("logprobs") is not None:
        p["n_probs"] = f_int(b, "logprobs", 0, PROBS_MAX, 0)
    sampler(p)
    temp = b.get("temperature")
    greedy = temp is not None and f32(temp) <= 0 and not NOT_ARGMAX & set(b)
    return Verdict(200, "native-fields" if fields else "native", stream, k,
                   tokens, size, greedy, stops, empty)


def judge_tokenize(b: dict) -> Verdict:
    for name in ("add_special", "parse_special", "with_pieces"):
        f_bool(b, name, False)
    c = b.get("content")
    if c is not None and type(c) is not str and (
            type(c) is not list or
            any(type(x) is not str and (type(x) is not int or
                                        not 0 <= x < VOCAB) for x in c)):
        raise Bad("content")
    return Verdict(200, "tokenize")


def judge_detokenize(b: dict) -> Verdict:
    t = b.get("tokens")
    if t is not None and (type(t) is not list or any(
            type(x) is not int or not 0 <= x < VOCAB for x in t)):
        raise Bad("tokens")
    return Verdict(200, "detokenize")


def judge_template(b: dict) -> Verdict:
    f_bool(b, "stream", False)
    f_bool(b, "logprobs", False)
    if b.get("logprobs") and b.get("top_logprobs") is not None:
        f_int(b, "top_logprobs", 0, BIG, 0)
    chat_bytes(b)
    return Verdict(200, "apply-template")


# Every route (serve/api/'s tables): its method, and how its body is
# judged (None: no body read).
ROUTES = {"/": ("GET", "page"),
          "/v1/chat/completions": ("POST", "chat"),
          "/chat/completions": ("POST", "chat"),
          "/v1/completions": ("POST", "completions"),
          "/v1/models": ("GET", None), "/models": ("GET", None),
          "/v1/responses": ("POST", "responses"),
          "/responses": ("POST", "responses"),
          "/completion": ("POST", "native"),
          "/completions": ("POST", "native"),
          "/tokenize": ("POST", "tokenize"),
          "/detokenize": ("POST", "detokenize"),
          "/apply-template": ("POST", "apply-template"),
          "/props": ("GET", None), "/slots": ("GET", None),
          "/health": ("GET", None), "/v1/health": ("GET", None),
          "/metrics": ("GET", None)}
JUDGES = {"chat": lambda b: judge_openai(b, True),
          "completions": lambda b: judge_openai(b, False),
          "native": judge_native, "tokenize": judge_tokenize,
          "detokenize": judge_detokenize, "apply-template": judge_template}


def judge(method: str, path: str, raw: Optional[bytes]) -> Verdict:
    """What serve answers: 200 and the request's shape, or its 4xx."""
    path = path.split("?", 1)[0]
    if path not in ROUTES:
        return Verdict(404)
    want, kind = ROUTES[path]
    if method != want:
        return Verdict(405)
    if kind == "page":  # the web UI's page: llama-server's 415 unless
        return Verdict(415)  # the client takes gzip (http.client does not)
    if method == "GET":
        return Verdict(200, path)
    if raw is not None and len(raw) > BODY_MAX:
        return Verdict(413)
    b = parse(raw or b"")
    if type(b) is not dict:
        return Verdict(400)
    try:
        return JUDGES[kind](b)
    except Bad:
        return Verdict(400)

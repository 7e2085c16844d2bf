"""evictd-llama serve as a drop-in for llama-server: its paths without
/v1 (/chat/completions, /models, /responses, /v1/health; /completions is
llama-server's own /completion), its tokenizer and template routes
(/tokenize, /detokenize, /apply-template), what its web UI reads (/props,
/slots), CORS (--cors-origins and its flags, the preflight answered before
the API key), the API key as llama-server takes it (X-Api-Key too), and
llama-server's metric names in /metrics. The real daemon and real servers
on stories260K ($STORIES_GGUF: llama.cpp's SentencePiece vocabulary, with
BOS and byte tokens); every answer is checked against serve's contract,
deploy/llama/openapi.yaml, by a validator of the JSON Schema subset the
document uses (below), as tests/contract/serve_contract.mjs checks
test_openai's. The expectations follow llama-server's own tests
(tools/server/tests/unit: test_tokenize, test_security's CORS cases,
test_template, test_metrics)."""

import http.client
import json
import os
import re
import socket
import subprocess
import threading
import time
import unittest
from typing import Any, Dict, List, Optional, Tuple

from support import paths
from support.daemon import Daemon, Scratch
from support.http import connect
from support.metrics import promtool_findings
from support.openapi import DOC, Answer, call, contract, problems
from support.serve import Serve, stop_cleanly

STORIES = paths.stories_gguf()
WINDOW = ["--budget", "64", "--sinks", "4", "--lookahead", "16", "--exact"]
KEY = "sk-routes-test-key"
BOS = 1  # stories260K's
LLAMACPP = ["llamacpp:prompt_tokens_total",
            "llamacpp:prompt_tokens_cached_total",
            "llamacpp:prompt_seconds_total",
            "llamacpp:tokens_predicted_total",
            "llamacpp:tokens_predicted_seconds_total",
            "llamacpp:n_decode_total", "llamacpp:n_tokens_max",
            "llamacpp:spec_decode_num_draft_tokens_total",
            "llamacpp:spec_decode_num_accepted_tokens_total",
            "llamacpp:spec_decode_num_drafts_total",
            "llamacpp:prompt_tokens_seconds",
            "llamacpp:predicted_tokens_seconds",
            "llamacpp:requests_processing", "llamacpp:requests_deferred",
            "llamacpp:n_busy_slots_per_decode"]

# ---- the servers -----------------------------------------------------------

SERVERS: Dict[str, Serve] = {}
EVD: Optional[Daemon] = None
TMP: Optional[Scratch] = None


def setUpModule() -> None:
    global EVD, TMP
    paths.require(paths.evictd_llama(), STORIES)
    TMP = Scratch("evictd-routes-")
    EVD = TMP.daemon
    flags = {
        # conversations kept (the default), two slots
        "main": ["-np", "2"],
        # the key, CORS for local origins only
        "keyed": ["--api-key", KEY, "--cors-origins", "localhost"],
        # a list of origins, no credentials
        "list": ["--cors-origins", "http://a.example, http://b.example",
                 "--no-cors-credentials"],
        # one origin, the preflight's methods and headers given
        "one": ["--cors-origins", "http://one.example", "--cors-methods",
                "GET, POST", "--cors-headers", "Authorization, Content-Type"],
        # any origin without credentials: *
        "star": ["--no-cors-credentials"],
        # fresh counters for /metrics and /slots
        "metrics": ["-np", "2"],
        "slots": ["-np", "2", "--queue", "4"],
    }
    try:
        for name, args in flags.items():
            SERVERS[name] = Serve(TMP.name, EVD.url, *WINDOW, *args,
                                  model=STORIES)
    except BaseException:
        tearDownModule()
        raise


def tearDownModule() -> None:
    try:
        stop_cleanly(SERVERS.values())
    finally:
        if TMP is not None:
            TMP.close()


def addr(name: str) -> str:
    return SERVERS[name].addr


def metrics(name: str) -> Dict[str, float]:
    a = call(addr(name), "GET", "/metrics")
    out = {}
    for line in a.body.decode().splitlines():
        if line and not line.startswith("#"):
            k, v = line.rsplit(" ", 1)
            out[k] = float(v)
    return out


class Held:
    """A long streamed /completion, read as it comes on a thread of its
    own, until closed (its client then gone: the engine ends it)."""

    def __init__(self, where: str, n: int = 30000) -> None:
        self.c = connect(where)
        self.c.request("POST", "/completion", body=json.dumps(
            {"prompt": "Once upon a time", "n_predict": n,
             "ignore_eos": True, "stream": True}))
        self.r = self.c.getresponse()
        assert self.r.status == 200
        self.t = threading.Thread(target=self._read, daemon=True)
        self.t.start()

    def _read(self) -> None:
        try:
            while self.r.read(4096):
                pass
        except Exception:  # noqa: BLE001 (closed under it: any of several)
            pass

    def close(self) -> None:
        try:
            self.c.sock.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass
        self.c.close()
        self.t.join(10)


def until(what, secs: float = 20) -> Any:
    deadline = time.monotonic() + secs
    while True:
        v = what()
        if v or time.monotonic() > deadline:
            return v
        time.sleep(0.05)


# ---- the tests -------------------------------------------------------------


class Paths(unittest.TestCase):
    """llama-server's paths: the same handlers as /v1's, and /completions
    llama-server's /completion."""

    def test_aliases_answer_as_their_routes(self) -> None:
        m = addr("main")
        chat = {"messages": [{"role": "user", "content": "Tell me a story"}],
                "max_tokens": 24, "temperature": 0, "cache_prompt": False}
        a = call(m, "POST", "/v1/chat/completions", chat, check=False)
        b = call(m, "POST", "/chat/completions", chat, check=False)
        self.assertEqual((a.status, b.status), (200, 200))
        self.assertEqual(a.json()["choices"], b.json()["choices"])
        self.assertEqual(b.json()["object"], "chat.completion")
        # llama-server's b<build>-<commit> (its tests read the "b"), then
        # serve's name; /props's build_info begins the same.
        self.assertRegex(b.json()["system_fingerprint"],
                         r"^b0-([0-9a-f]{8}|unknown)-evictd-llama-")
        self.assertEqual(call(m, "GET", "/props").json()["build_info"]
                         .split(";")[0], b.json()["system_fingerprint"])
        # temperature 0: /completion's default is llama-server's 0.8, a
        # random seed each request.
        native = {"prompt": "Once upon a time", "n_predict": 20,
                  "temperature": 0, "cache_prompt": False}
        a = call(m, "POST", "/completion", native)
        b = call(m, "POST", "/completions", native)
        self.assertEqual(a.json()["content"], b.json()["content"])
        # llama-server's /completions is its own, not OpenAI's
        self.assertNotIn("choices", b.json())
        a, b = call(m, "GET", "/v1/models"), call(m, "GET", "/models")
        self.assertEqual(a.json(), b.json())
        r = call(m, "POST", "/responses", {"input": "Hi.",
                                           "max_output_tokens": 3},
                 check=False)
        self.assertEqual((r.status, r.json()["object"]), (200, "response"))
        self.assertEqual(call(m, "GET", "/v1/health").json(),
                         call(m, "GET", "/health").json())
        # Each alias takes its route's method alone.
        for method, path in (("GET", "/chat/completions"),
                             ("GET", "/completions"), ("POST", "/models"),
                             ("GET", "/responses"), ("POST", "/v1/health"),
                             ("GET", "/tokenize"), ("GET", "/detokenize"),
                             ("GET", "/apply-template"), ("POST", "/props"),
                             ("POST", "/slots"), ("DELETE", "/slots")):
            r = call(m, method, path, {} if method == "POST" else None)
            self.assertEqual(r.status, 405, path)
            self.assertEqual(r.json()["error"]["code"], "method_not_allowed")
        r = call(m, "GET", "/v1/tokenize")
        self.assertEqual(r.status, 404)
        self.assertIn("POST /tokenize", r.json()["error"]["message"])

    def test_completion_prompts(self) -> None:
        # llama-server's /completion prompts (test_completion's
        # test_completion_with_tokens_input, test_json_prompt_no_mtmd):
        # several in one request each answered, ids and strings mixed,
        # the object {"prompt_string"}; the answer's prompt is its tokens'
        # text.
        m = addr("main")
        text = "Once upon a time"
        ids = call(m, "POST", "/tokenize", {"content": text,
                                            "add_special": True}
                   ).json()["tokens"]
        base = {"n_predict": 6, "temperature": 0, "cache_prompt": False}
        one = call(m, "POST", "/completion", dict(base, prompt=text)).json()
        self.assertEqual(one["prompt"], "<s> " + text)
        self.assertEqual(one["index"], 0)
        for p in ([ids, text], [{"prompt_string": text}, ids],
                  [text, {"prompt_string": [ids[0], text]}]):
            a = call(m, "POST", "/completion", dict(base, prompt=p))
            self.assertEqual(a.status, 200, (p, a.body))
            got = a.json()
            self.assertEqual([g["index"] for g in got], [0, 1])
            self.assertEqual([g["content"] for g in got],
                             [one["content"]] * 2, p)
        # mixed: ids as given, each string tokenized where it stands (the
        # BOS only before a string that comes first)
        a = call(m, "POST", "/completion", dict(base, prompt=[
            ids[0], text, ids[1]])).json()
        self.assertEqual(a["tokens_evaluated"], len(ids) + 1)
        for p in ({"prompt_string": text}, [{"prompt_string": text}]):
            self.assertEqual(call(m, "POST", "/completion", dict(
                base, prompt=p)).json()["content"], one["content"])
        # refusals name the field, and the item of several
        for p, says in (([text, [ids[0], -1]], "item 1"),
                        ([text, ["a"]], "item 1"),
                        ([[]], "must be"),
                        ({"prompt_string": text,
                          "multimodal_data": ["AAAA"]}, "multimodal_data"),
                        ({"text": text}, "prompt_string")):
            r = call(m, "POST", "/completion", dict(base, prompt=p))
            self.assertEqual((r.status, r.json()["error"]["param"]),
                             (400, "prompt"), p)
            self.assertIn(says, r.json()["error"]["message"], p)
        r = call(m, "POST", "/completion", dict(base, prompt=[text, text],
                                                stream=True))
        self.assertEqual((r.status, r.json()["error"]["param"]),
                         (400, "stream"))
        # OpenAI's route takes one prompt, as before
        r = call(m, "POST", "/v1/completions", {"prompt": [text, text],
                                                "max_tokens": 2})
        self.assertEqual((r.status, r.json()["error"]["param"]),
                         (400, "prompt"))

    def test_response_fields(self) -> None:
        # llama-server's test_completion_response_fields: the fields asked
        # alone, each under its path; an empty list the whole answer.
        m = addr("main")
        body = {"prompt": "Once", "n_predict": 5, "cache_prompt": False}
        a = call(m, "POST", "/completion", dict(body, response_fields=[
            "content", "generation_settings/n_predict", "prompt", "nope",
            "content/nope"])).json()
        self.assertEqual(set(a), {"content", "generation_settings/n_predict",
                                  "prompt"})
        self.assertEqual(a["generation_settings/n_predict"], 5)
        self.assertEqual(a["prompt"], "<s> Once")
        a = call(m, "POST", "/completion", dict(body, response_fields=[]))
        self.assertIn("generation_settings", a.json())
        # with several prompts, each answer's
        a = call(m, "POST", "/completion", dict(body, prompt=["a", "b"],
                                                response_fields=["index"]))
        self.assertEqual(a.json(), [{"index": 0}, {"index": 1}])
        for v in ("content", [5], [""]):
            r = call(m, "POST", "/completion", dict(body, response_fields=v))
            self.assertEqual((r.status, r.json()["error"]["param"]),
                             (400, "response_fields"), v)

    def test_chat_input_tokens(self) -> None:
        # llama-server's: the prompt a chat request decodes, counted as
        # the chat's usage counts it; nothing decoded.
        m = addr("main")
        chat = {"messages": [{"role": "system", "content": "Book"},
                             {"role": "user", "content": "What is the best "
                              "book"}], "max_tokens": 1}
        used = call(m, "POST", "/v1/chat/completions", chat).json()
        for path in ("/v1/chat/completions/input_tokens",
                     "/chat/completions/input_tokens"):
            a = call(m, "POST", path, chat).json()
            self.assertEqual(a, {"object": "response.input_tokens",
                                 "input_tokens":
                                 used["usage"]["prompt_tokens"]})
            r = call(m, "POST", path, {"messages": []})
            self.assertEqual((r.status, r.json()["error"]["param"]),
                             (400, "messages"))
            self.assertEqual(call(m, "GET", path).status, 405)

    def test_progress_and_timings_per_token(self) -> None:
        # llama-server's return_progress and timings_per_token (its
        # test_return_progress, test_chat_completion_with_timings_per_token,
        # test_metrics_timings_on_prompt_progress): in a stream, a chunk
        # of prompt_progress when the prompt starts and after each pass of
        # it (--lookahead 16 here), and timings in every chunk after a
        # choice's first.
        m = addr("main")
        text = "Once upon a time there was a little girl who " * 3
        routes = (("/completion", {"prompt": text, "n_predict": 3}),
                  ("/v1/completions", {"prompt": text, "max_tokens": 3}),
                  ("/v1/chat/completions", {"messages": [
                      {"role": "user", "content": text}], "max_tokens": 3,
                      "stream_options": {"include_usage": True}}))
        for path, body in routes:
            body = dict(body, stream=True, cache_prompt=False,
                        return_progress=True, timings_per_token=True)
            a = call(m, "POST", path, body)
            self.assertEqual(a.status, 200, a.body)
            got = [json.loads(b[6:]) for b in a.body.decode().split("\n\n")
                   if b.startswith("data: {")]
            prog = [g["prompt_progress"] for g in got
                    if "prompt_progress" in g]
            total = prog[0]["total"]
            self.assertGreater(total, 33, path)
            self.assertEqual(prog[0]["processed"], prog[0]["cache"])
            self.assertEqual([p["processed"] for p in prog],
                             [0] + list(range(17, total, 16)) + [total],
                             path)
            self.assertTrue(all(p["total"] == total for p in prog))
            self.assertEqual(got[0]["timings"]["prompt_n"], 0)
            self.assertEqual(got[0]["timings"]["prompt_ms"], 0)
            rest = got[len(prog):]
            if path == "/v1/chat/completions":  # the role's chunk: none
                self.assertNotIn("timings", rest[0])
                rest = rest[1:]
            self.assertTrue(all("timings" in g for g in rest), (path, rest))
            self.assertEqual(rest[-1]["timings"]["predicted_n"], 3)
            # not streamed: nothing more, as llama-server's
            r = call(m, "POST", path, dict(body, stream=False))
            self.assertEqual(r.status, 200)
            self.assertNotIn("prompt_progress", r.json())
            for field in ("return_progress", "timings_per_token"):
                r = call(m, "POST", path, dict(body, **{field: "yes"}))
                self.assertEqual((r.status, r.json()["error"]["param"]),
                                 (400, field), (path, field))
        # the Responses API's: response.in_progress again with the
        # progress, timings on the deltas and the last event
        a = call(m, "POST", "/v1/responses", {
            "input": text, "max_output_tokens": 3, "stream": True,
            "return_progress": True, "timings_per_token": True},
            check=False)  # typed events: checked one by one here
        got = [json.loads(b.split("data: ", 1)[1])
               for b in a.body.decode().split("\n\n") if "data: " in b]
        for g in got:
            self.assertEqual(problems(DOC["components"]["schemas"]
                                      ["ResponseStreamEvent"], g), [], g)
        prog = [g for g in got if "prompt_progress" in g]
        self.assertTrue(all(g["type"] == "response.in_progress"
                            for g in prog))
        self.assertEqual(prog[-1]["prompt_progress"]["processed"],
                         prog[-1]["prompt_progress"]["total"])
        self.assertGreater(len(prog), 2)
        self.assertTrue(all("timings" in g for g in got
                            if g["type"] == "response.output_text.delta"))
        self.assertIn("timings", got[-1])


class Tokenizer(unittest.TestCase):

    def tok(self, body: Any, status: int = 200) -> Any:
        a = call(addr("main"), "POST", "/tokenize", body)
        self.assertEqual(a.status, status, a.body)
        return a.json()

    def detok(self, body: Any, status: int = 200) -> Any:
        a = call(addr("main"), "POST", "/detokenize", body)
        self.assertEqual(a.status, status, a.body)
        return a.json()

    def test_tokenize_detokenize(self) -> None:
        # test_tokenize.py's: the text back from its tokens
        content = "What is the capital of France ?"
        toks = self.tok({"content": content})["tokens"]
        self.assertGreater(len(toks), 5)
        self.assertTrue(all(isinstance(t, int) for t in toks))
        self.assertNotEqual(toks[0], BOS)
        self.assertEqual(self.detok({"tokens": toks})["content"].strip(),
                         content)
        with_bos = self.tok({"content": content, "add_special": True})
        self.assertEqual(with_bos["tokens"], [BOS] + toks)
        # the BOS's own text comes back, as llama-server's does
        self.assertEqual(self.detok({"tokens": [BOS] + toks})["content"],
                         "<s>" + self.detok({"tokens": toks})["content"])

    def test_with_pieces(self) -> None:
        content = "This is a test string with unicode 媽 and emoji 🤗"
        toks = self.tok({"content": content, "with_pieces": True})["tokens"]
        whole = b""
        split = 0
        for t in toks:
            self.assertGreater(t["id"], 0)
            self.assertGreater(len(t["piece"]), 0)
            if isinstance(t["piece"], str):
                whole += t["piece"].encode()
            else:  # a byte token of a character: not UTF-8 alone
                split += 1
                whole += bytes(t["piece"])
        self.assertGreater(split, 0)
        self.assertEqual(whole.decode().strip(), content)
        ids = self.tok({"content": content})["tokens"]
        self.assertEqual([t["id"] for t in toks], ids)

    def test_special_and_mixed(self) -> None:
        self.assertEqual(self.tok({"content": "<s>"})["tokens"], [BOS])
        self.assertNotIn(BOS, self.tok({"content": "<s>",
                                        "parse_special": False})["tokens"])
        hi = self.tok({"content": "Hi"})["tokens"]
        mixed = self.tok({"content": ["Hi", 5, 6], "add_special": True})
        self.assertEqual(mixed["tokens"], [BOS] + hi + [5, 6])
        # the BOS only before a first string, as tokenize_mixed does
        mixed = self.tok({"content": [5, "Hi"], "add_special": True})
        self.assertEqual(mixed["tokens"][0], 5)
        self.assertNotIn(BOS, mixed["tokens"])
        self.assertEqual(self.tok({})["tokens"], [])
        self.assertEqual(self.tok({"content": ""})["tokens"], [])
        self.assertEqual(self.tok({"content": "", "add_special": True})
                         ["tokens"], [BOS])

    def test_detokenize_bytes(self) -> None:
        # a byte token alone is no character: U+FFFD, as llama-server's
        # JSON writer makes it
        pieces = self.tok({"content": "媽", "with_pieces": True})["tokens"]
        lone = [t["id"] for t in pieces if isinstance(t["piece"], list)]
        self.assertTrue(lone)
        self.assertIn("\ufffd", self.detok({"tokens": lone[:1]})["content"])
        self.assertEqual(self.detok({"tokens": [t["id"] for t in pieces]})
                         ["content"].strip(), "媽")
        self.assertEqual(self.detok({})["content"], "")
        self.assertEqual(self.detok({"tokens": []})["content"], "")

    def test_refused(self) -> None:
        for body, param in (({"content": 5}, "content"),
                            ({"content": [1.5]}, "content"),
                            ({"content": [True]}, "content"),
                            ({"content": [99999]}, "content"),
                            ({"content": [-1]}, "content"),
                            ({"content": "x", "add_special": "yes"},
                             "add_special"),
                            ({"content": "x", "with_pieces": 1},
                             "with_pieces"),
                            ({"content": "x", "parse_special": None}, None)):
            if param is None:  # null: the default
                self.tok(body)
                continue
            e = call(addr("main"), "POST", "/tokenize", body)
            self.assertEqual((e.status, e.json()["error"]["param"]),
                             (400, param), body)
        for body in ({"tokens": "1 2"}, {"tokens": [1, "2"]},
                     {"tokens": [99999]}, {"tokens": [-3]},
                     {"tokens": [1.0]}):
            e = call(addr("main"), "POST", "/detokenize", body)
            self.assertEqual((e.status, e.json()["error"]["param"]),
                             (400, "tokens"), body)
        for path in ("/tokenize", "/detokenize", "/apply-template"):
            e = call(addr("main"), "POST", path, raw=b"{nope",
                     check=False)
            contract("POST", path, None, e)
            self.assertEqual((e.status, e.json()["error"]["code"]),
                             (400, "invalid_json"))


class Template(unittest.TestCase):

    def test_apply_template(self) -> None:
        m = addr("main")
        msgs = [{"role": "system", "content": "Book"},
                {"role": "user", "content": "What is the best book"},
                {"role": "assistant", "content": "It is"},
                {"role": "user", "content": "Go on"}]
        p = call(m, "POST", "/apply-template", {"messages": msgs}).json()
        # stories260K has no template: ChatML, as llama-server falls back
        self.assertEqual(p["prompt"], "".join(
            "<|im_start|>%s\n%s<|im_end|>\n" % (x["role"], x["content"])
            for x in msgs) + "<|im_start|>assistant\n")
        p2 = call(m, "POST", "/apply-template",
                  {"messages": msgs, "add_generation_prompt": False}).json()
        self.assertFalse(p2["prompt"].endswith("assistant\n"))
        # the prompt a chat decodes: its tokens are usage.prompt_tokens
        toks = call(m, "POST", "/tokenize", {"content": p["prompt"],
                                             "add_special": True}).json()
        chat = call(m, "POST", "/v1/chat/completions",
                    {"messages": msgs, "max_tokens": 2,
                     "cache_prompt": False}, check=False).json()
        self.assertEqual(chat["usage"]["prompt_tokens"],
                         len(toks["tokens"]))
        for body in ({"messages": []}, {"messages": "hi"}, {},
                     {"messages": [{"role": "wizard", "content": "x"}]}):
            e = call(m, "POST", "/apply-template", body)
            self.assertEqual((e.status, e.json()["error"]["param"]),
                             (400, "messages"), body)


class Props(unittest.TestCase):

    def test_props(self) -> None:
        p = call(addr("main"), "GET", "/props").json()
        self.assertEqual(p["total_slots"], 2)
        self.assertEqual(p["model_path"], STORIES)
        self.assertEqual(p["model_alias"], os.path.basename(STORIES))
        self.assertEqual(p["default_generation_settings"]["n_ctx"], 256)
        self.assertEqual(p["window"], {"budget": 64, "sinks": 4,
                                       "lookahead": 16})
        params = p["default_generation_settings"]["params"]
        # llama-server's sampler defaults (common_params_sampling's)
        self.assertAlmostEqual(params["temperature"], 0.8, places=6)
        self.assertEqual((params["top_k"], params["seed"]), (40, 0xFFFFFFFF))
        self.assertAlmostEqual(params["top_p"], 0.95, places=6)
        self.assertIn("temperature", params["samplers"])
        self.assertEqual(params["max_tokens"], 32768)
        self.assertIn("<|im_start|>", p["chat_template"])
        self.assertTrue(p["chat_template_caps"]["supports_system_role"])
        self.assertEqual((p["bos_token"], p["eos_token"]), ("<s>", "</s>"))
        # llama-server's b<build>-<commit>, then serve's name.
        self.assertRegex(p["build_info"],
                         r"^b0-([0-9a-f]{8}|unknown)-evictd-llama-")
        # then the window, the line the web UI shows of the server's own
        self.assertTrue(p["build_info"].endswith(
            "; window: budget 64, sinks 4 (the oldest position evicted "
            "first)"), p["build_info"])
        self.assertEqual((p["ui"], p["ui_settings"]), (True, {}))
        self.assertEqual(p["modalities"], {"vision": False, "video": False,
                                           "audio": False})


class Slots(unittest.TestCase):

    def test_slots(self) -> None:
        s = addr("slots")
        slots = call(s, "GET", "/slots").json()
        self.assertEqual([x["id"] for x in slots], [0, 1])
        self.assertEqual([x["state"] for x in slots], ["idle", "idle"])
        self.assertTrue(all(x["window"] == {"budget": 64, "sinks": 4,
                                            "lookahead": 16} and
                            x["n_ctx"] == 256 for x in slots))
        # A request that ends leaves its conversation parked.
        out = call(s, "POST", "/completion",
                   {"prompt": "Once upon a time", "n_predict": 100,
                    "ignore_eos": True}).json()
        slots = call(s, "GET", "/slots").json()
        parked = [x for x in slots if x["state"] == "parked"]
        self.assertEqual(len(parked), 1, slots)
        p = parked[0]
        self.assertEqual(p["session"], out["session"])
        self.assertFalse(p["is_processing"])
        # the last token drawn is shown, never decoded
        self.assertEqual(p["n"], out["tokens_evaluated"] + 100 - 1)
        self.assertEqual(p["held"], 64)
        self.assertEqual(p["evicted"], p["n"] - 64)
        self.assertNotIn("task", p)
        # Two decoding: both processing, none idle.
        one = Held(s)
        try:
            def processing():
                got = call(s, "GET", "/slots").json()
                busy = [x for x in got if x["is_processing"]]
                return busy if busy and busy[0]["next_token"][0][
                    "n_decoded"] > 0 else None
            busy = until(processing)
            self.assertTrue(busy)
            b = busy[0]
            self.assertEqual(b["state"], "processing")
            self.assertTrue(b["task"].startswith("serve-"))
            self.assertEqual(b["choice"], 0)
            self.assertGreater(b["n_prompt_tokens"], 1)
            nt = b["next_token"][0]
            self.assertTrue(nt["has_next_token"])
            self.assertEqual(nt["n_remain"] + nt["n_decoded"], 30000)
            ok = call(s, "GET", "/slots?fail_on_no_slot=1")
            self.assertEqual(ok.status, 200)
            two = Held(s)
            three = None
            try:
                self.assertTrue(until(lambda: all(
                    x["is_processing"]
                    for x in call(s, "GET", "/slots").json())))
                full = call(s, "GET", "/slots?fail_on_no_slot=1")
                self.assertEqual((full.status, full.json()["error"]["code"]),
                                 (503, "no_slot_available"))
                self.assertEqual(full.header("Retry-After"), "1")
                self.assertEqual(call(s, "GET", "/slots?fail_on_no_slot=")
                                 .status, 200)
                m = metrics("slots")
                self.assertEqual(m["llamacpp:requests_processing"], 2)
                # a third waits: llama-server's "deferred"
                three = Held(s, 5)
                self.assertTrue(until(lambda: metrics("slots")[
                    "llamacpp:requests_deferred"] == 1))
            finally:
                two.close()
                if three is not None:
                    three.close()
        finally:
            one.close()
        # Their clients gone, their slots are given back (the third, once
        # it decoded, parked).
        self.assertTrue(until(lambda: not any(
            x["is_processing"] for x in call(s, "GET", "/slots").json())))


class Metrics(unittest.TestCase):

    def test_llamacpp_families(self) -> None:
        m0 = addr("metrics")
        a = call(m0, "POST", "/completion",
                 {"prompt": "Once upon a time", "n_predict": 40,
                  "ignore_eos": True}).json()
        n1 = a["tokens_evaluated"]
        # The answer can come before its last iteration is counted: scrape
        # until it is (each scrape empties the rates' bucket: their sum
        # over the scrapes is what the iterations did).
        scrapes: List[Dict[str, float]] = []

        def counted(tokens: int) -> Dict[str, float]:
            scrapes.append(metrics("metrics"))
            m = scrapes[-1]
            return m if m["llamacpp:tokens_predicted_total"] == tokens \
                else {}
        m = until(lambda: counted(40))
        self.assertTrue(m, scrapes[-1])
        for name in LLAMACPP:
            self.assertIn(name, m)
        self.assertEqual(m["llamacpp:prompt_tokens_total"], n1)
        # one pass for the prompt (shorter than the lookahead), then one
        # per token but the first (drawn from the prompt's logits)
        self.assertEqual(m["llamacpp:n_decode_total"], 40)
        self.assertEqual(m["llamacpp:n_decode_total"],
                         m["evictd_llama_iterations_total"])
        self.assertEqual(m["llamacpp:n_busy_slots_per_decode"], 1)
        self.assertEqual(m["llamacpp:n_tokens_max"], n1 + 40 - 1)
        self.assertEqual(m["llamacpp:prompt_tokens_cached_total"], 0)
        for k in ("prompt_seconds_total", "tokens_predicted_seconds_total"):
            self.assertGreater(m["llamacpp:" + k], 0, k)
        for k in ("prompt_tokens_seconds", "predicted_tokens_seconds"):
            self.assertGreater(sum(x["llamacpp:" + k] for x in scrapes), 0,
                               k)
        for k in ("requests_processing", "requests_deferred",
                  "spec_decode_num_draft_tokens_total",
                  "spec_decode_num_accepted_tokens_total",
                  "spec_decode_num_drafts_total"):
            self.assertEqual(m["llamacpp:" + k], 0, k)
        # The rates are since the last scrape, as llama-server's: nothing
        # decoded since, none.
        again = metrics("metrics")
        self.assertEqual(again["llamacpp:predicted_tokens_seconds"], 0)
        self.assertEqual(again["llamacpp:prompt_tokens_seconds"], 0)
        # A turn that continues the conversation: the kept tokens are
        # cached, only the new ones decoded.
        b = call(m0, "POST", "/completion",
                 {"prompt": "Once upon a time" + a["content"] + " Then",
                  "n_predict": 5, "ignore_eos": True}).json()
        m2 = until(lambda: counted(45))
        self.assertTrue(m2, scrapes[-1])
        cached = m2["llamacpp:prompt_tokens_cached_total"]
        decoded = m2["llamacpp:prompt_tokens_total"] - n1
        self.assertGreater(cached, 0)
        self.assertEqual(cached + decoded, b["tokens_evaluated"])
        self.assertEqual(cached, m2["evictd_llama_prompt_tokens_reused_total"])

    def test_promtool(self) -> None:
        """promtool finds nothing in serve's families; of llama-server's,
        only what it finds in llama-server's own: their colons (legal in
        names, which its lint reserves for recording rules), and
        n_tokens_max a counter whose name has no _total (llama-server's
        type, which its test_metrics asserts)."""
        call(addr("metrics"), "POST", "/completion",
             {"prompt": "Once", "n_predict": 3})
        text = call(addr("metrics"), "GET", "/metrics").body
        self.assertIn(b"# TYPE llamacpp:n_tokens_max counter\n", text)
        findings = promtool_findings(text)
        colon = [f for f in findings
                 if re.fullmatch(r"llamacpp:\w+ metric names should not "
                                 r"contain ':'", f)]
        total = [f for f in findings if f.startswith(
            "llamacpp:n_tokens_max counter metrics should have")]
        self.assertEqual(len(total), 1, findings)
        self.assertEqual(sorted(findings), sorted(colon + total))
        self.assertEqual(sorted(f.split()[0] for f in colon),
                         sorted(LLAMACPP))

    def test_tokens_counted_before_the_answer(self) -> None:
        """A task's tokens are in /metrics when its client has the
        answer: one scrape right after each, no waiting (a scrape could
        miss the last token, llama.cpp's
        test_metrics_predicted_total_matches_requests once saw 20 of
        21). After test_llamacpp_families, on the same server."""
        m0 = metrics("metrics")
        drawn = 0
        for n in (21, 1, 7, 13):
            a = call(addr("metrics"), "POST", "/completion",
                     {"prompt": "Once upon a time", "n_predict": n,
                      "ignore_eos": True}).json()
            drawn += a["tokens_predicted"]
            m = metrics("metrics")
            for k in ("llamacpp:tokens_predicted_total",
                      "evictd_llama_tokens_predicted_total"):
                self.assertEqual(m[k] - m0[k], drawn, (k, n))


class Cors(unittest.TestCase):
    """test_security.py's cases, and what llama-server's flags say."""

    def preflight(self, where: str, path: str, origin: Optional[str]
                  ) -> Answer:
        h = {"Access-Control-Request-Method": "POST",
             "Access-Control-Request-Headers": "Authorization"}
        if origin is not None:
            h["Origin"] = origin
        a = call(addr(where), "OPTIONS", path, headers=h)
        self.assertEqual((a.status, a.body), (200, b""))
        return a

    def test_default_any_origin_with_credentials(self) -> None:
        for origin in ("localhost", "web.mydomain.fr", "origin"):
            a = self.preflight("main", "/completions", origin)
            self.assertEqual(a.header("Access-Control-Allow-Origin"), origin)
            self.assertEqual(a.header("Access-Control-Allow-Credentials"),
                             "true")
            self.assertEqual(a.header("Access-Control-Allow-Methods"),
                             "GET, POST, DELETE, OPTIONS")
            self.assertEqual(a.header("Access-Control-Allow-Headers"), "*")
            self.assertEqual(a.header("Vary"), "Origin")
        # any path: the preflight answers before any route
        self.preflight("main", "/nowhere", "http://x.example")
        # every answer says it: JSON, errors, a stream
        o = {"Origin": "http://web.example"}
        for method, path, body in (("GET", "/health", None),
                                   ("GET", "/props", None),
                                   ("GET", "/nowhere", None),
                                   ("POST", "/props", {}),
                                   ("POST", "/tokenize", {"content": 1}),
                                   ("GET", "/metrics", None),
                                   ("POST", "/completion",
                                    {"prompt": "Once", "n_predict": 3,
                                     "stream": True})):
            a = call(addr("main"), method, path, body, headers=o)
            self.assertEqual(a.header("Access-Control-Allow-Origin"),
                             "http://web.example", path)
            self.assertEqual(a.header("Access-Control-Allow-Credentials"),
                             "true", path)
        # no Origin, none sent back
        a = call(addr("main"), "GET", "/health")
        self.assertIsNone(a.header("Access-Control-Allow-Origin"))

    def test_localhost_and_the_key(self) -> None:
        for origin in ("http://localhost", "http://localhost:8080",
                       "http://127.0.0.1", "http://127.0.0.1:3000",
                       "http://[::1]", "http://[::1]:3000",
                       "https://localhost"):
            a = self.preflight("keyed", "/completions", origin)
            self.assertEqual(a.header("Access-Control-Allow-Origin"), origin)
        for origin in ("http://web.mydomain.fr", "http://evil.com",
                       "http://notlocalhost", "http://localhost.evil.com",
                       "localhost", "http://localhost:", "ftp://localhost",
                       "http://127.0.0.1.evil.com", None):
            a = self.preflight("keyed", "/completions", origin)
            self.assertIsNone(a.header("Access-Control-Allow-Origin"),
                              origin)
        # The preflight wants no key; every other route but /health does,
        # and its 401 still says the origin.
        k = addr("keyed")
        local = {"Origin": "http://localhost:5173"}
        r = call(k, "GET", "/props", headers=local)
        self.assertEqual((r.status, r.json()["error"]["type"]),
                         (401, "authentication_error"))
        self.assertEqual(r.header("Access-Control-Allow-Origin"),
                         "http://localhost:5173")
        for h in ({"Authorization": "Bearer " + KEY},
                  {"Authorization": KEY}, {"X-Api-Key": KEY}):
            self.assertEqual(call(k, "GET", "/props", headers=h).status,
                             200, h)
        for h in ({"Authorization": "Bearer nope"}, {"X-Api-Key": "nope"},
                  {"Authorization": "Bearer nope", "X-Api-Key": KEY},
                  {"Authorization": "Basic " + KEY}):
            self.assertEqual(call(k, "POST", "/completions",
                                  {"prompt": "x"}, headers=h).status,
                             401, h)
        r = call(k, "POST", "/completions", {"prompt": "I believe",
                                             "n_predict": 4},
                 headers={"Authorization": "Bearer " + KEY})
        self.assertIn("content", r.json())
        for path in ("/health", "/v1/health"):
            self.assertEqual(call(k, "GET", path).status, 200)
        for path in ("/slots", "/metrics", "/models", "/tokenize"):
            self.assertEqual(call(k, "POST" if path == "/tokenize" else
                                  "GET", path, {} if path == "/tokenize"
                                  else None).status, 401, path)

    def test_a_list_without_credentials(self) -> None:
        for origin in ("http://a.example", "http://b.example"):
            a = self.preflight("list", "/v1/completions", origin)
            self.assertEqual(a.header("Access-Control-Allow-Origin"), origin)
            self.assertEqual(a.header("Access-Control-Allow-Credentials"),
                             "false")
            r = call(addr("list"), "GET", "/health",
                     headers={"Origin": origin})
            self.assertEqual(r.header("Access-Control-Allow-Origin"), origin)
            self.assertIsNone(r.header("Access-Control-Allow-Credentials"))
            self.assertEqual(r.header("Vary"), "Origin")
        for origin in ("http://c.example", "http://a.example:80",
                       "a.example", "http://a.example, http://b.example"):
            a = self.preflight("list", "/v1/completions", origin)
            self.assertIsNone(a.header("Access-Control-Allow-Origin"))

    def test_one_origin(self) -> None:
        # llama-server sends the one origin given, whatever the request's
        for origin in ("http://one.example", "http://else.example", None):
            a = self.preflight("one", "/chat/completions", origin)
            self.assertEqual(a.header("Access-Control-Allow-Origin"),
                             "http://one.example")
            self.assertEqual(a.header("Access-Control-Allow-Methods"),
                             "GET, POST")
            self.assertEqual(a.header("Access-Control-Allow-Headers"),
                             "Authorization, Content-Type")
            self.assertEqual(a.header("Access-Control-Allow-Credentials"),
                             "true")
            self.assertIsNone(a.header("Vary"))
        r = call(addr("one"), "GET", "/models")
        self.assertEqual(r.header("Access-Control-Allow-Origin"),
                         "http://one.example")

    def test_star_without_credentials(self) -> None:
        for origin in ("http://x.example", None):
            a = self.preflight("star", "/props", origin)
            self.assertEqual(a.header("Access-Control-Allow-Origin"), "*")
            self.assertEqual(a.header("Access-Control-Allow-Credentials"),
                             "false")
            r = call(addr("star"), "GET", "/props",
                     headers={"Origin": origin} if origin else {})
            self.assertEqual(r.header("Access-Control-Allow-Origin"), "*")
            self.assertIsNone(r.header("Access-Control-Allow-Credentials"))


if __name__ == "__main__":
    unittest.main()

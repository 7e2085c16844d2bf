"""evictd-llama serve's Anthropic Messages API (POST /v1/messages and POST
/v1/messages/count_tokens) end to end: the real daemon and real servers on
ephemeral loopback ports, spoken to over HTTP and by npm's
@anthropic-ai/sdk (tests/llamacpp/anthropic, pinned by its lock file,
installed there by `npm ci`: make e2e-llamacpp does).

The model is stories260K ($STORIES_GGUF): as it is (no chat template:
ChatML), and as a copy (llama.cpp's gguf-py) whose metadata has a
tool-calling chat template, Cohere's Command R+ from llama.cpp's own
models/templates, under whose grammar even this model calls a tool when
tool_choice asks for one; the copy also names the model's story separator
(BOS) as its end token, so that a story ends the turn (stories260K never
draws EOS). The expectations are llama-server's
(tools/server/tests/unit/test_compat_anthropic.py) and Anthropic's: the
answer's and the events' shapes, stop reasons, usage, tool_use blocks,
count_tokens, and every error in Anthropic's shape."""

import copy
import http.client
import json
import os
import re
import subprocess
import sys
import threading
import time
import unittest
from typing import Any, Dict, List, Optional, Tuple

from support import metrics, paths
from support.daemon import Daemon, Scratch
from support.http import connect
from support.serve import Serve, stop_cleanly

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = paths.REPO
STORIES = paths.stories_gguf()
NODE_DIR = os.path.join(HERE, "anthropic")
# A window that holds the conversations these tests continue (a request's
# prompt and answer), so that the next request reads them from the cache;
# the tool template's prompts (some 1,500 tokens) go in chunks of 256.
WINDOW = ["--budget", "256", "--sinks", "4", "--lookahead", "64"]
TOOLS_WINDOW = ["--budget", "256", "--sinks", "4", "--lookahead", "256"]
KEY = "sk-ant-evictd-test"
TEMPLATE = "CohereForAI-c4ai-command-r-plus-tool_use"
# A template with thinking (its enable_thinking, reasoning_content shown).
THINK_TEMPLATE = "Qwen-Qwen3-0.6B"

WEATHER = {"name": "get_weather", "description": "The weather of a city",
           "input_schema": {"type": "object",
                            "properties": {"city": {"type": "string"}},
                            "required": ["city"]}}
ASK = [{"role": "user", "content": "Tell me a story."}]

TMP: Optional[Scratch] = None
EVD: Optional[Daemon] = None
SERVERS: Dict[str, Serve] = {}


def with_template(src: str, dst: str, template: str) -> None:
    """dst: src with `template` as its chat template and BOS as its end
    token, every other key and tensor as src has them."""
    gguf = paths.import_gguf()
    import numpy as np
    r = gguf.GGUFReader(src)
    w = gguf.GGUFWriter(dst, r.fields["general.architecture"].contents())
    bos = r.fields["tokenizer.ggml.bos_token_id"].contents()
    for key, f in r.fields.items():
        if key.startswith("GGUF.") or key in ("general.architecture",
                                              "tokenizer.chat_template"):
            continue
        sub = f.types[-1] if f.types[0] == gguf.GGUFValueType.ARRAY else None
        value = bos if key == "tokenizer.ggml.eos_token_id" else f.contents()
        w.add_key_value(key, value, f.types[0], sub)
    w.add_chat_template(template)
    for t in r.tensors:
        w.add_tensor(t.name, np.array(t.data), raw_dtype=t.tensor_type)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()


def setUpModule() -> None:
    global TMP, EVD
    paths.require(paths.evictd_llama(), STORIES)
    TMP = Scratch("evictd-anthropic-")
    tools = os.path.join(TMP.name, "stories-tools.gguf")
    with open(os.path.join(paths.llama_tree(), "models", "templates",
                           TEMPLATE + ".jinja")) as f:
        with_template(STORIES, tools, f.read())
    think = os.path.join(TMP.name, "stories-think.gguf")
    with open(os.path.join(paths.llama_tree(), "models", "templates",
                           THINK_TEMPLATE + ".jinja")) as f:
        with_template(STORIES, think, f.read())
    EVD = TMP.daemon
    try:
        for name, model, args in (
                ("plain", STORIES, WINDOW + ["-np", "4"]),
                ("tools", tools, TOOLS_WINDOW + ["-np", "2"]),
                ("think", think, TOOLS_WINDOW + ["-np", "1"]),
                ("keyed", STORIES, WINDOW + ["--api-key", KEY]),
                ("busy", STORIES, WINDOW + ["--parallel", "1", "--queue",
                                            "1"])):
            SERVERS[name] = Serve(TMP.name, EVD.url, *args, model=model)
    except BaseException:
        tearDownModule()
        raise


def tearDownModule() -> None:
    try:
        stop_cleanly(SERVERS.values())
    finally:
        SERVERS.clear()
        if TMP is not None:
            TMP.close()


# The exchanges a test keeps for the contract's check (Contract).
RECORD: Optional[List[Dict[str, Any]]] = None


def post(server: str, path: str, body: Any = None, raw: Optional[bytes] =
         None, headers: Optional[Dict[str, str]] = None,
         method: str = "POST") -> Tuple[int, Dict[str, str], bytes]:
    # A long timeout: the machines these run on may be shared and slow.
    c = connect(SERVERS[server].addr, timeout=600)
    data = raw if raw is not None else (
        None if body is None else json.dumps(body).encode())
    c.request(method, path, body=data, headers=headers or {})
    r = c.getresponse()
    out = (r.status, {k.lower(): v for k, v in r.getheaders()}, r.read())
    c.close()
    if RECORD is not None:
        kind = out[1].get("content-type", "")
        x = dict(method=method, path=path, request=body, status=out[0],
                 type=kind)
        if kind == "text/event-stream":
            x["events"] = frames(out[2])
        else:
            x["body"] = json.loads(out[2])
        RECORD.append(x)
    return out


def message(server: str, **body: Any) -> Dict[str, Any]:
    body.setdefault("model", "claude-any")
    status, _, out = post(server, "/v1/messages", body)
    assert status == 200, (status, out)
    return json.loads(out)


def frames(text: bytes) -> List[Dict[str, Any]]:
    """A typed event stream: each frame `event: TYPE` + `data: JSON`, TYPE
    the data's type."""
    out = []
    assert text.endswith(b"\n\n"), text[-200:]
    for block in text.decode().split("\n\n")[:-1]:
        m = re.fullmatch(r"event: ([a-z_]+)\ndata: (.*)", block)
        assert m, block
        data = json.loads(m.group(2))
        assert data["type"] == m.group(1), block
        out.append(data)
    return out


def count(server: str, messages: List[Any], **body: Any) -> int:
    """count_tokens' input_tokens for these messages."""
    status, _, out = post(server, "/v1/messages/count_tokens",
                          dict(body, model="m", messages=messages))
    assert status == 200, (status, out)
    return json.loads(out)["input_tokens"]


def stream(server: str, **body: Any) -> List[Dict[str, Any]]:
    body.setdefault("model", "claude-any")
    status, headers, out = post(server, "/v1/messages",
                                dict(body, stream=True))
    assert status == 200, (status, out)
    assert headers["content-type"] == "text/event-stream"
    return frames(out)


def streamed(events: List[Dict[str, Any]]) -> Dict[str, Any]:
    """The message the events make, as Anthropic's clients accumulate it;
    checks their order: message_start, then blocks one at a time, each
    started, given deltas of its own kind and stopped, with indices from 0,
    then message_delta and message_stop."""
    assert events[0]["type"] == "message_start", events[0]
    msg = dict(events[0]["message"])
    assert msg["content"] == [] and msg["stop_reason"] is None
    assert events[-2]["type"] == "message_delta", events[-2]
    assert events[-1] == {"type": "message_stop"}, events[-1]
    content: List[Dict[str, Any]] = []
    json_of: Dict[int, str] = {}
    open_at: Optional[int] = None
    for e in events[1:-2]:
        if e["type"] == "content_block_start":
            assert open_at is None and e["index"] == len(content), e
            open_at = e["index"]
            content.append(dict(e["content_block"]))
            json_of[open_at] = ""
        elif e["type"] == "content_block_delta":
            assert e["index"] == open_at, e
            block, d = content[open_at], e["delta"]
            if block["type"] == "text":
                assert d["type"] == "text_delta", e
                block["text"] += d["text"]
            else:
                assert block["type"] == "tool_use" and \
                    d["type"] == "input_json_delta", e
                json_of[open_at] += d["partial_json"]
        else:
            assert e == {"type": "content_block_stop", "index": open_at}, e
            if content[open_at]["type"] == "tool_use":
                # A call that max_tokens cut is left as the JSON it has.
                try:
                    content[open_at]["input"] = json.loads(
                        json_of[open_at] or "{}")
                except ValueError:
                    content[open_at]["input"] = json_of[open_at]
            open_at = None
    assert open_at is None
    delta = events[-2]
    assert set(delta) == {"type", "delta", "usage"}, delta
    msg.update(delta["delta"], content=content)
    msg["usage"] = dict(msg["usage"], **delta["usage"])
    return msg


def anthropic_error(test: unittest.TestCase, status: int, body: bytes,
                    want: int, kind: str) -> Dict[str, Any]:
    """An error in Anthropic's shape and nothing more."""
    test.assertEqual(status, want, body)
    e = json.loads(body)
    test.assertEqual(set(e), {"type", "error"}, e)
    test.assertEqual(e["type"], "error")
    test.assertEqual(set(e["error"]), {"type", "message"}, e)
    test.assertEqual(e["error"]["type"], kind, e)
    test.assertTrue(e["error"]["message"], e)
    return e


def text_of(m: Dict[str, Any]) -> str:
    return "".join(b["text"] for b in m["content"] if b["type"] == "text")


class Messages(unittest.TestCase):

    def test_a_message(self) -> None:
        m = message("plain", max_tokens=20, temperature=0, messages=ASK)
        self.assertEqual(set(m), {"id", "type", "role", "model", "content",
                                  "stop_reason", "stop_sequence", "usage"})
        self.assertRegex(m["id"], r"^msg_[A-Za-z0-9]{24}$")
        self.assertEqual((m["type"], m["role"], m["model"]),
                         ("message", "assistant", "stories260K.gguf"))
        self.assertEqual(len(m["content"]), 1)
        self.assertEqual(set(m["content"][0]), {"type", "text"})
        self.assertEqual(m["content"][0]["type"], "text")
        self.assertTrue(m["content"][0]["text"])
        self.assertEqual((m["stop_reason"], m["stop_sequence"]),
                         ("max_tokens", None))
        u = m["usage"]
        self.assertEqual(set(u), {"input_tokens", "cache_read_input_tokens",
                                  "output_tokens"})
        self.assertEqual(u["output_tokens"], 20)
        # The same request again continues the conversation the first left
        # parked: its prompt is read from the cache, its last token
        # decoded again; the same greedy text.
        again = message("plain", max_tokens=20, temperature=0, messages=ASK)
        self.assertEqual(again["content"], m["content"])
        self.assertNotEqual(again["id"], m["id"])
        total = u["input_tokens"] + u["cache_read_input_tokens"]
        self.assertEqual(again["usage"]["input_tokens"] +
                         again["usage"]["cache_read_input_tokens"], total)
        self.assertEqual(again["usage"]["cache_read_input_tokens"], total - 1)

    def test_end_turn(self) -> None:
        # The tools server's model ends a story with its end token.
        m = message("tools", max_tokens=600, temperature=0, messages=ASK)
        self.assertEqual((m["stop_reason"], m["stop_sequence"]),
                         ("end_turn", None))
        self.assertLess(m["usage"]["output_tokens"], 600)
        self.assertEqual(streamed(stream("tools", max_tokens=600,
                                         temperature=0, messages=ASK))
                         ["stop_reason"], "end_turn")

    def test_streamed_equals_whole(self) -> None:
        for server, n in (("plain", 40), ("tools", 600)):
            body = dict(max_tokens=n, temperature=0, messages=ASK,
                        system="You tell stories.")
            whole = message(server, **body)
            events = stream(server, **body)
            got = streamed(events)
            self.assertRegex(got["id"], r"^msg_")
            self.assertEqual(got["content"], whole["content"])
            self.assertEqual(got["stop_reason"], whole["stop_reason"])
            self.assertEqual(got["usage"]["output_tokens"],
                             whole["usage"]["output_tokens"])
            start = events[0]["message"]["usage"]
            self.assertEqual(start["output_tokens"], 0)
            self.assertGreater(start["input_tokens"] +
                               start["cache_read_input_tokens"], 10)
            # Token by token, not one blob.
            self.assertGreater(sum(e["type"] == "content_block_delta"
                                   for e in events), 10)

    def test_system_and_blocks(self) -> None:
        # A string and text blocks are the same prompt; blocks of one
        # message are joined with new lines, as common joins text parts.
        def count(**body: Any) -> int:
            status, _, out = post("plain", "/v1/messages/count_tokens",
                                  dict(body, model="m"))
            self.assertEqual(status, 200, out)
            self.assertEqual(set(json.loads(out)), {"input_tokens"})
            return json.loads(out)["input_tokens"]

        plain = count(system="Be nice.\nBe brief.", messages=[
            {"role": "user", "content": "What is\nthe answer?"}])
        blocks = count(system=[{"type": "text", "text": "Be nice."},
                               {"type": "text", "text": "Be brief.",
                                "cache_control": {"type": "ephemeral"}}],
                       messages=[{"role": "user", "content": [
                           {"type": "text", "text": "What is"},
                           {"type": "text", "text": "the answer?"}]}])
        self.assertEqual(plain, blocks)
        self.assertGreater(plain, count(messages=[
            {"role": "user", "content": "What is\nthe answer?"}]))
        m = message("plain", max_tokens=8, temperature=0, messages=[
            {"role": "user", "content": "Hello"},
            {"role": "assistant", "content": "Hi there!"},
            {"role": "user", "content": [{"type": "text",
                                          "text": "How are you?"}]}],
            metadata={"user_id": "u-1"})
        self.assertEqual(m["type"], "message")

    def test_as_the_chat_completion_of_the_same_conversation(self) -> None:
        # Anthropic's conversation (system blocks, an assistant's text and
        # tool_use, a user's tool_result of text blocks then text) renders
        # as its OpenAI form does: the same prompt, the same greedy text.
        ant = dict(
            model="m", max_tokens=30, temperature=0, tools=[WEATHER],
            system=[{"type": "text", "text": "You are helpful."},
                    {"type": "text", "text": "Be brief."}],
            messages=[
                {"role": "user", "content": "Weather in Paris?"},
                {"role": "assistant", "content": [
                    {"type": "text", "text": "Let me look."},
                    {"type": "tool_use", "id": "toolu_1",
                     "name": "get_weather", "input": {"city": "Paris"}}]},
                {"role": "user", "content": [
                    {"type": "tool_result", "tool_use_id": "toolu_1",
                     "content": [{"type": "text", "text": "Sunny"},
                                 {"type": "text", "text": "25 C"}]},
                    {"type": "text", "text": "Thanks. A story now?"}]}])
        oai = dict(
            max_tokens=30, temperature=0,
            chat_template_kwargs={"enable_thinking": False},
            tools=[{"type": "function", "function": {
                "name": WEATHER["name"],
                "description": WEATHER["description"],
                "parameters": WEATHER["input_schema"]}}],
            messages=[
                {"role": "system", "content": "You are helpful.\nBe brief."},
                {"role": "user", "content": "Weather in Paris?"},
                {"role": "assistant", "content": "Let me look.",
                 "tool_calls": [{"id": "toolu_1", "type": "function",
                                 "function": {"name": "get_weather",
                                              "arguments":
                                              '{"city":"Paris"}'}}]},
                {"role": "tool", "tool_call_id": "toolu_1",
                 "content": "Sunny\n25 C"},
                {"role": "user", "content": "Thanks. A story now?"}])
        m = message("tools", **ant)
        status, _, out = post("tools", "/v1/chat/completions", oai)
        self.assertEqual(status, 200, out)
        chat = json.loads(out)
        self.assertEqual(text_of(m), chat["choices"][0]["message"]["content"])
        self.assertEqual(m["usage"]["input_tokens"] +
                         m["usage"]["cache_read_input_tokens"],
                         chat["usage"]["prompt_tokens"])
        status, _, out = post("tools", "/v1/messages/count_tokens", ant)
        self.assertEqual(json.loads(out)["input_tokens"],
                         chat["usage"]["prompt_tokens"])
        # A tool result as a string, with is_error, and no content at all.
        for result in ({"content": "Sunny"}, {"content": "No such city",
                                              "is_error": True}, {}):
            body = json.loads(json.dumps(ant))
            body["messages"][2]["content"][0] = dict(
                result, type="tool_result", tool_use_id="toolu_1")
            self.assertEqual(message("tools", **body)["type"], "message")

    def test_prefill(self) -> None:
        # A trailing assistant message is continued, as Anthropic and
        # llama-server do: the answer is what follows it, whole or
        # streamed.
        pre = "Once upon a time"
        msgs = ASK + [{"role": "assistant", "content": pre}]
        m = message("plain", max_tokens=16, temperature=0, messages=msgs)
        got = streamed(stream("plain", max_tokens=16, temperature=0,
                              messages=msgs))
        self.assertEqual(got["content"], m["content"])
        status, _, out = post("plain", "/v1/chat/completions", dict(
            max_tokens=16, temperature=0, messages=msgs))
        chat = json.loads(out)["choices"][0]["message"]["content"]
        self.assertEqual(pre + text_of(m), chat)
        self.assertTrue(text_of(m) and not text_of(m).startswith(pre))

    def test_stop_sequences(self) -> None:
        body = dict(max_tokens=60, temperature=0, messages=ASK)
        full = text_of(message("plain", **body))
        words = sorted({w for w in re.findall(r"[a-z]{3,}", full)},
                       key=full.index)
        self.assertGreater(len(words), 3, full)
        late, early = words[len(words) // 2], words[len(words) // 4]
        self.assertLess(full.index(early), full.index(late))
        # The earliest stop string in the text ends it, whatever its place
        # in the list; the answer names it.
        for stops, first in (([late], late), (["\u0001never", late], late),
                             ([late, early], early)):
            for got in (message("plain", stop_sequences=stops, **body),
                        streamed(stream("plain", stop_sequences=stops,
                                        **body))):
                self.assertEqual((got["stop_reason"], got["stop_sequence"]),
                                 ("stop_sequence", first), stops)
                self.assertEqual(text_of(got), full[:full.index(first)])
        # A stop string that never comes: max_tokens.
        got = message("plain", stop_sequences=["\u0001"], **body)
        self.assertEqual((got["stop_reason"], got["stop_sequence"],
                          text_of(got)), ("max_tokens", None, full))

    def test_sampling_fields(self) -> None:
        body = dict(max_tokens=12, messages=ASK)
        greedy = text_of(message("plain", temperature=0, **body))
        # top_k 1 is greedy whatever the temperature; top_p and top_k are
        # taken.
        self.assertEqual(text_of(message("plain", temperature=1, top_k=1,
                                         **body)), greedy)
        for extra in ({"top_p": 0.9}, {"top_k": 40}, {"temperature": 0.5}):
            self.assertEqual(message("plain", **body, **extra)["type"],
                             "message")

    def test_empty_messages(self) -> None:
        # llama-server's permissive reading: no messages is the template's
        # generation prompt alone, answered.
        out = message("plain", max_tokens=3, messages=[])
        self.assertEqual((out["type"], out["usage"]["output_tokens"]),
                         ("message", 3))
        status, _, got = post("plain", "/v1/messages/count_tokens",
                              {"model": "m", "messages": []})
        self.assertEqual(status, 200, got)
        self.assertGreater(json.loads(got)["input_tokens"], 0)

    def test_thinking(self) -> None:
        # llama-server's: thinking asked for turns the template's on (its
        # reasoning_budget_tokens the budget), and an assistant's thinking
        # blocks are its reasoning_content, which a template with thinking
        # renders: the count grows by them.
        out = message("think", max_tokens=4, messages=ASK, thinking={
            "type": "enabled", "budget_tokens": 50})
        self.assertEqual(out["type"], "message")
        on = count("think", ASK, thinking={"type": "enabled",
                                           "budget_tokens": 50})
        off = count("think", ASK, thinking={"type": "disabled"})
        # Qwen3's template closes an empty thought when thinking is off.
        self.assertGreater(off, on)
        said = [{"type": "text", "text": "Once upon a time."}]
        history = [{"role": "user", "content": "Tell me a story."},
                   {"role": "assistant", "content": said},
                   {"role": "user", "content": "Again."}]
        thought = copy.deepcopy(history)
        thought[1]["content"] = [{"type": "thinking", "thinking":
                                  "A short one, then.", "signature": ""}
                                 ] + said
        # the last turn's thought is shown (Qwen3 shows those after the
        # last question alone)
        last = history[:2]
        last_thought = thought[:2]
        self.assertGreater(count("think", last_thought),
                           count("think", last))

    def test_billing_header(self) -> None:
        # Claude Code's system prompt stamps each request (cch=); the stamp
        # is made the same, as llama-server does, so that the next request
        # continues the conversation the first left parked.
        def body(cch: str) -> Dict[str, Any]:
            return dict(max_tokens=4, temperature=0, messages=ASK, system=[
                {"type": "text", "text": "x-anthropic-billing-header: "
                 "cc_version=2.1.101.e51; cc_entrypoint=cli; cch=%s;" % cch},
                {"type": "text", "text": "You are a story teller."}])

        a = message("plain", **body("a5145"))
        b = message("plain", **body("b7777"))
        total = a["usage"]["input_tokens"] + a["usage"]["cache_read_input_tokens"]
        self.assertEqual(b["usage"]["cache_read_input_tokens"], total - 1)
        self.assertEqual(b["content"], a["content"])


class Tools(unittest.TestCase):
    """Tool calls through the Command R+ template's format and grammar."""

    REQ = dict(max_tokens=300, temperature=0, tools=[WEATHER], messages=[
        {"role": "user", "content": "What is the weather in Paris?"}])

    def test_tool_use(self) -> None:
        for choice in ({"type": "any", "disable_parallel_tool_use": True},
                       {"type": "tool", "name": "get_weather",
                        "disable_parallel_tool_use": True}):
            m = message("tools", tool_choice=choice, **self.REQ)
            self.assertEqual((m["stop_reason"], m["stop_sequence"]),
                             ("tool_use", None))
            self.assertEqual(len(m["content"]), 1, m)
            call = m["content"][0]
            self.assertEqual(set(call), {"type", "id", "name", "input"})
            self.assertEqual((call["type"], call["name"]),
                             ("tool_use", "get_weather"))
            self.assertRegex(call["id"], r"^[A-Za-z0-9_-]+$")
            self.assertIsInstance(call["input"]["city"], str)
            got = streamed(stream("tools", tool_choice=choice, **self.REQ))
            self.assertEqual(got["stop_reason"], "tool_use")
            self.assertEqual([(b["type"], b["name"], b["input"])
                              for b in got["content"]],
                             [("tool_use", "get_weather", call["input"])])

    def test_parallel_calls_are_blocks_in_turn(self) -> None:
        body = dict(self.REQ, max_tokens=600, tool_choice={"type": "any"})
        m = message("tools", **body)
        calls = [b for b in m["content"] if b["type"] == "tool_use"]
        self.assertGreater(len(calls), 2, m)
        self.assertEqual(len({b["id"] for b in calls}), len(calls))
        got = streamed(stream("tools", **body))
        # The last call was cut by max_tokens: its input as far as it went.
        self.assertEqual([b["input"] for b in got["content"][:-1]],
                         [b["input"] for b in calls[:-1]])
        self.assertEqual(got["stop_reason"], m["stop_reason"])

    def test_auto_and_none(self) -> None:
        for choice in (None, {"type": "auto"}, {"type": "none"}):
            body = dict(self.REQ, max_tokens=20)
            if choice:
                body["tool_choice"] = choice
            m = message("tools", **body)
            self.assertEqual([b["type"] for b in m["content"]], ["text"])
            self.assertEqual(m["stop_reason"], "max_tokens")

    def test_tools_are_in_the_prompt(self) -> None:
        def count(**more: Any) -> int:
            status, _, out = post("tools", "/v1/messages/count_tokens",
                                  dict(model="m", messages=ASK, **more))
            self.assertEqual(status, 200, out)
            return json.loads(out)["input_tokens"]

        self.assertGreater(count(tools=[WEATHER]), count())


class Errors(unittest.TestCase):

    def test_bad_requests(self) -> None:
        ok = dict(model="m", max_tokens=4, messages=ASK)

        def but(**change: Any) -> Dict[str, Any]:
            b = dict(ok, **change)
            return {k: v for k, v in b.items() if v is not None}

        user = lambda *blocks: [{"role": "user", "content": list(blocks)}]
        cases = [
            {}, but(model=None), but(model=5), but(max_tokens=None),
            but(max_tokens=0), but(max_tokens="9"), but(max_tokens=10**6),
            but(messages=None), but(messages="hi"),
            but(messages=[{"role": "system", "content": "x"}]),
            but(messages=[{"role": "user", "content": 7}]),
            but(messages=[{"role": "user", "content": []}]),
            but(messages=[5]),
            but(messages=user({"type": "image", "source": {
                "type": "base64", "media_type": "image/png", "data": "AA"}})),
            but(messages=user({"type": "document", "source": {}})),
            but(messages=user({"type": "wizard", "text": "x"})),
            but(messages=user({"type": "text"})),
            but(messages=user({"type": "tool_use", "id": "a", "name": "f",
                               "input": {}})),
            but(messages=[{"role": "assistant", "content": [
                {"type": "redacted_thinking", "data": "x"}]}]),
            but(messages=[{"role": "assistant", "content": [
                {"type": "thinking", "signature": ""}]}]),
            but(messages=user({"type": "thinking", "thinking": "hmm"})),
            but(messages=[{"role": "assistant", "content": [
                {"type": "tool_result", "tool_use_id": "a"}]}]),
            but(messages=[{"role": "assistant", "content": [
                {"type": "tool_use", "id": "a", "name": "f"}]}]),
            but(messages=user({"type": "tool_result", "tool_use_id": "a",
                               "content": [{"type": "image"}]})),
            but(messages=user({"type": "tool_result"})),
            but(system=5), but(system=[{"type": "image"}]),
            but(temperature=1.5), but(top_p=2), but(top_k=-1),
            but(top_k="x"), but(stream="yes"), but(stop_sequences=[""]),
            but(stop_sequences=["a"] * 17), but(stop_sequences=5),
            but(thinking={"type": "enabled", "budget_tokens": "x"}),
            but(thinking={"type": "enabled", "budget_tokens": -1}),
            but(thinking={"type": "sometimes"}), but(thinking="on"),
            but(tools=5), but(tools=[{"name": "f"}]),
            but(tools=[{"input_schema": {}}]),
            but(tools=[{"type": "web_search_20250305", "name": "web_search"}]),
            but(tool_choice={"type": "any"}),
            but(tool_choice={"type": "tool"}, tools=[WEATHER]),
            but(tool_choice="auto", tools=[WEATHER]),
            but(tool_choice={"type": "sometimes"}, tools=[WEATHER]),
            but(metadata="x"), but(metadata={"user_id": 5}),
            but(container="c"), but(mcp_servers=[{"type": "url"}]),
            but(output_format={"type": "json_schema", "schema": {}}),
            but(chat_template_kwargs=5),
        ]
        for body in cases:
            with self.subTest(body=json.dumps(body)[:120]):
                status, _, out = post("plain", "/v1/messages", body)
                anthropic_error(self, status, out, 400,
                                "invalid_request_error")
        for raw in (b"{not json", b"[1, 2]", b""):
            for path in ("/v1/messages", "/v1/messages/count_tokens"):
                status, _, out = post("plain", path, raw=raw)
                anthropic_error(self, status, out, 400,
                                "invalid_request_error")
        for body in ({}, {"model": "m"}, {"model": "m", "messages": {}},
                     {"model": "m", "messages": ASK, "thinking": {
                         "type": "enabled", "budget_tokens": 9.5}}):
            status, _, out = post("plain", "/v1/messages/count_tokens", body)
            anthropic_error(self, status, out, 400, "invalid_request_error")
        # The thinking switched off is no request for it.
        self.assertEqual(message("plain", max_tokens=2, messages=ASK,
                                 thinking={"type": "disabled"})["type"],
                         "message")

    def test_http_errors(self) -> None:
        for path in ("/v1/messages", "/v1/messages/count_tokens"):
            status, _, out = post("plain", path,
                                  raw=b"x" * (2 << 20))
            anthropic_error(self, status, out, 413, "request_too_large")
            status, headers, out = post("plain", path, method="GET")
            anthropic_error(self, status, out, 405, "invalid_request_error")
            self.assertEqual(headers["allow"], "POST")
        # The other routes keep OpenAI's shape.
        status, _, out = post("plain", "/v1/chat/completions", {})
        self.assertEqual(status, 400)
        self.assertEqual(set(json.loads(out)["error"]),
                         {"message", "type", "param", "code"})

    def test_api_key(self) -> None:
        body = dict(model="m", max_tokens=2, messages=ASK)
        # As llama-server: Authorization when sent, else x-api-key; either
        # may carry "Bearer " before the key.
        for headers in ({}, {"x-api-key": "wrong"},
                        {"Authorization": "Bearer wrong"},
                        {"Authorization": "Bearer wrong", "x-api-key": KEY}):
            for path, b in (("/v1/messages", body),
                            ("/v1/messages/count_tokens", body)):
                status, _, out = post("keyed", path, b, headers=headers)
                anthropic_error(self, status, out, 401,
                                "authentication_error")
        # Either header, on every route (llama-server takes both).
        for headers in ({"x-api-key": KEY},
                        {"Authorization": "Bearer " + KEY},
                        {"x-api-key": "Bearer " + KEY},
                        {"x-api-key": "wrong",
                         "Authorization": "Bearer " + KEY}):
            status, _, out = post("keyed", "/v1/messages", body,
                                  headers=headers)
            self.assertEqual(status, 200, out)
        status, _, out = post("keyed", "/v1/chat/completions", dict(
            max_tokens=2, messages=ASK), headers={"x-api-key": KEY})
        self.assertEqual(status, 200, out)
        status, _, out = post("keyed", "/v1/chat/completions", dict(
            max_tokens=2, messages=ASK))
        self.assertEqual((status, json.loads(out)["error"]["code"]),
                         (401, "invalid_api_key"))

    def test_busy(self) -> None:
        # One request decoding, one queued: the next is 503
        # overloaded_error with Retry-After.
        addr = SERVERS["busy"].addr
        held = []
        try:
            for _ in range(2):
                c = connect(addr)
                c.request("POST", "/completion", body=json.dumps(dict(
                    prompt="Once upon a time", n_predict=30000,
                    ignore_eos=True, stream=True)))
                held.append(c)
                if len(held) == 1:
                    c.getresponse().read1(64)
            deadline = time.monotonic() + 10
            while metrics.scrape(addr)["evictd_llama_requests_queued"] != 1:
                self.assertLess(time.monotonic(), deadline)
                time.sleep(0.02)
            for stream_ in (False, True):
                status, headers, out = post("busy", "/v1/messages", dict(
                    model="m", max_tokens=2, messages=ASK, stream=stream_))
                anthropic_error(self, status, out, 503, "overloaded_error")
                self.assertEqual(headers["retry-after"], "1")
        finally:
            for c in held:
                c.close()

    def test_failure_mid_stream(self) -> None:
        # evictd restarted without its state, re-homing off: the stream
        # that had begun ends with Anthropic's error event.
        d = Daemon.started(TMP.name)
        sv = Serve(TMP.name, d.url, *WINDOW, model=STORIES,
                   env={"EVICTD_LLAMA_REHOME": "off"})
        try:
            c = connect(sv.addr, timeout=600)
            c.request("POST", "/v1/messages", body=json.dumps(dict(
                model="m", max_tokens=3000, messages=ASK, stream=True)))
            r = c.getresponse()
            got = b""
            while got.count(b"content_block_delta") < 20:
                got += r.read1(4096)
            d.kill()
            d.restart()
            got += r.read()
            c.close()
            events = frames(got)
            self.assertEqual(events[0]["type"], "message_start")
            last = events[-1]
            self.assertEqual(set(last), {"type", "error"}, last)
            self.assertEqual(last["type"], "error")
            self.assertEqual(last["error"]["type"], "api_error")
            self.assertIn("lost the session", last["error"]["message"])
            self.assertNotIn("message_stop", [e["type"] for e in events])
        finally:
            sv.stop()
            d.stop()


class Contract(unittest.TestCase):
    """The answers against serve's contract, deploy/llama/openapi.yaml
    (tests/llamacpp/anthropic/contract.mjs, with tests/contract's
    validators: make contract-deps installs them)."""

    def test_contract(self) -> None:
        global RECORD
        checker = os.path.join(NODE_DIR, "contract.mjs")
        validators = os.path.join(REPO, "tests", "contract", "node_modules",
                                  "ajv-draft-04")
        if not os.path.exists(validators):
            raise AssertionError("%s is missing: run make contract-deps"
                                 % validators)
        RECORD = []
        try:
            ok = dict(model="m", max_tokens=6, temperature=0, messages=ASK)
            message("plain", **ok)
            stream("plain", **ok)
            message("plain", **dict(ok, stop_sequences=["a"]))
            stream("plain", **dict(ok, stop_sequences=["a"]))
            for choice in ({"type": "any", "disable_parallel_tool_use": True},
                           {"type": "any"}):
                body = dict(Tools.REQ, model="m", tool_choice=choice)
                message("tools", **body)
                stream("tools", **body)
            post("plain", "/v1/messages/count_tokens",
                 dict(model="m", messages=ASK, system="Be brief."))
            thinking = dict(ok, thinking={"type": "enabled",
                                          "budget_tokens": "many"})
            for bad in ({}, dict(ok, max_tokens=0), thinking):
                post("plain", "/v1/messages", bad)
            for bad in ({}, thinking):
                post("plain", "/v1/messages/count_tokens", bad)
            post("plain", "/v1/messages", raw=b"x" * (2 << 20))
            post("plain", "/v1/messages", method="GET")
            post("keyed", "/v1/messages", ok)
            post("keyed", "/v1/messages/count_tokens", ok)
            post("keyed", "/v1/messages", ok, headers={"x-api-key": KEY})
            exchanges, RECORD = RECORD, None
        finally:
            RECORD = None
        self.assertEqual([x["status"] for x in exchanges],
                         [200] * 9 + [400] * 5 + [413, 405, 401, 401, 200])
        path = os.path.join(TMP.name, "exchanges.json")
        with open(path, "w") as f:
            json.dump(exchanges, f)
        p = subprocess.run(["node", checker, os.path.join(
            REPO, "deploy", "llama", "openapi.yaml"), path],
            capture_output=True, timeout=300)
        out = p.stdout.decode("utf-8", "replace")
        sys.stderr.write(out)
        self.assertEqual(p.returncode, 0, out[-4000:] +
                         p.stderr.decode("utf-8", "replace"))
        self.assertIn("0 not valid", out)


class OfficialClient(unittest.TestCase):
    """npm's @anthropic-ai/sdk (tests/llamacpp/anthropic)."""

    def test_official_client(self) -> None:
        sdk = os.path.join(NODE_DIR, "node_modules", "@anthropic-ai", "sdk")
        if not os.path.exists(sdk):
            raise AssertionError("%s is missing: run make e2e-llamacpp" % sdk)
        env = dict(os.environ, KEY=KEY, **{
            name.upper(): "http://" + SERVERS[name].addr
            for name in ("plain", "tools", "keyed")})
        env["SERVE"] = env.pop("PLAIN")
        p = subprocess.run(["node", "--test", "anthropic.test.mjs"],
                           cwd=NODE_DIR, env=env, capture_output=True,
                           timeout=900)
        out = p.stdout.decode("utf-8", "replace")
        sys.stderr.write(out)
        self.assertEqual(p.returncode, 0, out[-4000:] +
                         p.stderr.decode("utf-8", "replace"))
        self.assertIn("# fail 0", out)


if __name__ == "__main__":
    unittest.main()

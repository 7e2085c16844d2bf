"""serve/upstream/ (templates.h, sampler.h), llama.cpp's common library
behind C interfaces, against real models through its driver (tests/llamacpp/upstream_check.c):
the chat templates llama.cpp ships (models/templates) render messages with
tools and tool results and give the grammar, triggers and parser that
llama.cpp's own code makes; hand-written outputs of several formats parse
into tool calls, whole and as OpenAI's streaming deltas; JSON schemas
become grammars; and on stories260K (no chat template of its own: ChatML)
llama-server's sampler chain is greedy at temperature 0, obeys logit_bias,
reports n_probs as llama-server does, follows a schema's grammar to JSON
that validates, and a lazy grammar waits for its trigger. Bad parameters
are refused with a sentence that names the field."""

import json
import os
import subprocess
import tempfile
import unittest
from typing import Any, Dict, List, Optional

from support import paths

CHECK = paths.upstream_check()
STORIES = paths.stories_gguf()
# The llama.cpp tree common was built from (config.mk says where its
# headers are: -isystem TREE/common).
TEMPLATES = os.path.join(paths.llama_tree(), "models", "templates")
TMP = tempfile.TemporaryDirectory(prefix="test_upstream.")
LLAMA31 = "meta-llama-Llama-3.1-8B-Instruct"
QWEN25 = "Qwen-Qwen2.5-7B-Instruct"
HERMES2 = "NousResearch-Hermes-2-Pro-Llama-3-8B-tool_use"
NEMO = "mistralai-Mistral-Nemo-Instruct-2407"
R1 = "deepseek-ai-DeepSeek-R1-Distill-Llama-8B"

WEATHER = {"type": "function", "function": {
    "name": "get_weather", "description": "The weather of a city",
    "parameters": {"type": "object",
                   "properties": {"city": {"type": "string"}},
                   "required": ["city"]}}}
TIME = {"type": "function", "function": {
    "name": "get_time", "description": "The time in a time zone",
    "parameters": {"type": "object",
                   "properties": {"zone": {"type": "string"}},
                   "required": ["zone"]}}}


def run(args: List[str], stdin: str = "") -> Dict[str, Any]:
    p = subprocess.run([CHECK] + args, input=stdin.encode(),
                       capture_output=True, timeout=300)
    if p.returncode not in (0, 2):
        raise AssertionError("upstream_check %s: exit %d\n%s" % (
            args[0], p.returncode, p.stderr.decode(errors="replace")[-3000:]))
    out = json.loads(p.stdout.decode(errors="replace"))
    assert (p.returncode == 2) == ("error" in out), out
    return out


def template(name: str) -> str:
    return os.path.join(TEMPLATES, name + ".jinja")


def apply(tmpl: str, request: Dict[str, Any], jinja: bool = True
          ) -> Dict[str, Any]:
    return run(["apply", STORIES, tmpl, "1" if jinja else "0"],
               json.dumps(request))


def sample(params: Dict[str, Any], n: int = 30, nprobs: int = 0,
           prompt: str = "Once upon a time") -> Dict[str, Any]:
    return run(["sample", STORIES, prompt, str(n), str(nprobs)],
               json.dumps(params))


def sampler(params: Any) -> Dict[str, Any]:
    return run(["sampler", STORIES],
               params if isinstance(params, str) else json.dumps(params))


def ask(tools: Optional[List[Any]] = None, **more: Any) -> Dict[str, Any]:
    request: Dict[str, Any] = {"messages": [
        {"role": "system", "content": "You are a helpful assistant."},
        {"role": "user", "content": "What is the weather in Paris?"}]}
    if tools is not None:
        request["tools"] = tools
    request.update(more)
    return request


class Templates(unittest.TestCase):
    """Chat templates: ChatML for a GGUF without one, llama.cpp's Jinja
    templates with tools, its built-in ones with Jinja off, and the
    request's errors as sentences."""

    def test_stories_has_none_and_gets_chatml(self) -> None:
        info = run(["info", STORIES, "", "1"])
        self.assertFalse(info["explicit"])
        self.assertIn("<|im_start|>", info["chat_template"])
        self.assertFalse(info["chat_template_caps"]["supports_tools"])
        request = {"messages": [{"role": "user", "content": "Hello"}]}
        want = "<|im_start|>user\nHello<|im_end|>\n<|im_start|>assistant\n"
        for tmpl, jinja in (("", True), ("chatml", True), ("", False),
                            ("chatml", False)):
            out = apply(tmpl, request, jinja)
            self.assertEqual(out["prompt"], want, (tmpl, jinja))
            self.assertNotIn("grammar", out)
        # ChatML has no tool syntax of its own: common's generic one.
        self.assertTrue(apply("", ask([WEATHER]))["prompt"].endswith(want[-22:]))

    def test_caps_of_the_templates(self) -> None:
        info = run(["info", STORIES, template(HERMES2), "1"])
        self.assertTrue(info["explicit"])
        caps = info["chat_template_caps"]
        self.assertTrue(caps["supports_tools"] and caps["supports_tool_calls"])
        self.assertTrue(run(["info", STORIES, template(R1), "1"])
                        ["supports_thinking"])
        self.assertFalse(info["supports_thinking"])

    def test_tools_render_with_their_grammar(self) -> None:
        # Each template's own tool syntax, and the grammar llama.cpp's code
        # makes for it: lazy, waiting for the tool call's opening marker,
        # which must come out as one token (preserved) where it is one.
        for name, marker in ((QWEN25, "<tool_call>"), (HERMES2, "<tool_call>"),
                             (NEMO, "[TOOL_CALLS]")):
            with self.subTest(template=name):
                out = apply(template(name), ask([WEATHER, TIME]))
                self.assertIn("get_weather", out["prompt"])
                self.assertIn("What is the weather in Paris?", out["prompt"])
                self.assertIn("get_weather", out["grammar"])
                self.assertIn("get_time", out["grammar"])
                self.assertIn("root ::=", out["grammar"])
                self.assertEqual(out["grammar_type"], "tool_calls")
                self.assertTrue(out["grammar_lazy"])
                self.assertTrue(out["parse_tool_calls"])
                self.assertIn(marker, out["preserved_tokens"])
                self.assertTrue(any(t["value"].startswith(marker)
                                    for t in out["grammar_triggers"]),
                                out["grammar_triggers"])
                self.assertTrue(out["parser"]["chat_parser"])
        # Llama 3.1 writes bare JSON: no marker to wait for, so llama.cpp
        # constrains nothing unless a call is required.
        out = apply(template(LLAMA31), ask([WEATHER]))
        self.assertIn('"name": "get_weather"', out["prompt"])
        self.assertTrue(out["prompt"].endswith(
            "<|start_header_id|>assistant<|end_header_id|>\n\n"))
        self.assertNotIn("grammar", out)
        out = apply(template(LLAMA31), ask([WEATHER], tool_choice="required"))
        self.assertIn("get_weather", out["grammar"])
        self.assertFalse(out["grammar_lazy"])

    def test_a_conversation_with_tool_results(self) -> None:
        for name, call_id in ((QWEN25, "call_1"), (HERMES2, "call_1"),
                              (LLAMA31, "call_1"), (NEMO, "abcDEF123")):
            with self.subTest(template=name):
                request = ask([WEATHER])
                request["messages"] += [
                    {"role": "assistant", "content": None, "tool_calls": [
                        {"id": call_id, "type": "function", "function": {
                            "name": "get_weather",
                            "arguments": '{"city": "Paris"}'}}]},
                    {"role": "tool", "tool_call_id": call_id,
                     "content": "sunny, 24 C"}]
                prompt = apply(template(name), request)["prompt"]
                self.assertIn("sunny, 24 C", prompt)
                self.assertIn("Paris", prompt[prompt.index("weather in"):])
        # Mistral's template refuses other ids: its sentence comes back.
        request["messages"][2]["tool_calls"][0]["id"] = "call_1"
        request["messages"][3]["tool_call_id"] = "call_1"
        self.assertIn("length 9", apply(template(NEMO), request)["error"])

    def test_reasoning_template(self) -> None:
        out = apply(template(R1), ask())
        self.assertTrue(out["prompt"].endswith("<｜Assistant｜><think>\n"),
                        out["prompt"][-60:])
        self.assertEqual(out["reasoning_budget_start_tag"], "<think>")
        self.assertEqual(out["reasoning_budget_end_tags"], ["</think>"])
        self.assertEqual(out["reasoning_budget_tokens"], -1)
        self.assertEqual(out["parser"]["reasoning_format"], "deepseek")

    def test_response_format_becomes_a_grammar(self) -> None:
        schema = {"type": "object", "properties": {"n": {"type": "integer"}},
                  "required": ["n"]}
        for fmt in ({"type": "json_schema", "json_schema": {"schema": schema}},
                    {"type": "json_object", "schema": schema}):
            for tmpl in ("", template(QWEN25)):
                out = apply(tmpl, ask(response_format=fmt))
                self.assertIn("root ::=", out["grammar"])
                self.assertIn('"\\"n\\""', out["grammar"])
        self.assertNotIn("grammar", apply("", ask(
            response_format={"type": "text"})))

    def test_tool_choice(self) -> None:
        out = apply(template(QWEN25), ask([WEATHER, TIME], tool_choice={
            "type": "function", "function": {"name": "get_time"}}))
        self.assertIn("get_time", out["grammar"])
        self.assertNotIn("get_weather", out["grammar"])
        self.assertFalse(out["grammar_lazy"])
        none = apply(template(QWEN25), ask([WEATHER], tool_choice="none"))
        self.assertNotIn("grammar", none)
        self.assertFalse(none["parse_tool_calls"])

    def test_logprobs(self) -> None:
        self.assertEqual(apply("", ask(logprobs=True, top_logprobs=5))
                         ["n_probs"], 5)
        self.assertEqual(apply("", ask(logprobs=True))["n_probs"], 20)
        self.assertNotIn("n_probs", apply("", ask()))

    def test_jinja_off(self) -> None:
        request = {"messages": [{"role": "user", "content": "Hello"}]}
        out = apply("llama3", request, jinja=False)
        self.assertEqual(out["prompt"], "<|start_header_id|>user<|end_header_id"
                         "|>\n\nHello<|eot_id|><|start_header_id|>assistant"
                         "<|end_header_id|>\n\n")
        # Jinja would render the name itself: refused, saying so.
        self.assertIn("built-in", apply("llama3", request)["error"])
        self.assertIn("know no chat template",
                      apply("no-such-template", request, jinja=False)["error"])
        self.assertIn("Jinja", apply("chatml", ask([WEATHER]), False)["error"])

    def test_bad_requests_are_sentences(self) -> None:
        cases = [
            ({}, '"messages" is required'),
            ({"messages": "hi"}, "must be a list"),
            ({"messages": [{"role": "user"}]}, '"content"'),
            ({"messages": [{"role": "user", "content": [
                {"type": "image_url", "image_url": {"url": "x"}}]}]},
             "no images"),
            (ask([WEATHER], grammar='root ::= "a"'),
             "Cannot use custom grammar constraints with tools."),
            (ask(json_schema={}, grammar='root ::= "a"'),
             "Cannot use both json_schema and grammar"),
            (ask(response_format={"type": "xml"}), '"xml"'),
            (ask([WEATHER], tool_choice="sometimes"), '"tool_choice"'),
            (ask([WEATHER], tool_choice={"type": "function",
                                         "function": {"name": "nope"}}),
             '"nope"'),
            (ask(tools={"a": 1}), '"tools" must be a list'),
            (ask(reasoning_format="loud"), '"reasoning_format"'),
            (ask(top_logprobs=3), "top_logprobs requires logprobs"),
            (ask(chat_template_kwargs=[1]), '"chat_template_kwargs"'),
        ]
        for request, why in cases:
            with self.subTest(request=request):
                self.assertIn(why, apply(template(QWEN25), request)["error"])
        # No messages at all, as llama-server takes them (its Anthropic
        # route answers them): the generation prompt alone.
        out = apply(template(QWEN25), {"messages": []})
        self.assertTrue(out["prompt"].endswith("<|im_start|>assistant\n"),
                        out)
        self.assertIn("JSON object", run(["apply", STORIES, "", "1"],
                                         "not json")["error"])

    def test_threads_render_alike(self) -> None:
        # llama-server renders from its HTTP threads at once; so may serve.
        out = run(["threads", STORIES, template(QWEN25), "4"],
                  json.dumps(ask([WEATHER])))
        self.assertEqual(out["same"], out["applies"])
        self.assertEqual(out["applies"], 100)


class Parsing(unittest.TestCase):
    """What a model writes, read back: hand-written outputs of several
    formats, whole and fed a few bytes at a time as a stream is; the
    deltas, put together, are the message."""

    def parser(self, name: str, request: Dict[str, Any]) -> str:
        path = os.path.join(TMP.name, name + ".parser.json")
        with open(path, "w") as f:
            json.dump(apply(template(name), request)["parser"], f)
        return path

    def parse(self, name: str, text: str, chunk: int = 3,
              request: Optional[Dict[str, Any]] = None) -> Dict[str, Any]:
        out = run(["parse", self.parser(name, request or ask([WEATHER, TIME])),
                   str(chunk)], text)
        self.assertNotIn("error", out)
        return out

    def assembled(self, deltas: List[Dict[str, Any]]) -> Dict[str, Any]:
        """The message OpenAI's client puts together from the deltas."""
        msg: Dict[str, Any] = {"content": "", "reasoning_content": "",
                               "tool_calls": []}
        for d in deltas:
            msg["content"] += d.get("content", "")
            msg["reasoning_content"] += d.get("reasoning_content", "")
            for call in d.get("tool_calls", []):
                calls = msg["tool_calls"]
                if call["index"] == len(calls):
                    self.assertIn("id", call)  # the first of each names it
                    calls.append({"id": call["id"], "name": "",
                                  "arguments": ""})
                fn = call.get("function", {})
                calls[call["index"]]["name"] += fn.get("name", "")
                calls[call["index"]]["arguments"] += fn.get("arguments", "")
        return msg

    def check(self, out: Dict[str, Any], content: str,
              calls: List[Any], reasoning: str = "") -> None:
        for msg in (out["message"], out["whole"]):
            self.assertEqual(msg["role"], "assistant")
            self.assertEqual(msg["content"], content)
            self.assertEqual(msg.get("reasoning_content", ""), reasoning)
            got = [(c["function"]["name"], json.loads(c["function"]
                                                       ["arguments"]))
                   for c in msg.get("tool_calls", [])]
            self.assertEqual(got, calls)
            for c in msg.get("tool_calls", []):
                self.assertEqual(c["type"], "function")
                self.assertTrue(c["id"])
        streamed = self.assembled(out["deltas"])
        self.assertEqual(streamed["content"], content)
        self.assertEqual(streamed["reasoning_content"], reasoning)
        self.assertEqual([(c["name"], json.loads(c["arguments"]))
                          for c in streamed["tool_calls"]], calls)
        self.assertEqual([c["id"] for c in streamed["tool_calls"]],
                         [c["id"] for c in out["message"].get("tool_calls",
                                                              [])])

    def test_hermes_and_qwen(self) -> None:
        text = ('Let me look.<tool_call>\n{"name": "get_weather", '
                '"arguments": {"city": "Paris"}}\n</tool_call>')
        for name in (QWEN25, HERMES2):
            for chunk in (1, 3, 1000):
                with self.subTest(template=name, chunk=chunk):
                    self.check(self.parse(name, text, chunk), "Let me look.",
                               [("get_weather", {"city": "Paris"})])

    def test_two_calls_at_once(self) -> None:
        text = ('<tool_call>\n{"name": "get_weather", "arguments": {"city": '
                '"Paris"}}\n</tool_call>\n<tool_call>\n{"name": "get_time", '
                '"arguments": {"zone": "CET"}}\n</tool_call>')
        out = self.parse(QWEN25, text, 2, ask([WEATHER, TIME],
                                              parallel_tool_calls=True))
        self.check(out, "", [("get_weather", {"city": "Paris"}),
                             ("get_time", {"zone": "CET"})])
        ids = [c["id"] for c in out["message"]["tool_calls"]]
        self.assertEqual(len(set(ids)), 2)
        self.assertTrue(all(i.startswith("call_") and len(i) == 29
                            for i in ids), ids)

    def test_mistral_nemo_keeps_the_models_id(self) -> None:
        out = self.parse(NEMO, '[TOOL_CALLS][{"name": "get_weather", '
                         '"arguments": {"city": "Paris"}, "id": "123456789"}]')
        self.check(out, "", [("get_weather", {"city": "Paris"})])
        self.assertEqual(out["whole"]["tool_calls"][0]["id"], "123456789")

    def test_llama31_bare_json(self) -> None:
        self.check(self.parse(LLAMA31, '{"name": "get_weather", "parameters":'
                              ' {"city": "Paris"}}'),
                   "", [("get_weather", {"city": "Paris"})])

    def test_plain_text_stays_content(self) -> None:
        for name in (QWEN25, LLAMA31, NEMO):
            with self.subTest(template=name):
                self.check(self.parse(name, "It is sunny in Paris."),
                           "It is sunny in Paris.", [])

    def test_reasoning(self) -> None:
        # The template opened <think> itself (the generation prompt).
        out = self.parse(R1, "I should\nthink</think>It is sunny.",
                         request=ask())
        self.check(out, "It is sunny.", [], "\nI should\nthink")
        # Not read apart: the text as written, from the template's <think>.
        out = self.parse(R1, "I should\nthink</think>It is sunny.",
                         request=ask(reasoning_format="none"))
        self.check(out, "<think>\nI should\nthink</think>It is sunny.", [])

    def test_a_bad_parser_is_refused(self) -> None:
        path = os.path.join(TMP.name, "bad.parser.json")
        with open(path, "w") as f:
            json.dump({"format": 99}, f)
        self.assertIn('"format"', run(["parse", path, "3"], "x")["error"])


class Schema(unittest.TestCase):
    def test_schema_to_grammar(self) -> None:
        out = run(["schema"], json.dumps({
            "type": "object", "properties": {
                "name": {"type": "string", "maxLength": 5},
                "tags": {"type": "array", "items": {"enum": ["a", "b"]}}},
            "required": ["name"]}))
        g = out["grammar"]
        self.assertIn("root ::=", g)
        self.assertIn('"\\"name\\""', g)
        self.assertIn("{0,5}", g)
        self.assertIn('"\\"a\\""', g)

    def test_bad_schemas(self) -> None:
        self.assertIn("JSON object", run(["schema"], "[1")["error"])
        self.assertIn("#/nope", run(["schema"], json.dumps({
            "type": "object", "properties": {"a": {"$ref": "#/nope"}}}))
            ["error"])


def validates(value: Any, schema: Dict[str, Any]) -> bool:
    """The few JSON schema rules the sampling test uses."""
    t = schema.get("type")
    if t == "object":
        return (isinstance(value, dict)
                and all(k in value for k in schema.get("required", []))
                and set(value) <= set(schema["properties"])
                and all(validates(value[k], schema["properties"][k])
                        for k in value))
    if t == "string":
        return (isinstance(value, str)
                and len(value) <= schema.get("maxLength", len(value)))
    if t == "integer":
        return isinstance(value, int) and not isinstance(value, bool)
    if t == "boolean":
        return isinstance(value, bool)
    if t == "array":
        return (isinstance(value, list)
                and len(value) <= schema.get("maxItems", len(value))
                and all(validates(v, schema["items"]) for v in value))
    if "enum" in schema:
        return value in schema["enum"]
    raise AssertionError("no rule for %r" % schema)


class Sampling(unittest.TestCase):
    """llama-server's sampler chain on stories260K."""

    def test_defaults_are_llama_servers(self) -> None:
        d = run(["settings"])
        self.assertEqual(d["top_k"], 40)
        self.assertAlmostEqual(d["temperature"], 0.8, places=6)
        self.assertAlmostEqual(d["top_p"], 0.95, places=6)
        self.assertAlmostEqual(d["min_p"], 0.05, places=6)
        self.assertEqual(d["seed"], 0xFFFFFFFF)
        self.assertEqual(d["repeat_last_n"], 64)
        self.assertEqual(d["samplers"], [
            "penalties", "dry", "top_n_sigma", "top_k", "typ_p", "top_p",
            "min_p", "xtc", "temperature"])
        self.assertEqual(d["dry_sequence_breakers"], ["\n", ":", "\"", "*"])

    def test_greedy_is_argmax(self) -> None:
        out = sample({"temperature": 0}, 40)
        self.assertEqual(len(out["tokens"]), 40)
        self.assertEqual(out["tokens"], out["argmax"])
        self.assertTrue(out["text"].startswith(", there was"), out["text"])

    def test_logit_bias_moves_the_choice(self) -> None:
        first = sample({"temperature": 0}, 1)["tokens"][0]
        for bias in ([[first, False]], {str(first): -100},
                     [[first, -1e30]]):
            with self.subTest(bias=bias):
                out = sample({"temperature": 0, "logit_bias": bias}, 1)
                self.assertNotEqual(out["tokens"][0], first)
                self.assertNotEqual(out["tokens"], out["argmax"])
        # A positive bias makes an unlikely token the greedy one.
        self.assertEqual(sample({"temperature": 0, "logit_bias": {
            "300": 100}}, 1)["tokens"], [300])
        settings = sampler({"logit_bias": [[first, False], ["girl", 2]]})
        self.assertEqual(settings["logit_bias"][0]["token"], first)
        self.assertGreaterEqual(len(settings["logit_bias"]), 2)

    def test_n_probs(self) -> None:
        # The model's probabilities (llama-server's default): sorted, the
        # greedy token first and its own probability given.
        out = sample({"temperature": 0, "n_probs": 5}, 20, 5)
        for step, tok in zip(out["probs"], out["tokens"]):
            ps = [p for _, p in step["top"]]
            self.assertEqual(len(ps), 5)
            self.assertEqual(ps, sorted(ps, reverse=True))
            self.assertLessEqual(sum(ps), 1 + 1e-6)
            self.assertTrue(all(0 < p <= 1 for p in ps))
            self.assertEqual(step["top"][0][0], tok)
            self.assertAlmostEqual(step["p_tok"], ps[0], places=6)
        # After the chain (post_sampling_probs): top_k 3 leaves 3 at most,
        # whose probabilities are the ones drawn from (they sum to 1).
        out = sample({"temperature": 1, "top_k": 3, "top_p": 1, "min_p": 0,
                      "seed": 7, "post_sampling_probs": True}, 20, 10)
        for step, tok in zip(out["probs"], out["tokens"]):
            ps = [p for _, p in step["top"]]
            self.assertLessEqual(len(ps), 3)
            self.assertEqual(ps, sorted(ps, reverse=True))
            self.assertAlmostEqual(sum(ps), 1, places=5)
            self.assertEqual(dict((t, p) for t, p in step["top"])[tok],
                             step["p_tok"])

    def test_seed(self) -> None:
        a = sample({"temperature": 1, "seed": 3}, 30)["tokens"]
        self.assertEqual(a, sample({"temperature": 1, "seed": 3}, 30)["tokens"])
        self.assertNotEqual(a, sample({"temperature": 1, "seed": 4}, 30)
                            ["tokens"])
        self.assertEqual(sampler({"seed": -1})["seed"], 0xFFFFFFFF)

    def test_json_schema_gives_json_that_validates(self) -> None:
        schema = {"type": "object", "properties": {
            "name": {"type": "string", "maxLength": 12},
            "age": {"type": "integer"},
            "happy": {"type": "boolean"},
            "toys": {"type": "array", "maxItems": 3,
                     "items": {"enum": ["ball", "doll", "kite"]}}},
            "required": ["name", "age", "happy"]}
        for seed in range(4):
            with self.subTest(seed=seed):
                out = sample({"temperature": 1, "seed": seed,
                              "json_schema": schema}, 300)
                self.assertNotIn("error", out)
                value = json.loads(out["text"])
                self.assertTrue(validates(value, schema), out["text"])
        # The chat path: response_format through the template's answer.
        params = apply("", ask(response_format={
            "type": "json_schema", "json_schema": {"schema": schema}}))
        params.update(temperature=0.5, seed=1)
        self.assertTrue(validates(json.loads(sample(params, 300)["text"]),
                                  schema))

    def test_a_lazy_grammar_waits_for_its_trigger(self) -> None:
        plain = sample({"temperature": 0}, 12)["text"]
        self.assertIn("little girl named Lily", plain)
        grammar = 'root ::= "girl named Bob."'
        out = sample({"temperature": 0, "grammar": grammar,
                      "grammar_lazy": True, "grammar_triggers": [
                          {"type": 1, "value": "girl"}]}, 40)
        # Free until "girl", then the grammar's to its end, then EOS.
        self.assertEqual(out["text"], ", there was a little girl named Bob.")
        out = sample({"temperature": 0, "grammar": grammar,
                      "grammar_lazy": True, "grammar_triggers": [
                          {"type": 1, "value": "dragon"}]}, 12)
        self.assertEqual(out["text"], plain)
        # A chat's tool grammar on a model that never writes its marker.
        params = apply(template(QWEN25), ask([WEATHER]))
        params.update(temperature=0)
        out = sample(params, 12, prompt=params["prompt"])
        self.assertEqual(out["tokens"], out["argmax"])

    def test_grammar_with_ignore_eos_ends_the_text(self) -> None:
        # Once the grammar is complete only an end token fits it, and
        # ignore_eos bans those: every candidate is excluded, the sampler
        # says nothing may follow, and the text ends there (the engine
        # ends the choice as at an end token), no error and no abort.
        out = sample({"temperature": 0, "ignore_eos": True,
                      "grammar": 'root ::= "girl"', "grammar_lazy": True,
                      "grammar_triggers": [{"type": 1, "value": "girl"}]},
                     40)
        self.assertNotIn("error", out)
        self.assertTrue(out["text"].endswith("girl"), out["text"])
        self.assertLess(len(out["tokens"]), 40)

    def test_clamped_where_llama_server_clamps(self) -> None:
        s = sampler({"top_p": 3, "min_p": -1, "mirostat": 7, "top_k": -5,
                     "dry_base": 0.5, "temperature": None})
        self.assertEqual((s["top_p"], s["min_p"], s["mirostat"], s["top_k"]),
                         (1, 0, 2, 0))
        self.assertAlmostEqual(s["dry_base"], 1.75, places=6)
        self.assertAlmostEqual(s["temperature"], 0.8, places=6)
        s = sampler({"samplers": "kt", "n_probs": 4, "ignore_eos": True})
        self.assertEqual(s["samplers"], ["top_k", "temperature"])
        self.assertEqual(s["n_probs"], 4)
        self.assertTrue(s["ignore_eos"])
        self.assertTrue(any(b["token"] == 2 for b in s["logit_bias"]))

    def test_bad_values_name_their_field(self) -> None:
        cases = [
            ({"top_k": "x"}, '"top_k"'),
            ({"top_k": 1.5}, '"top_k" must be an integer'),
            ({"temperature": "hot"}, '"temperature"'),
            ({"seed": 1.5}, '"seed"'),
            ({"repeat_penalty": 0}, '"repeat_penalty"'),
            ({"repeat_last_n": -1}, '"repeat_last_n"'),
            ({"dry_allowed_length": -1}, '"dry_allowed_length"'),
            ({"dry_sequence_breakers": []}, '"dry_sequence_breakers"'),
            ({"adaptive_decay": 2}, '"adaptive_decay"'),
            ({"min_keep": -2}, '"min_keep"'),
            ({"n_probs": -1}, '"n_probs"'),
            ({"ignore_eos": 1}, '"ignore_eos"'),
            ({"samplers": ["top_k", "nope"]}, '"samplers"'),
            ({"samplers": "kQ"}, '"samplers"'),
            ({"logit_bias": [[99999, 1]]}, '"logit_bias"'),
            ({"logit_bias": [[1, "big"]]}, '"logit_bias"'),
            ({"logit_bias": 5}, '"logit_bias"'),
            ({"grammar": "root ::= ("}, '"grammar"'),
            ({"grammar": "%llguidance {}"}, '"grammar"'),
            ({"json_schema": {"$ref": "#/nope"}}, '"json_schema"'),
            ({"grammar": 'root ::= "a"', "grammar_lazy": True},
             '"grammar_lazy"'),
            ({"grammar_triggers": [{"type": 9, "value": "a"}]},
             '"grammar_triggers"'),
            ({"grammar_triggers": [{"type": 0, "value": "a"}]},
             '"grammar_triggers"'),
            ({"grammar_triggers": "x"}, '"grammar_triggers"'),
            ({"preserved_tokens": [1]}, '"preserved_tokens"'),
            ({"reasoning_budget_tokens": -2}, '"reasoning_budget_tokens"'),
        ]
        for params, why in cases:
            with self.subTest(params=params):
                self.assertIn(why, sampler(params)["error"])
        self.assertIn("JSON object", sampler("[]")["error"])


# ---- serve's prompt cache (serve/tokcache.h) -------------------------------

WORDS = ("Once upon a time there was a little girl named Lily . She loved "
         "to play outside in the park with her dog , ! ? \" ' café naïve "
         "日本 \t \n  x").split(" ") + ["  ", "   ", "\n", " \n", "\t "]


def conversations(seed: int, n: int = 6, turns: int = 12,
                  extra: List[str] = []) -> List[str]:
    """n conversations' prompts, each turn the last prompt grown by a few
    words (most), cut back and grown (an edited turn, a stop string the
    client never saw), or with a word put in anywhere (an edited early
    message): what serve meets when clients resend their histories."""
    import random
    rnd = random.Random(seed)
    words = WORDS + extra

    def some(k: int) -> str:
        return "".join(rnd.choice(words) + (" " if rnd.random() < 0.8
                                            else "") for _ in range(k))
    texts = []
    for _ in range(n):
        t = some(150)
        texts.append(t)
        for _ in range(turns):
            r = rnd.random()
            if r < 0.6:
                t += some(rnd.randint(1, 30))
            elif r < 0.8:
                t = t[:rnd.randint(len(t) // 2, len(t))] + some(10)
            else:
                i = rnd.randint(0, len(t))
                t = t[:i] + rnd.choice(words) + t[i:]
            texts.append(t)
    return texts


UNICODE = ["é", "ñ", "日本語", "🙂", "e\u0301", "Ωμέγα", "\u00a0", "\u200b",
           "“quoted”", "—", "\r\n"]


def chats(seed: int, specials: List[Dict[str, Any]], special: bool,
          n: int = 4, turns: int = 14) -> List[str]:
    """n chats' prompts as a template renders them: messages between the
    vocabulary's special tokens (four picked as the template's markers,
    with the newlines and spaces templates put beside them), each turn
    most often the last prompt with a message and an answer more; else
    an answer regenerated (cut back into the last turn, grown again), an
    early message edited (a word put in), a range deleted. Messages hold
    Unicode, now and then a special token's text spelled out, a part of
    one, one beside spaces, two run together."""
    import random
    rnd = random.Random(seed)
    usable = [x["text"] for x in specials if special or not x["control"]]
    marks = rnd.sample(usable, min(4, len(usable)))
    words = WORDS + UNICODE
    # Two special tokens' texts run together where one's end is the
    # other's start ("<|endoftext|>" and ">>MIDDLE<<" in Falcon's): which
    # llama.cpp splits out depends on their lengths, not on their order.
    some_sp = rnd.sample(usable, min(200, len(usable)))
    overlaps = [a + b[k:] for a in some_sp for b in some_sp if a != b
                for k in range(1, min(len(a), len(b)))
                if a.endswith(b[:k])]

    def mark() -> str:
        return rnd.choice(marks) if marks else "\n"

    def word() -> str:
        r = rnd.random()
        if usable and r < 0.04:
            return rnd.choice(usable)
        if usable and r < 0.06:
            t = rnd.choice(usable)
            return t[:rnd.randint(1, len(t))]
        if usable and r < 0.08:
            return " " + rnd.choice(usable) + rnd.choice([" ", "\n", "  "])
        if overlaps and r < 0.11:
            return rnd.choice(overlaps)
        return rnd.choice(words)

    def some(k: int) -> str:
        return "".join(word() + (" " if rnd.random() < 0.8 else "")
                       for _ in range(k))

    def message(role: str, k: int) -> str:
        return (mark() + role + mark() + rnd.choice(["\n", "\n\n", "", " "])
                + some(k) + mark() + rnd.choice(["\n", "", " "]))
    texts = []
    for _ in range(n):
        t = message("system", 20)
        texts.append(t)
        for _ in range(turns):
            r = rnd.random()
            if r < 0.6:
                t += message("user", rnd.randint(1, 40))
                t += message("assistant", rnd.randint(1, 16))
            elif r < 0.75:
                t = t[:rnd.randint(len(t) * 3 // 4, len(t))]
                t += some(rnd.randint(1, 16)) + mark()
            elif r < 0.88:
                i = rnd.randint(0, len(t))
                t = t[:i] + word() + t[i:]
            else:
                i = rnd.randint(0, len(t))
                t = t[:i] + t[i + rnd.randint(1, 40):]
            texts.append(t)
    return texts


class PromptCache(unittest.TestCase):
    """serve's prompt cache against llama.cpp's tokenizer on the same
    texts: every prompt's tokens equal the whole text's tokenizing, for
    stories260K and every vocabulary llama.cpp's tree ships, with and
    without special tokens parsed; most continued prompts reuse a kept
    text's tokens, parted at a space (SentencePiece vocabularies that
    allow it) or at a special token (every vocabulary: tokseg.h); plain
    text in a vocabulary of the second kind alone reuses nothing, and the
    first kind's reason says why."""

    def cache(self, model: str, texts: List[str], special: bool,
              entries: int = 8) -> Dict[str, Any]:
        out = run(["tokcache", model, "1" if special else "0",
                   str(entries)], json.dumps(texts))
        self.assertEqual(out["mismatches"], [], (model, special))
        self.assertEqual(len(out["reused"]), len(texts))
        return out

    def vocab(self, name: str) -> str:
        return os.path.join(paths.llama_tree(), "models",
                            "ggml-vocab-%s.gguf" % name)

    def test_spm_vocabularies_reuse_exactly(self) -> None:
        for model in (STORIES, self.vocab("llama-spm")):
            for seed in (1, 2, 3):
                texts = conversations(seed)
                with self.subTest(model=os.path.basename(model), seed=seed):
                    out = self.cache(model, texts, False)
                    self.assertTrue(out["usable"], out.get("why"))
                    # 78 prompts, 72 of them continuing one before.
                    self.assertGreater(out["hits"], 36, out["hits"])
                    self.assertGreater(sum(out["reused"]), 5000)
                    self.assertLessEqual(out["kept"], 8)
                    self.assertLessEqual(out["bytes"], 32 << 20)

    def test_special_tokens_text(self) -> None:
        """Control tokens' text in a prompt: with special parsed, the
        prompt parts at them (tokseg.h), the kept tokens reused up to the
        last one it shares; without, the text is text (parted at
        spaces)."""
        texts = conversations(4, extra=["<s>", "</s>", "<unk>"])
        spec = self.cache(STORIES, texts, True)
        plain = self.cache(STORIES, texts, False)
        self.assertGreater(plain["hits"], 36)
        with_tag = [i for i, t in enumerate(texts)
                    if any(x in t for x in ("<s>", "</s>", "<unk>"))]
        self.assertGreater(len(with_tag), 20)
        self.assertGreater(sum(spec["reused"][i] > 0 for i in with_tag), 10)
        # Without control tokens' text, special changes nothing.
        clean = conversations(5)
        self.assertGreater(self.cache(STORIES, clean, True)["hits"], 36)

    def test_every_vocabulary_parts_at_special_tokens(self) -> None:
        """Every vocabulary file in llama.cpp's tree (SPM, BPE of every
        pre-tokenizer there, WPM, UGM), chats as templates render them,
        with special tokens parsed and not: every prompt's tokens are the
        whole text's, and with special parsed most continued prompts take
        the kept tokens up to the last special token both share."""
        names = sorted(f for f in os.listdir(os.path.join(
            paths.llama_tree(), "models")) if f.startswith("ggml-vocab-")
            and f.endswith(".gguf"))
        self.assertGreaterEqual(len(names), 15, names)
        for v, name in enumerate(names):
            model = os.path.join(paths.llama_tree(), "models", name)
            specials = run(["tokcache", model, "1", "8"], "[]")["specials"]
            runs = [dict(special=special, seed=seed, texts=chats(
                seed, specials, special)) for special in (True, False)
                for seed in (11 + 2 * v, 12 + 2 * v)]
            outs = run(["tokcache", model, "runs", "8"], json.dumps(runs))
            for r, out in zip(runs, outs):
                special, texts = r["special"], r["texts"]
                with self.subTest(vocab=name, special=special,
                                  seed=r["seed"]):
                    self.assertEqual(out["mismatches"], [])
                    self.assertTrue(out["segments"], out["segments_why"])
                    self.assertEqual(out["prompts"], len(texts))
                    if any(special or not x["control"] for x in specials):
                        # 60 prompts, 56 of them continuing one
                        self.assertGreater(out["hits"], 20, name)
                        self.assertGreater(sum(out["reused"]), 1000)

    def test_a_turn_reuses_the_history(self) -> None:
        history = "Once upon a time there was a little girl named Lily. " * 40
        turn = history + "She went to the park. "
        out = self.cache(STORIES, [history, turn, turn + "The end."], False)
        # The history's tokens but the last word's (parted at a space).
        self.assertGreater(out["reused"][1], 400, out["reused"])
        self.assertGreater(out["reused"][2], out["reused"][1])
        self.assertEqual(out["reused"][0], 0)

    def test_other_vocabularies_tokenize_whole(self) -> None:
        texts = conversations(6, n=2)
        for name in ("gpt-2", "llama-bpe"):
            with self.subTest(vocab=name):
                out = self.cache(self.vocab(name), texts, False)
                self.assertFalse(out["usable"])
                self.assertIn("SentencePiece", out["why"])
                self.assertEqual(out["hits"], 0)
                self.assertEqual(sum(out["reused"]), 0)


# ---- serve's render cache (serve/rcache.h) -------------------------------

TOOL = {"type": "function", "function": {
    "name": "get_weather", "description": "The weather in a city.",
    "parameters": {"type": "object", "properties": {
        "city": {"type": "string"}}, "required": ["city"]}}}


def chat_requests(seed: int, n: int = 3, turns: int = 12) -> List[dict]:
    """n chats' requests as clients send them: the whole message list
    each turn, most often the last list with the answer and a new user
    message; else the answer regenerated (the last assistant message
    dropped, the user's sent again), an early message edited, the last
    exchange deleted. Some chats have a system message, some tools (and
    then now and then a tool called and answered), some answers a
    reasoning block (<think>...</think>, which templates drop
    from earlier turns), Unicode throughout."""
    import random
    rnd = random.Random(seed)
    words = WORDS + UNICODE

    def text(k: int) -> str:
        return " ".join(rnd.choice(words) for _ in range(k)).strip() or "x"

    def answer() -> str:
        t = text(rnd.randint(3, 12))
        return ("<think>%s</think>%s" % (text(5), t)
                if rnd.random() < 0.3 else t)
    out = []
    for _ in range(n):
        msgs: List[dict] = []
        if rnd.random() < 0.7:
            msgs.append({"role": "system", "content": text(8)})
        extra = {"tools": [TOOL]} if rnd.random() < 0.5 else {}
        msgs.append({"role": "user", "content": text(10)})
        out.append(dict(messages=list(msgs), **extra))
        for _ in range(turns):
            r = rnd.random()
            if r < 0.65 or len(msgs) < 4:
                if extra and rnd.random() < 0.4:
                    # A tool called and answered before the reply
                    # (templates may number the calls across the list).
                    cid = "call_%d" % len(msgs)
                    msgs.append({"role": "assistant", "content": None,
                                 "tool_calls": [{
                                     "id": cid, "type": "function",
                                     "function": {
                                         "name": "get_weather",
                                         "arguments": json.dumps(
                                             {"city": text(1)})}}]})
                    msgs.append({"role": "tool", "tool_call_id": cid,
                                 "content": text(3)})
                msgs.append({"role": "assistant", "content": answer()})
                msgs.append({"role": "user", "content": text(
                    rnd.randint(2, 20))})
            elif r < 0.8:
                pass  # the same list again: its answer regenerated
            elif r < 0.9:
                i = rnd.choice([j for j, m in enumerate(msgs)
                                if isinstance(m["content"], str)])
                msgs[i] = dict(msgs[i], content=msgs[i]["content"] + " " +
                               text(2))
            else:
                del msgs[-2:]
                if msgs[-1]["role"] != "user":
                    msgs.append({"role": "user", "content": text(4)})
            out.append(dict(messages=[dict(m) for m in msgs], **extra))
    return out


class RenderCache(unittest.TestCase):
    """serve's render cache against a whole render of every request, for
    every template in llama.cpp's tree (models/templates): randomized
    chats (extensions, regenerations, edits, deletions, tools, reasoning
    blocks) render to the same prompt and the same everything else, or
    are refused by both; most continued chats render from windows."""

    def test_every_template(self) -> None:
        folder = os.path.join(paths.llama_tree(), "models", "templates")
        names = sorted(f for f in os.listdir(folder) if f.endswith(".jinja"))
        self.assertGreaterEqual(len(names), 40, names)
        # Under a sanitizer build (make asan-llamacpp) every
        # TEMPLATE_EVERY-th template: the plain build's run checks all.
        every = int(os.environ.get("TEMPLATE_EVERY", "1"))
        names = names[::every]
        windowed = 0
        for k, name in enumerate(names):
            reqs = chat_requests(100 + k)
            out = run(["renders", STORIES, os.path.join(folder, name)],
                      json.dumps(reqs))
            with self.subTest(template=name):
                self.assertEqual(out["mismatches"], [])
                self.assertEqual(len(out["how"]), len(reqs))
            if out["how"].count("window") > len(reqs) // 3:
                windowed += 1
        # Chats whose earlier messages hold tool calls render whole.
        self.assertGreater(windowed, len(names) // 2, windowed)

    def test_templates_that_read_the_whole_list(self) -> None:
        """Templates written here to depend on the whole list where a
        window cannot see it: numbered turns, the count of messages, the
        first user message quoted at the end. Every render is still the
        whole render's; the windows disagree, so those turns render
        whole. A template that marks the last message alone (a window
        sees it) renders from windows."""
        head = "{% for m in messages %}"
        tail = ("{% endfor %}{% if add_generation_prompt %}<|im_start|>"
                "assistant\n{% endif %}")
        turn = "<|im_start|>{{ m.role }}\n{{ m.content }}<|im_end|>\n"
        cases = {
            "numbered": (head + "{{ loop.index }}. " + turn + tail, False),
            "counted": ("{{ messages|length }} messages\n" + head + turn +
                        tail, False),
            "first-quoted": (head + turn + "{% endfor %}(first: {{ "
                             "messages[1].content }})", False),
            "last-marked": (head + "{% if loop.last %}LAST {% endif %}" +
                            turn + tail, True),
        }
        for name, (src, local) in cases.items():
            path = os.path.join(TMP.name, name + ".jinja")
            with open(path, "w", encoding="utf-8") as f:
                f.write(src)
            reqs = chat_requests(7)
            out = run(["renders", STORIES, path], json.dumps(reqs))
            # A list sent again (a regenerated answer) is its kept render
            # whatever the template: windows may agree on that.
            dumps = [json.dumps(r, sort_keys=True) for r in reqs]
            again = sum(d in dumps[:i] for i, d in enumerate(dumps))
            with self.subTest(template=name):
                self.assertEqual(out["mismatches"], [])
                self.assertEqual(out["how"].count("refused"), 0)
                if local:
                    self.assertGreater(out["how"].count("window"), 15)
                else:
                    self.assertLessEqual(out["how"].count("window"), again)


if __name__ == "__main__":
    unittest.main()

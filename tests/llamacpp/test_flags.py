"""evictd-llama serve as a drop-in for llama-server's command line (issue
31): every flag llama-server has, as llama.cpp's own common/arg.cpp
defines it for the server (read here, not copied), is either taken by serve
or refused in one line with its reason, never "unknown option", which is
kept for flags llama-server does not have either; and the flags that mean
something do it, against the real daemon and the real server on
stories260K: --temp 0 is greedy, --seed reproducible, -n the default
length of every route (and /props says so), --top-k 1 greedy, --top-p,
--min-p and --repeat-penalty each the answer the request's own field
gives, -c the budget the start-up line prints, the chat template's
defaults, several API keys (each taken, any other 401 in JSON), --alias,
--no-slots (GET /slots 501, /props's endpoint_slots false). Each server
listens on 127.0.0.1, an ephemeral port (--host 127.0.0.1 --port 0), and
is asked over real HTTP."""

import glob
import http.client
import json
import os
import re
import subprocess
import sys
import unittest
from typing import Dict, List, Optional, Tuple

from support import paths
from support.daemon import Daemon, Scratch
from support.openapi import Answer, contract
from support.serve import Serve

BIN = paths.evictd_llama()
MODELS = paths.llama_models()
STORIES = paths.stories_gguf()
PROMPT = "Once upon a time"
# One sequence, llama.cpp's exact settings, nothing kept between requests:
# the same request gets the same text from every server below.
QUIET = ["--exact", "-np", "1", "--no-cache-prompt"]

TMP: Optional[Scratch] = None
EVD: Optional[Daemon] = None


def arg_cpp() -> str:
    """llama.cpp's common/arg.cpp of the tree serve was built against."""
    gguf_py = os.environ.get("GGUF_PY")
    found = ([os.path.join(os.path.dirname(gguf_py), "common", "arg.cpp")]
             if gguf_py else []) + sorted(glob.glob(os.path.join(
                 MODELS, "src", "llama.cpp-*", "common", "arg.cpp")))
    for path in found:
        if os.path.exists(path):
            return path
    raise RuntimeError("llama.cpp's common/arg.cpp not found (GGUF_PY, "
                       "LLAMA_MODELS): run make evictd-llama")


def _calls(src: str):
    """The text of each add_opt(common_arg(...)...) call of arg.cpp,
    comments left out, strings kept whole."""
    i = 0
    while True:
        i = src.find("add_opt(common_arg(", i)
        if i < 0:
            return
        k, depth, text = i + len("add_opt"), 0, []
        while True:
            if src.startswith("//", k):
                k = src.index("\n", k)
                continue
            if src.startswith("/*", k):
                k = src.index("*/", k) + 2
                continue
            ch = src[k]
            if ch in "\"'":
                e = k + 1
                while src[e] != ch:
                    e += 2 if src[e] == "\\" else 1
                text.append(src[k:e + 1])
                k = e + 1
                continue
            text.append(ch)
            depth += ch == "("
            depth -= ch == ")"
            k += 1
            if depth == 0:
                break
        i = k
        yield "".join(text)


def server_flags(path: str) -> List[Tuple[List[str], int]]:
    """llama-server's flags: (spellings, how many values), a flag's
    negation ("--no-X") a row of its own. An option is the server's when
    its examples name LLAMA_EXAMPLE_SERVER or LLAMA_EXAMPLE_COMMON (every
    tool's; the default) and its excludes do not name the server, as
    common_params_parser_init keeps them."""
    with open(path, encoding="utf-8") as f:
        src = f.read()
    lists = {m.group(1): re.findall(r"LLAMA_EXAMPLE_\w+", m.group(2))
             for m in re.finditer(r"initializer_list<enum llama_example>\s+"
                                  r"(\w+)\s*=\s*\{([^}]*)\}", src)}
    out = []
    for call in _calls(src):
        m = re.match(r'\(common_arg\(\s*\{([^}]*)\}\s*,\s*(\{([^}]*)\}\s*,)?',
                     call)
        names = re.findall(r'"([^"]*)"', m.group(1))
        negs = re.findall(r'"([^"]*)"', m.group(3) or "")
        handler = re.search(r"\[[^\]]*\]\s*\(\s*common_params\s*&\s*\w*\s*"
                            r"(,[^)]*)?\)", call)
        params = handler.group(1) or ""
        ex = re.search(r"\.set_examples\((\{[^}]*\}|\w+)\)", call)
        examples = (["LLAMA_EXAMPLE_COMMON"] if ex is None else
                    re.findall(r"LLAMA_EXAMPLE_\w+", ex.group(1))
                    if ex.group(1).startswith("{") else lists[ex.group(1)])
        exc = re.search(r"\.set_excludes\(\{([^}]*)\}\)", call)
        excludes = re.findall(r"LLAMA_EXAMPLE_\w+", exc.group(1)) if exc \
            else []
        if ".set_preset_only()" in call or \
                "LLAMA_EXAMPLE_SERVER" in excludes or not (
                    "LLAMA_EXAMPLE_SERVER" in examples or
                    "LLAMA_EXAMPLE_COMMON" in examples):
            continue
        values = 0 if params == "" or "bool" in params else \
            params.count(",")
        out.append((names, values))
        if negs:
            out.append((negs, 0))
    return out


def clean(err: str, what: str) -> None:
    """No sanitizer report in a serve's stderr (make asan-llamacpp runs
    this suite against an AddressSanitizer + UBSan build)."""
    for mark in ("Sanitizer", "runtime error:"):
        if mark in err:
            raise AssertionError("%s: %s\n%s" % (what, mark, err[-4000:]))


def run_serve(*args: str, timeout: float = 60) -> Tuple[int, str]:
    p = subprocess.run([BIN, "serve"] + list(args), capture_output=True,
                       timeout=timeout, stdin=subprocess.DEVNULL)
    err = p.stderr.decode("utf-8", "replace")
    clean(err, " ".join(args))
    return p.returncode, err


class Flagged(Serve):
    """evictd-llama serve on stories260K with these flags, on 127.0.0.1 at
    a port the system picks (llama-server's --host and --port); the
    start-up line's address in .addr, its settings in .settings, which
    that line must give whole."""

    def __init__(self, *args: str) -> None:
        super().__init__(TMP.name, EVD.url, "--host", "127.0.0.1", "--port",
                         "0", *args, model=STORIES, listen=None)
        if not re.fullmatch(r"127\.0\.0\.1:\d+", self.addr) or \
                sorted(self.settings) != ["budget", "lookahead", "parallel",
                                          "sinks"] or \
                not self.line.about.startswith("evictd "):
            self.stop()
            raise RuntimeError("serve's start-up line is not whole:\n"
                               + self.log())

    def request(self, path: str, body: Optional[dict],
                headers: Optional[Dict[str, str]] = None,
                method: Optional[str] = None) -> Tuple[int, dict]:
        """A request (POST with a body, else GET) and its answer, which
        must be JSON whatever its status, and one deploy/llama/openapi.yaml
        gives for the request."""
        host, port = self.addr.rsplit(":", 1)
        c = http.client.HTTPConnection(host, int(port), timeout=60)
        c.request(method or ("POST" if body is not None else "GET"), path,
                  body=json.dumps(body).encode() if body is not None
                  else None, headers=headers or {})
        r = c.getresponse()
        raw = r.read()
        c.close()
        self.last_type = r.getheader("Content-Type", "")
        method = method or ("POST" if body is not None else "GET")
        contract(method, path, body, Answer(r.status, dict(r.getheaders()),
                                            raw))
        try:
            return r.status, json.loads(raw)
        except ValueError:
            raise AssertionError("%s %s: %d, not JSON: %r" % (
                method, path, r.status, raw[:200]))

    def get(self, path: str) -> dict:
        status, out = self.request(path, None)
        if status != 200:
            raise AssertionError("GET %s: %d %s" % (path, status, out))
        return out

    def ok(self, path: str, body: dict) -> dict:
        status, out = self.request(path, body)
        if status != 200:
            raise AssertionError("%s %s: %d %s" % (path, body, status, out))
        return out

    def text(self, **fields) -> str:
        """A legacy completion's text."""
        return self.ok("/v1/completions", dict(
            prompt=PROMPT, max_tokens=48, **fields))["choices"][0]["text"]

    def __enter__(self) -> "Flagged":
        return self

    def __exit__(self, exc_type, *exc) -> None:
        rc = self.stop()
        # SIGTERM ends serve cleanly: status 0, nothing leaked.
        if exc_type is None:
            clean(self.log(), "serve")
            if rc != 0:
                raise AssertionError("serve exited %d on SIGTERM:\n%s" % (
                    rc, self.log()[-4000:]))


def setUpModule() -> None:
    global TMP, EVD
    paths.require(BIN, STORIES)
    TMP = Scratch("evictd-flags-")
    EVD = TMP.daemon


def tearDownModule() -> None:
    if TMP is not None:
        TMP.close()


def model_context(path: str) -> int:
    """The GGUF's training context, read with the tree's gguf-py."""
    return paths.train_context(path, os.environ.get("GGUF_PY") or
                               os.path.join(os.path.dirname(os.path.dirname(
                                   arg_cpp())), "gguf-py"))


class CommandLine(unittest.TestCase):
    """Every flag of llama-server, parsed (no server started)."""

    # Flags serve takes with the meaning llama-server gives them (or, for
    # a few, as changing nothing here): these must not be refused.
    TAKEN = [
        "-m", "-t", "-tb", "-fa", "-ctk", "-ctv", "-c", "-n", "-b", "-ub",
        "--keep", "-np", "-a", "--host", "--port", "--api-key",
        "--api-key-file", "--cache-prompt", "--no-cache-prompt",
        "--cache-ram", "--temp", "--top-k", "--top-p", "--min-p",
        "--typical", "--repeat-penalty", "--repeat-last-n",
        "--presence-penalty", "--frequency-penalty", "--dry-multiplier",
        "--dry-base", "--dry-allowed-length", "--dry-penalty-last-n",
        "--dry-sequence-breaker", "--xtc-probability", "--xtc-threshold",
        "--mirostat", "--mirostat-lr", "--mirostat-ent", "--seed",
        "--samplers", "--sampler-seq", "--ignore-eos", "--logit-bias",
        "--grammar", "--grammar-file", "--json-schema", "--json-schema-file",
        "--jinja", "--no-jinja", "--chat-template", "--chat-template-file",
        "--chat-template-kwargs", "--reasoning-format", "--reasoning",
        "--reasoning-budget", "--reasoning-effort", "--metrics", "--slots",
        "--no-slots", "--no-ui", "--ui", "--webui", "--no-webui", "--path",
        "--api-prefix", "--ui-config", "--ui-config-file",
        "--cont-batching", "--context-shift",
        "--threads-http", "--timeout", "-v", "-ngl", "-kvu", "-bs",
        "--warmup", "--no-warmup",
    ]
    # And these are refused, each with its reason.
    REFUSED = [
        "-hf", "-hfr", "-hff", "--lora", "--embeddings", "--rerank",
        "--mmproj", "--slot-save-path", "--model-draft", "--props",
        "--ssl-key-file", "--no-context-shift",
    ]

    @classmethod
    def setUpClass(cls) -> None:
        cls.flags = server_flags(arg_cpp())
        d = TMP.name
        files = {"keys": "# a comment\nk3\n", "template": "{{ messages }}",
                 "ui.json": '{"theme": "dark"}',
                 "grammar": 'root ::= "a"', "schema": '{"type":"object"}'}
        for name, text in files.items():
            with open(os.path.join(d, name), "w") as f:
                f.write(text)
        # A value llama-server takes for each flag serve takes (its dummy
        # is "1"); the refused ones are refused whatever their value.
        cls.values = {
            "-c": ["8192"], "--ctx-size": ["8192"],
            "--kv-unified-per-slot": ["1024"], "-b": ["64"],
            "--batch-size": ["64"], "-ub": ["64"], "--ubatch-size": ["64"],
            "-fa": ["on"], "--flash-attn": ["on"], "-ctk": ["f16"],
            "--cache-type-k": ["q8_0"], "-ctv": ["f16"],
            "--cache-type-v": ["f32"], "-m": ["MODEL"], "--model": ["MODEL"],
            "--temp": ["0.5"], "--seed": ["-1"], "-s": ["42"],
            "--samplers": ["top_k;temperature"], "--sampler-seq": ["kt"],
            "--sampling-seq": ["kt"], "-l": ["15+1"],
            "--logit-bias": ["15-inf"], "--grammar": ['root ::= "a"'],
            "--grammar-file": [os.path.join(d, "grammar")],
            "-j": ['{"type":"object"}'], "--json-schema": ["{}"],
            "-jf": [os.path.join(d, "schema")],
            "--json-schema-file": [os.path.join(d, "schema")],
            "--chat-template": ["chatml"],
            "--chat-template-file": [os.path.join(d, "template")],
            "--chat-template-kwargs": ['{"a":1}'],
            "--reasoning-format": ["none"], "-rea": ["off"],
            "--reasoning": ["auto"], "--reasoning-effort": ["low"],
            "--api-key": ["k1,k2"],
            "--api-key-file": [os.path.join(d, "keys")],
            "--host": ["127.0.0.1"], "--alias": ["b,a"], "-a": ["x"],
            "--log-colors": ["auto"], "-fit": ["off"], "--fit": ["off"],
            "-lm": ["auto"], "--load-mode": ["auto"], "-lzm": ["auto"],
            "--lazy-mode": ["auto"], "--dry-sequence-breaker": ["\n"],
            "-dev": ["none"], "--device": ["none"], "-sm": ["none"],
            "--split-mode": ["none"], "-ts": ["1"], "--tensor-split": ["1"],
            "-ot": ["x=CPU"], "--override-tensor": ["x=CPU"],
            "-fitt": ["1024"], "--fit-target": ["1024"],
            "--path": [d], "--api-prefix": ["/llm"],
            "--ui-config": ['{"theme": "dark"}'], "--webui-config": ["{}"],
            "--ui-config-file": [os.path.join(d, "ui.json")],
            "--webui-config-file": [os.path.join(d, "ui.json")],
        }

    def parse(self, flag: str, values: int) -> Tuple[int, str]:
        """serve with -m at a missing file and the flag: a flag it takes
        gets as far as loading that model."""
        given = self.values.get(flag, ["1"] * values)
        given = [os.path.join(TMP.name, "none.gguf") if v == "MODEL" else v
                 for v in given]
        model = [] if flag in ("-m", "--model") else [
            "-m", os.path.join(TMP.name, "none.gguf")]
        return run_serve(*model, flag, *given)

    def outcome(self, flag: str, rc: int, err: str) -> str:
        """taken (it got to the model), info (--help, --version) or refused
        (one line: 'evictd-llama serve: FLAG...: REASON', or a value
        serve does not take, with the way to the help)."""
        self.assertNotIn("unknown option", err, flag)
        if rc == 1:
            self.assertIn("cannot load the target model", err, flag)
            return "taken"
        if rc == 0:
            return "info"
        self.assertEqual(rc, 2, (flag, err))
        first = err.splitlines()[0]
        self.assertTrue(first.startswith("evictd-llama serve: "), err)
        said = first[len("evictd-llama serve: "):]
        self.assertTrue(re.match(r"(%s|--[\w-]+)\b.*: \S" % re.escape(flag),
                                 said) or "wants" in said, (flag, err))
        return "refused" if len(err.splitlines()) == 1 else "value"

    def test_every_llama_server_flag(self) -> None:
        usage = subprocess.run([BIN, "serve", "--help"],
                               capture_output=True).stdout.decode()
        seen: Dict[str, str] = {}
        for names, values in self.flags:
            for flag in names:
                rc, err = self.parse(flag, values)
                seen[flag] = self.outcome(flag, rc, err)
        self.assertGreater(len(seen), 350, "arg.cpp read wrong?")
        for flag in self.TAKEN:
            self.assertEqual(seen.get(flag), "taken", flag)
        for flag in self.REFUSED:
            self.assertEqual(seen.get(flag), "refused", flag)
        for flag in ("--cors-origins", "--cors-methods", "--cors-headers",
                     "--cors-credentials", "--no-cors-credentials"):
            self.assertEqual(seen.get(flag), "taken", flag)
        # The help names every flag it takes, and lists the refused ones.
        for names, _ in self.flags:
            for flag in names:
                if flag in seen and seen[flag] != "info":
                    self.assertRegex(usage, r"(^|[ ,])%s\b" % re.escape(flag))
        counts = {k: sum(v == k for v in seen.values())
                  for k in ("taken", "refused", "value", "info")}
        print("\nllama-server's flags: %s" % counts, file=sys.stderr)
        self.assertEqual(counts["value"], 0,
                         [f for f, v in seen.items() if v == "value"])

    def test_refusal_is_one_line_with_its_reason(self) -> None:
        for args, says in (
                (("-hf", "x/y"), "-hf: no network: serve loads a local GGUF"),
                (("--embeddings",), "--embeddings: no embeddings"),
                (("--lora", "a.gguf"), "--lora: no adapters"),
                (("--mmproj", "p.gguf"), "--mmproj: no images"),
                (("--slot-save-path", "/tmp"), "--slot-save-path: serve "
                 "saves sequences itself"),
                (("-md", "d.gguf"), "-md: no speculative decoding"),
                (("--cache-reuse", "256"), "--cache-reuse 256: serve reuses"),
                (("--keep", "-1"), "--keep -1: serve's window pins"),
                (("--dry-sequence-breaker", "none"), "a request cannot ask "
                 "for no breakers")):
            rc, err = run_serve("-m", STORIES, *args)
            self.assertEqual(rc, 2, (args, err))
            self.assertIn(says, err, args)
            self.assertNotIn("unknown option", err)
        # Accepted where it asks for nothing: --cache-reuse 0.
        rc, err = run_serve("-m", os.path.join(TMP.name, "none.gguf"),
                            "--cache-reuse", "0")
        self.assertEqual(rc, 1, err)

    def test_ui_values(self) -> None:
        # The web UI's flags: values llama-server would misread are refused
        # before the model loads, each with its reason.
        d = TMP.name
        for args, says in (
                (("--api-prefix", "llm"), "--api-prefix llm: a path"),
                (("--api-prefix", "/llm/"), "--api-prefix /llm/: a path"),
                (("--api-prefix", "/"), "--api-prefix /: a path"),
                (("--ui-config", "{bad"), "--ui-config: not JSON"),
                (("--ui-config", "[1]"), "--ui-config: not a JSON object"),
                (("--ui-config-file", os.path.join(d, "no-such")),
                 "cannot read --ui-config-file"),
                (("--ui-config", "{}", "--ui-config-file",
                  os.path.join(d, "ui.json")), "not both"),
                (("--path", os.path.join(d, "no-such")),
                 "No such file or directory"),
                (("--path", os.path.join(d, "keys")), "not a folder")):
            rc, err = run_serve("-m", os.path.join(d, "none.gguf"), *args)
            self.assertEqual(rc, 2, (args, err))
            self.assertIn(says, err, args)
            self.assertNotIn("cannot load the target model", err, args)

    def test_underscores_are_dashes(self) -> None:
        # llama.cpp's parser reads a long flag's underscores as dashes
        # (llama.cpp's suite starts llama-server with --backend_sampling).
        for args in (("--backend_sampling",), ("--ctx_size", "8192"),
                     ("--no_kv_unified",)):
            rc, err = self.parse(args[0], 0) if len(args) == 1 else \
                run_serve("-m", os.path.join(TMP.name, "none.gguf"), *args)
            self.assertEqual(self.outcome(args[0], rc, err), "taken", args)
        # a short one's are not, nor is an underscore made a known flag
        for flag in ("-b_s", "--no_such_flag"):
            rc, err = run_serve("-m", STORIES, flag)
            self.assertEqual(rc, 2, flag)
            self.assertIn("unknown option '%s'" % flag, err)

    def test_unknown_is_only_for_what_llama_server_lacks(self) -> None:
        # --verbose-prompt and -p are llama.cpp's, but not the server's.
        for flag in ("--no-such-flag", "--verbose-prompt", "-p", "--frob"):
            rc, err = run_serve("-m", STORIES, flag)
            self.assertEqual(rc, 2, flag)
            self.assertIn("unknown option '%s'" % flag, err)
            everyone = [n for names, _ in server_flags(arg_cpp())
                        for n in names]
            self.assertNotIn(flag, everyone)

    def test_context_rules(self) -> None:
        for args, says in (
                (("-c", "1024", "-np", "2", "-ub", "16", "--budget", "100"),
                 "-c 1024 over -np 2 is 512 cells a sequence, not --budget "
                 "100 + lookahead 16"),
                (("-c", "1024", "-np", "2"), "-c 1024 over -np 2 is 512 "
                 "cells a sequence, which the prefill chunk (lookahead 512)"),
                (("-c", "1024", "--kv-unified-per-slot", "512"),
                 "give -c or --kv-unified-per-slot, not both"),
                (("-b", "64", "--lookahead", "32"), "--lookahead 32 and "
                 "-b/-ub (a prefill chunk of 64) disagree"),
                (("-n", "0"), "serve generates at least one token"),
                (("-n", "40000"), "-n 40000 is more than --n-predict-max")):
            rc, err = run_serve("-m", STORIES, *args)
            self.assertEqual(rc, 2, (args, err))
            self.assertIn(says, err, args)


class Meaning(unittest.TestCase):
    """The flags that mean something, against the real daemon."""

    @classmethod
    def setUpClass(cls) -> None:
        with Flagged(*QUIET) as plain:
            cls.greedy = plain.text(temperature=0)
            cls.greedy_chat = plain.ok("/v1/chat/completions", {
                "messages": [{"role": "user", "content": PROMPT}],
                "max_tokens": 24, "temperature": 0})["choices"][0]
            cls.seeded = plain.text(temperature=1.0, seed=42)
            cls.random = [plain.text(temperature=1.0) for _ in range(2)]

    def test_temp_zero_is_greedy(self) -> None:
        # Negative control: a request with nothing said samples.
        self.assertNotEqual(self.random[0], self.random[1])
        with Flagged(*QUIET, "--temp", "0") as s:
            self.assertEqual(s.text(), self.greedy)
            chat = s.ok("/v1/chat/completions", {
                "messages": [{"role": "user", "content": PROMPT}],
                "max_tokens": 24})["choices"][0]
            self.assertEqual(chat, self.greedy_chat)
            # A request's own temperature still counts.
            self.assertEqual(s.text(temperature=1.0, seed=42), self.seeded)

    def test_top_k_one_is_greedy(self) -> None:
        with Flagged(*QUIET, "--top-k", "1") as s:
            self.assertEqual(s.text(), self.greedy)
            self.assertEqual(s.text(seed=7), self.greedy)

    def test_seed_is_reproducible(self) -> None:
        with Flagged(*QUIET, "--seed", "42", "--temp", "1.0") as s:
            a, b = s.text(), s.text()
            self.assertEqual(a, b)
            self.assertEqual(a, self.seeded)
            self.assertNotEqual(a, self.greedy)
            self.assertEqual(s.text(seed=-1, temperature=0), self.greedy)

    def test_n_predict_is_every_routes_default(self) -> None:
        with Flagged(*QUIET, "-n", "7", "--ignore-eos") as s:
            out = s.ok("/v1/completions", {"prompt": PROMPT})
            self.assertEqual(out["usage"]["completion_tokens"], 7)
            self.assertEqual(out["choices"][0]["finish_reason"], "length")
            chat = s.ok("/v1/chat/completions", {
                "messages": [{"role": "user", "content": PROMPT}]})
            self.assertEqual(chat["usage"]["completion_tokens"], 7)
            native = s.ok("/completion", {"prompt": PROMPT})
            self.assertEqual(native["tokens_predicted"], 7)
            # The request's own length over it.
            out = s.ok("/v1/completions", {"prompt": PROMPT,
                                           "max_tokens": 3})
            self.assertEqual(out["usage"]["completion_tokens"], 3)
        # -1: until an end token or --n-predict-max (never for
        # --ignore-eos), where /v1/completions alone would stop at 16.
        with Flagged(*QUIET, "-n", "-1", "--n-predict-max", "40",
                     "--ignore-eos") as s:
            out = s.ok("/v1/completions", {"prompt": PROMPT})
            self.assertEqual(out["usage"]["completion_tokens"], 40)
        with Flagged(*QUIET, "--ignore-eos") as s:
            out = s.ok("/v1/completions", {"prompt": PROMPT})
            self.assertEqual(out["usage"]["completion_tokens"], 16)

    def test_ctx_size_is_the_budget(self) -> None:
        trained = model_context(STORIES)
        for args, want in (
                (("-c", "1024", "-np", "2", "-ub", "16"),
                 {"budget": 496, "lookahead": 16, "parallel": 2}),
                (("-c", "2048", "-np", "4", "-b", "64"),
                 {"budget": 448, "lookahead": 64, "parallel": 4}),
                # --kv-unified changes nothing: a sequence's cells are
                # still its own, N/P of them.
                (("-c", "2048", "-np", "4", "-b", "64", "--kv-unified"),
                 {"budget": 448, "lookahead": 64, "parallel": 4}),
                (("-c", "1024", "-np", "2", "-ub", "16", "--budget", "496"),
                 {"budget": 496, "lookahead": 16}),
                (("-c", "0", "-np", "2", "-ub", "16"),
                 {"budget": trained // 2 - 16, "lookahead": 16}),
                (("--kv-unified-per-slot", "300", "--lookahead", "44"),
                 {"budget": 256, "lookahead": 44}),
                (("--keep", "3", "--budget", "64", "--lookahead", "8"),
                 {"budget": 64, "sinks": 4, "lookahead": 8}),
                (("-np", "-1",), {"parallel": 8})):
            with Flagged(*args) as s:
                got = {k: s.settings[k] for k in want}
                self.assertEqual(got, want, args)
        # The budget -c gave is the one the sessions get: the window of a
        # long generation holds budget + lookahead cells at most, so a
        # 300-token answer runs on past a context of 64 + 16.
        with Flagged("-c", "80", "-ub", "16", "-np", "1", "--temp", "0",
                     "--ignore-eos", "--sinks", "4") as s:
            self.assertEqual(s.settings["budget"], 64)
            out = s.ok("/v1/completions", {"prompt": PROMPT,
                                           "max_tokens": 300})
            self.assertEqual(out["usage"]["completion_tokens"], 300)

    def test_chat_template_and_its_arguments(self) -> None:
        template = os.path.join(TMP.name, "greeting.jinja")
        with open(template, "w") as f:
            f.write("{%- for m in messages %}<{{ m.role }}>{{ m.content }}\n"
                    "{% endfor %}{% if greeting is defined %}{{ greeting }}"
                    "{% endif %}<assistant>")
        messages = [{"role": "user", "content": "Hi"}]

        def prompt_tokens(s: Flagged, **fields) -> int:
            return s.ok("/v1/chat/completions", dict(
                messages=messages, max_tokens=1, **fields))[
                    "usage"]["prompt_tokens"]

        with Flagged(*QUIET, "--chat-template-file", template) as s:
            bare = prompt_tokens(s)
            hello = prompt_tokens(s, chat_template_kwargs={
                "greeting": "hello there my good friend"})
            self.assertGreater(hello, bare)
        with Flagged(*QUIET, "--chat-template-file", template,
                     "--chat-template-kwargs",
                     '{"greeting":"hello there my good friend"}') as s:
            self.assertEqual(prompt_tokens(s), hello)
            # The request's own argument over the server's, key by key.
            self.assertEqual(prompt_tokens(s, chat_template_kwargs={
                "greeting": ""}), bare)
            self.assertEqual(prompt_tokens(s, chat_template_kwargs={
                "other": 1}), hello)
        with open(template) as f:
            source = f.read()
        with Flagged(*QUIET, "--chat-template", source) as s:
            self.assertEqual(prompt_tokens(s), bare)
        # llama.cpp's built-in list without Jinja; a name with it is
        # refused as it would render the name.
        with Flagged(*QUIET, "--no-jinja", "--chat-template", "llama2") as s:
            self.assertNotEqual(prompt_tokens(s), bare)
        rc, err = run_serve("-m", STORIES, "--evictd", EVD.url,
                            "--chat-template", "llama2", "--budget", "64",
                            "--sinks", "4", "--lookahead", "16", "--host",
                            "127.0.0.1", "--port", "0")
        self.assertEqual(rc, 1, err)
        self.assertIn("the chat template", err)

    def test_api_keys(self) -> None:
        keys = os.path.join(TMP.name, "api-keys")
        with open(keys, "w") as f:
            f.write("# the team's\nk3\n\n#k4\n")
        body = {"prompt": PROMPT, "max_tokens": 1}
        with Flagged(*QUIET, "--api-key", "k1,k2", "--api-key-file",
                     keys) as s:
            # Each key, in each of llama-server's ways of giving it.
            for header in ("Authorization", "X-Api-Key"):
                for key in ("k1", "k2", "k3"):
                    value = ("Bearer " + key if header == "Authorization"
                             else key)
                    status, out = s.request("/v1/completions", body,
                                            {header: value})
                    self.assertEqual(status, 200, (header, key, out))
                    self.assertEqual(out["usage"]["completion_tokens"], 1)
            status, _ = s.request("/v1/completions", body,
                                  {"Authorization": "k2"})
            self.assertEqual(status, 200)
            # Any other key, or none, is a 401 in JSON that changes
            # nothing; a commented line of the file is no key.
            for headers in ({"Authorization": "Bearer k4"},
                            {"Authorization": "Bearer #k4"},
                            {"Authorization": "Bearer k1,k2"},
                            {"Authorization": "Bearer k1 "},
                            {"Authorization": "Bearer "},
                            {"X-Api-Key": "k12"}, {"X-Api-Key": ""}, {}):
                for path, req in (("/v1/completions", body),
                                  ("/props", None), ("/slots", None),
                                  ("/metrics", None)):
                    status, out = s.request(path, req, headers)
                    self.assertEqual(status, 401, (headers, path, out))
                    self.assertIn("application/json", s.last_type)
                    self.assertEqual(out["error"]["code"],
                                     "invalid_api_key", out)
                    self.assertEqual(out["error"]["type"],
                                     "authentication_error", out)
            # Probes need none.
            status, out = s.request("/health", None)
            self.assertEqual(status, 200, out)
            status, out = s.request("/props", None, {"X-Api-Key": "k3"})
            self.assertEqual(status, 200, out)
        # Without --api-key, no key is asked for.
        with Flagged(*QUIET) as s:
            status, _ = s.request("/v1/completions", body)
            self.assertEqual(status, 200)
        # A key list or file of no key would ask for none: refused.
        empty = os.path.join(TMP.name, "no-keys")
        with open(empty, "w") as f:
            f.write("# nothing\n\n")
        for args, says in ((("--api-key", ","), "--api-key holds no key"),
                           (("--api-key-file", empty),
                            "--api-key-file holds no key"),
                           (("--api-key", "a b"), "the API key must be "
                            "printable ASCII without blanks")):
            rc, err = run_serve("-m", STORIES, *args)
            self.assertEqual(rc, 2, (args, err))
            self.assertIn(says, err, args)

    def test_sampler_flags_change_the_answer(self) -> None:
        # Each flag gives, by default, the answer the request's own field
        # gives on a server without it, which is not the answer without
        # either: the default was changed, and changed to that value.
        with Flagged(*QUIET) as plain:
            cases = []
            for flag, value, field, base in (
                    ("--top-p", "0.3", "top_p",
                     {"temperature": 1.0, "seed": 42}),
                    ("--min-p", "0.4", "min_p",
                     {"temperature": 1.0, "seed": 42}),
                    ("--top-k", "3", "top_k",
                     {"temperature": 1.5, "seed": 42}),
                    ("--repeat-penalty", "1.6", "repeat_penalty",
                     {"temperature": 0}),
                    ("--presence-penalty", "1.5", "presence_penalty",
                     {"temperature": 0})):
                before = plain.text(**base)
                want = plain.text(**base, **{field: json.loads(value)})
                self.assertNotEqual(want, before, (flag, "a value that "
                                                   "changes nothing"))
                cases.append((flag, value, base, before, want))
        for flag, value, base, before, want in cases:
            with Flagged(*QUIET, flag, value) as s:
                got = s.text(**base)
                self.assertEqual(got, want, flag)
                self.assertNotEqual(got, before, flag)
                # /props reports the default under llama-server's name.
                params = s.get("/props")["default_generation_settings"][
                    "params"]
                key = flag[2:].replace("-", "_")
                self.assertAlmostEqual(params[key], float(value), 6, flag)

    def test_no_slots(self) -> None:
        # --slots is the default, and llama-server's: /slots answers.
        with Flagged(*QUIET) as s:
            slots = s.get("/slots")
            self.assertEqual(len(slots), 1)
            self.assertEqual(slots[0]["id"], 0)
            self.assertIs(s.get("/props")["endpoint_slots"], True)
        with Flagged(*QUIET, "--no-slots") as s:
            status, out = s.request("/slots", None)
            self.assertEqual(status, 501, out)
            self.assertIn("application/json", s.last_type)
            self.assertEqual(out["error"]["type"], "not_supported_error")
            self.assertEqual(out["error"]["code"], "not_supported")
            self.assertIn("--no-slots", out["error"]["message"])
            self.assertIs(s.get("/props")["endpoint_slots"], False)
            # Nothing else changes: a completion is answered.
            self.assertEqual(s.text(temperature=0), self.greedy)
        # The last of the two counts, as in llama-server.
        with Flagged(*QUIET, "--no-slots", "--slots") as s:
            self.assertEqual(len(s.get("/slots")), 1)
            self.assertIs(s.get("/props")["endpoint_slots"], True)

    def test_warmup(self) -> None:
        # --warmup is the default, and llama-server's: one pass before
        # serving, which leaves nothing in the cache (the first request's
        # text is the one a server without the pass gives).
        with Flagged(*QUIET) as s:
            self.assertIn("warm-up pass", s.log())
            self.assertEqual(s.text(temperature=0), self.greedy)
        with Flagged(*QUIET, "--no-warmup") as s:
            self.assertNotIn("warm-up pass", s.log())
            self.assertEqual(s.text(temperature=0), self.greedy)
        with Flagged(*QUIET, "--no-warmup", "--warmup") as s:
            self.assertIn("warm-up pass", s.log())

    def test_props_reports_the_defaults(self) -> None:
        with Flagged(*QUIET, "--n-predict-max", "40") as s:
            params = s.get("/props")["default_generation_settings"]["params"]
            self.assertEqual(params["n_predict"], 40)
            self.assertEqual(params["max_tokens"], 40)
            self.assertNotEqual(params["temperature"], 0.25)
        with Flagged(*QUIET, "--n-predict-max", "40", "-n", "7", "--temp",
                     "0.25", "--seed", "5", "-a", "tiny") as s:
            props = s.get("/props")
            params = props["default_generation_settings"]["params"]
            self.assertEqual(params["n_predict"], 7)
            self.assertEqual(params["max_tokens"], 7)
            self.assertAlmostEqual(params["temperature"], 0.25, 6)
            self.assertEqual(params["seed"], 5)
            self.assertEqual(props["model_alias"], "tiny")
            self.assertEqual(props["total_slots"], 1)

    def test_alias(self) -> None:
        with Flagged(*QUIET, "-a", "zed, alpha ,beta") as s:
            out = s.ok("/v1/completions", {"prompt": PROMPT,
                                           "max_tokens": 1})
            self.assertEqual(out["model"], "alpha")
            # GET /v1/models: every name, sorted and each once, as
            # llama-server's; no --tags, none.
            m = s.get("/v1/models")["data"][0]
            self.assertEqual((m["id"], m["aliases"], m["tags"]),
                             ("alpha", ["alpha", "beta", "zed"], []))
        with Flagged(*QUIET, "--tags", "small, chat,small,,fim") as s:
            m = s.get("/v1/models")["data"][0]
            self.assertEqual((m["aliases"], m["tags"]),
                             ([], ["chat", "fim", "small"]))

    def test_verbose_answers_carry_the_prompt(self) -> None:
        # llama-server's --verbose: every OpenAI answer carries __verbose,
        # /completion's answer with the decoded prompt (BOS, template);
        # a request's "verbose" says otherwise for itself.
        chat = {"messages": [{"role": "system", "content": "Book"},
                             {"role": "user", "content": "Hi there"}],
                "max_tokens": 2}
        with Flagged(*QUIET, "--verbose") as s:
            v = s.ok("/v1/chat/completions", chat)["__verbose"]
            self.assertTrue(v["prompt"].startswith("<s> <|im_start|>system"),
                            v["prompt"])
            self.assertIn("Hi there<|im_end|>", v["prompt"])
            self.assertEqual(v["tokens_predicted"], 2)
            out = s.ok("/v1/completions", {"prompt": PROMPT,
                                           "max_tokens": 3})
            self.assertEqual(out["__verbose"]["content"],
                             out["choices"][0]["text"])
            self.assertNotIn("__verbose", s.ok("/v1/chat/completions",
                                               dict(chat, verbose=False)))
        # --debug is llama.cpp's log alone: answers as without it.
        with Flagged(*QUIET, "--debug") as s:
            self.assertNotIn("__verbose", s.ok("/v1/chat/completions", chat))
        with Flagged(*QUIET) as s:
            self.assertNotIn("__verbose", s.ok("/v1/chat/completions", chat))
            self.assertIn("Book", s.ok("/v1/chat/completions", dict(
                chat, verbose=True))["__verbose"]["prompt"])
            status, out = s.request("/v1/chat/completions",
                                    dict(chat, verbose="yes"))
            self.assertEqual((status, out["error"]["param"]),
                             (400, "verbose"))

    def test_sampler_defaults_are_checked_at_start(self) -> None:
        for args, says in ((("--top-k", "1.5"), "--top-k: \"top_k\" must "
                            "be an integer"),
                           (("-l", "99999+1"), "--logit-bias: "),
                           (("--samplers", "top_k;nope"), "no sampler "
                            "named \"nope\"")):
            rc, err = run_serve("-m", STORIES, "--evictd", EVD.url, *args)
            self.assertEqual(rc, 2, (args, err))
            self.assertIn(says, err, args)


if __name__ == "__main__":
    unittest.main()

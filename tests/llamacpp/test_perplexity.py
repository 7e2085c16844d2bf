#!/usr/bin/python3
"""evictd-llama perplexity against answers known without it (make
e2e-llamacpp runs it after test_llamacpp.py and test_positions.py).

Every run goes through the real daemon ($EVICTD_BIN on a loopback port):
the window and sinks policies are evictd's answers, one batch per token.

- A model of all-zero weights ($LLAMA_MODELS/synthetic-zero.gguf) has
  every logit 0: each token's NLL is log 258, the perplexity exactly 258
  for every policy.
- A model whose attention and FFN outputs are zero (synthetic-bigram.gguf)
  has logits that depend on the current token alone (embed @
  rmsnorm(embed[token])): the NLL of each token is computed here in closed
  form from the GGUF's own embedding matrix, and every policy must give
  the same.
- The trained tiny model (evictd-lm.gguf): every token's NLL under full
  attention, the window and sinks equals the float64 PyTorch reference
  (reference.forward_rows over the rows of reference.Window, the README's
  policy), in both position modes, within TOL.
- A daemon restarted without its state mid-run: the sessions re-homed,
  every NLL that of the undisturbed run (and the reference's); with
  re-homing off (EVICTD_LLAMA_REHOME=off) the run fails.
- The outputs (table, JSON fields, a well-formed SVG) and refusals.
"""

import json
import math
import os
import subprocess
import unittest
import xml.etree.ElementTree as ET

import numpy as np

os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")

import torch  # noqa: E402

import model as lm  # noqa: E402
from support import generate as gen  # noqa: E402
from support import paths  # noqa: E402
from support import reference as ref  # noqa: E402
from support.daemon import Daemon, Scratch  # noqa: E402

TOL = gen.TOL
VOCAB = 258
ZERO_GGUF = paths.llama_model("synthetic-zero.gguf")
BIGRAM_GGUF = paths.llama_model("synthetic-bigram.gguf")

TMP = None
DAEMON = None
MODEL = None


def setUpModule() -> None:
    global TMP, DAEMON, MODEL
    paths.require(gen.BIN, gen.TARGET_GGUF, ZERO_GGUF, BIGRAM_GGUF)
    torch.set_num_threads(1)
    lm.rope_tables = ref.ggml_rope_tables
    MODEL = lm.load(lm.WEIGHTS).double()
    TMP = Scratch("evictd-ppl-")
    DAEMON = TMP.daemon


def tearDownModule() -> None:
    if TMP is not None:
        TMP.close()


def text_file(name: str, data: bytes) -> str:
    path = os.path.join(TMP.name, name)
    with open(path, "wb") as f:
        f.write(data)
    return path


def ppl(*args: str, check: bool = True) -> subprocess.CompletedProcess:
    p = subprocess.run([gen.BIN, "perplexity", "--evictd", DAEMON.url]
                       + list(args), stdin=subprocess.DEVNULL,
                       capture_output=True, timeout=300)
    if check and p.returncode != 0:
        raise AssertionError("evictd-llama perplexity failed:\n"
                             + p.stderr.decode("utf-8", "replace"))
    return p


def ppl_json(model: str, path: str, *args: str) -> dict:
    return json.loads(ppl("-m", model, "--json", *args, path).stdout)


def logsumexp(x: np.ndarray) -> float:
    m = float(x.max())
    return m + math.log(float(np.exp(x - m).sum()))


def gguf_embedding(path: str) -> np.ndarray:
    """token_embd.weight of a GGUF, read with llama.cpp's own gguf-py."""
    r = paths.import_gguf(gen.gguf_py_dir()).GGUFReader(path)
    t = next(t for t in r.tensors if t.name == "token_embd.weight")
    return np.array(t.data, dtype=np.float64).reshape(VOCAB, -1)


class Perplexity(unittest.TestCase):

    def policies(self, j: dict) -> dict:
        return {(p["policy"], p["budget"]): p for p in j["policies"]}

    def test_uniform_model_is_258_everywhere(self) -> None:
        path = text_file("u.txt", gen.prompt(0, 200))
        for mode in ("original", "cache"):
            j = ppl_json(ZERO_GGUF, path, "--budgets", "8,32",
                         "--positions", mode)
            self.assertEqual(j["tokens"], 200)
            self.assertEqual(len(j["policies"]), 5)
            for p in j["policies"]:
                self.assertEqual(len(p["nll"]), 200)
                for x in p["nll"]:
                    self.assertAlmostEqual(x, math.log(VOCAB), places=9)
                self.assertAlmostEqual(p["perplexity"], VOCAB, places=6)
                # 200 tokens, all within the training context (1024).
                self.assertAlmostEqual(p["perplexity_within_train"], VOCAB,
                                       places=6)
                self.assertIsNone(p["perplexity_beyond_train"])
                self.assertIsNone(p["over_2x_at"])

    def test_bigram_model_closed_form(self) -> None:
        data = gen.prompt(1, 300)
        path = text_file("b.txt", data)
        e = gguf_embedding(BIGRAM_GGUF)
        # output_norm's weight is ones (std-1 scale, see export_gguf.py).
        toks = [256] + list(data)
        want = []
        for a, b in zip(toks, toks[1:]):
            x = e[a] / math.sqrt(float(np.mean(e[a] ** 2)) + 1e-5)
            logits = e @ x
            want.append(logsumexp(logits) - logits[b])
        mean = sum(want) / len(want)
        # The answer depends on the text (not a constant to match).
        self.assertGreater(float(np.std(want)), 0.5)
        for mode in ("original", "cache"):
            j = ppl_json(BIGRAM_GGUF, path, "--budgets", "16,64",
                         "--positions", mode)
            for p in j["policies"]:
                diff = max(abs(x - y) / max(1, abs(y))
                           for x, y in zip(p["nll"], want))
                self.assertLessEqual(diff, TOL, (mode, p["policy"],
                                                 p["budget"]))
                self.assertAlmostEqual(p["mean_nll"], mean, delta=TOL)
                self.assertAlmostEqual(p["perplexity"], math.exp(mean),
                                       delta=TOL * math.exp(mean))

    def reference_nll(self, toks, rows, mode):
        qpos, kpos = ref.rope_positions(mode, rows)
        with torch.no_grad():
            logits = ref.forward_rows(MODEL, toks[:-1], rows, qpos, kpos)
        lse = torch.logsumexp(logits, -1)
        return [float(lse[i] - logits[i, toks[i + 1]])
                for i in range(len(toks) - 1)]

    def test_tiny_model_matches_reference(self) -> None:
        data = gen.prompt(2, 120)
        path = text_file("t.txt", data)
        toks = [256] + list(data)
        n = len(toks) - 1  # tokens scored; positions 0..n-1 computed
        for mode in ("original", "cache"):
            j = ppl_json(gen.TARGET_GGUF, path, "--budgets", "12,40",
                         "--sinks", "4", "--positions", mode)
            self.assertEqual(j["positions"], mode)
            got = self.policies(j)
            full = [tuple(range(p + 1)) for p in range(n)]
            checks = [(("full", None), full)]
            for budget in (12, 40):
                for name, sinks in (("window", 0), ("sinks", 4)):
                    w = ref.Window(budget, sinks, 1)
                    rows = [(0,)]
                    for p in range(1, n):
                        r, _ = w.step([p], False)
                        rows.append(r[p])
                    checks.append(((name, budget), rows))
            refs = {}
            for key, rows in checks:
                want = refs[key] = self.reference_nll(toks, rows, mode)
                have = got[key]["nll"]
                self.assertEqual(len(have), n)
                diff = max(abs(x - y) / max(1, abs(y))
                           for x, y in zip(have, want))
                self.assertLessEqual(diff, TOL, (mode, key, diff))
            # A window of 12 loses something: the comparison tells the
            # policies apart by far more than TOL.
            apart = max(abs(x - y) for x, y in zip(refs[("window", 12)],
                                                    refs[("full", None)]))
            self.assertGreater(apart, 100 * TOL)

    def restarted(self, path: str, args: list, env: dict
                  ) -> subprocess.CompletedProcess:
        """perplexity against a daemon of its own, killed with SIGKILL once
        the window of budget 12 has reached position 250, and restarted
        without state."""
        d = Daemon.started(TMP.name)
        try:
            p = subprocess.Popen([gen.BIN, "perplexity", "--evictd", d.url]
                                 + args + [path], stdin=subprocess.DEVNULL,
                                 stdout=subprocess.PIPE,
                                 stderr=subprocess.PIPE,
                                 env=dict(os.environ, **env))
            try:
                gen.kill_at(d, p, "ppl-%d.12.window" % p.pid, 250)
            finally:
                out, err = p.communicate(timeout=300)
            return subprocess.CompletedProcess(p.args, p.returncode, out,
                                               err)
        finally:
            d.stop()

    def test_restart_without_state(self) -> None:
        # The daemon restarted WITHOUT its state mid-run: each window's
        # next step is 404 unknown_session, perplexity re-homes the
        # sessions of that batch (adopts what each cache holds) and sends
        # their items again. Every NLL equals the undisturbed run's, and
        # the reference's. With re-homing off the run stops instead.
        data = gen.prompt(6, 600)
        path = text_file("r.txt", data)
        toks = [256] + list(data)
        args = ["-m", gen.TARGET_GGUF, "--budgets", "12,40", "--sinks", "4",
                "--json"]
        base = ppl_json(gen.TARGET_GGUF, path, *args[2:])
        p = self.restarted(path, args, {})
        self.assertEqual(p.returncode, 0, p.stderr)
        got = json.loads(p.stdout)
        self.assertEqual([x["nll"] for x in got["policies"]],
                         [x["nll"] for x in base["policies"]])
        for budget, name, sinks in ((12, "window", 0), (40, "sinks", 4)):
            w = ref.Window(budget, sinks, 1)
            rows = [(0,)]
            for q in range(1, len(toks) - 1):
                r, _ = w.step([q], False)
                rows.append(r[q])
            want = self.reference_nll(toks, rows, "original")
            have = self.policies(got)[(name, budget)]["nll"]
            diff = max(abs(x - y) / max(1, abs(y))
                       for x, y in zip(have, want))
            self.assertLessEqual(diff, TOL, (name, budget, diff))
        p = self.restarted(path, args, {"EVICTD_LLAMA_REHOME": "off"})
        self.assertEqual(p.returncode, 1)
        self.assertIn(b"the daemon lost the session", p.stderr)

    def test_table_and_svg(self) -> None:
        path = text_file("s.txt", gen.prompt(3, 300))
        svg = os.path.join(TMP.name, "p.svg")
        p = ppl("-m", BIGRAM_GGUF, "--budgets", "16,64", "--trail", "50",
                "--svg", svg, "--svg-budget", "64", path)
        out = p.stdout.decode()
        self.assertIn("300 tokens scored", out)
        self.assertIn("| budget | window | sinks (4) |", out)
        rows = [l for l in out.splitlines() if l.startswith("| 16 |")
                or l.startswith("| 64 |")]
        self.assertEqual(len(rows), 2)
        self.assertIn("never", rows[0])  # the bigram model never degrades
        root = ET.parse(svg).getroot()
        self.assertTrue(root.tag.endswith("svg"))
        ns = "{http://www.w3.org/2000/svg}"
        lines = root.findall(ns + "polyline")
        self.assertEqual(len(lines), 3)  # full, window, sinks at 64
        for pl in lines:
            pts = pl.get("points").split()
            self.assertGreater(len(pts), 100)
        text = " ".join(t.text or "" for t in root.iter(ns + "text"))
        self.assertIn("budget 64", text)

    def test_over_2x_is_found(self) -> None:
        # The trained model with a window of 2 positions is far worse than
        # full attention: the position where its trailing perplexity first
        # exceeds twice full attention's is the first position checked
        # where that holds, recomputed here from the JSON's own NLLs.
        path = text_file("o.txt", gen.prompt(4, 200))
        j = ppl_json(gen.TARGET_GGUF, path, "--budgets", "2,150",
                     "--sinks", "1", "--trail", "20")
        pol = self.policies(j)
        full = pol[("full", None)]["nll"]
        for key in (("window", 2), ("sinks", 2), ("window", 150)):
            nll = pol[key]["nll"]
            want = None
            for i in range(19, len(nll)):
                a = sum(nll[i - 19:i + 1]) / 20
                b = sum(full[i - 19:i + 1]) / 20
                if math.exp(a) > 2 * math.exp(b):
                    want = i + 1
                    break
            self.assertEqual(pol[key]["over_2x_at"], want, key)
        self.assertIsNotNone(pol[("window", 2)]["over_2x_at"])

    def test_tls_and_token(self) -> None:
        # perplexity takes every command's evictd options: a daemon behind
        # TLS that wants a bearer token is reached with --cafile and
        # --token-file and gives the very figures of a plain one; without
        # the token it refuses (401), and without the CA its certificate
        # is not trusted. Its sessions are gone at the end.
        key = os.path.join(TMP.name, "tls.key")
        cert = os.path.join(TMP.name, "tls.pem")
        subprocess.run(["openssl", "req", "-x509", "-newkey", "ec",
                        "-pkeyopt", "ec_paramgen_curve:P-256", "-nodes",
                        "-keyout", key, "-out", cert, "-days", "2", "-subj",
                        "/CN=localhost", "-addext",
                        "subjectAltName=DNS:localhost,IP:127.0.0.1"],
                       check=True, capture_output=True)
        token = text_file("token", b"a-token-of-some-length\n")
        secure = Daemon.started(TMP.name, "--tls-cert", cert, "--tls-key",
                                key, "--token-file", token)
        try:
            path = text_file("tls.txt", gen.prompt(5, 120))
            args = ["-m", gen.TARGET_GGUF, "--budgets", "16", "--json", path]
            plain = json.loads(ppl(*args).stdout)

            def run(*opts: str) -> subprocess.CompletedProcess:
                return subprocess.run(
                    [gen.BIN, "perplexity", "--evictd",
                     "https://" + secure.addr, "--reconnect-ms", "0"]
                    + list(opts) + args, stdin=subprocess.DEVNULL,
                    capture_output=True, timeout=300)

            p = run("--cafile", cert, "--token-file", token)
            self.assertEqual(p.returncode, 0, p.stderr)
            got = json.loads(p.stdout)
            self.assertEqual([x["nll"] for x in got["policies"]],
                             [x["nll"] for x in plain["policies"]])
            p = run("--cafile", cert)
            self.assertEqual(p.returncode, 1)
            self.assertIn(b"401 unauthorized", p.stderr)
            p = run("--token-file", token)
            self.assertEqual(p.returncode, 1)
            self.assertIn(b"connection_failed", p.stderr)
            out = subprocess.run(["curl", "-sS", "--cacert", cert, "-H",
                                  "Authorization: Bearer "
                                  "a-token-of-some-length",
                                  "https://%s/metrics" % secure.addr],
                                 capture_output=True, check=True).stdout
            live = [l for l in out.decode().splitlines()
                    if l.startswith("evictd_sessions ")]
            self.assertEqual(live, ["evictd_sessions 0"])
        finally:
            secure.stop()

    def test_refusals(self) -> None:
        good = text_file("g.txt", b"hello")
        empty = text_file("e.txt", b"")
        cases = [
            (["-m", ZERO_GGUF, os.path.join(TMP.name, "missing.txt")],
             "cannot read"),
            (["-m", ZERO_GGUF, "--budgets", "64,,8", good], "--budgets"),
            (["-m", ZERO_GGUF, "--budgets", "0", good], "--budgets"),
            (["-m", ZERO_GGUF, "--budgets", "8,8", good], "twice"),
            (["-m", ZERO_GGUF, "--budgets", "4,64", good],
             "budget 4 leaves the sinks policy no window"),
            (["-m", ZERO_GGUF, "--svg-budget", "7", good], "not one of"),
            (["-m", ZERO_GGUF, empty], "empty"),
            (["-m", ZERO_GGUF, "--positions", "both", good], "--positions"),
            ([good], "-m MODEL.gguf is required"),
            (["-m", ZERO_GGUF], "no FILE"),
            (["-m", os.path.join(TMP.name, "no.gguf"), good],
             "cannot load"),
        ]
        for args, msg in cases:
            p = ppl(*args, check=False)
            err = p.stderr.decode("utf-8", "replace")
            self.assertNotEqual(p.returncode, 0, args)
            self.assertIn(msg, err, args)
        h = ppl("--help")
        self.assertIn("--svg-budget", h.stdout.decode())


if __name__ == "__main__":
    unittest.main()

#!/usr/bin/python3
"""llama.cpp decoding through evictd, every logit checked (make e2e-llamacpp).

Each test runs evictd-llama ($EVICTD_LLAMA) — unmodified llama.cpp whose
KV cache loses exactly the positions the real daemon ($EVICTD_BIN, on a
loopback port or a unix socket) names — on deploy/model's weights as GGUF
($LLAMA_MODELS/evictd-lm.gguf, draft.gguf), with --dump: every evictd
request, every removal from the cache and every logit llama.cpp computed.
reference.replay then rebuilds, from the README's policy alone, what each
token must have attended to, checks that the engine's removals left
exactly that in the cache (and that llama.cpp's own span of each sequence
agrees before every pass), and
computes the same weights in PyTorch (deploy/model/model.py, float64)
attending over exactly those positions: every logit at every step must
agree within TOL.

TOL = 1e-4, as |a - b| / max(1, |b|): llama.cpp computes in float32 (F32
K/V, no flash attention, one thread), the reference in float64 with
llama.cpp's own float32 RoPE angles (reference.ggml_rope_tables says why),
so the difference is llama.cpp's rounding: dot products of 32 to 344
terms, softmaxes over up to 260 positions and four layers, each a few
float32 ulps (1.2e-7 relative). The largest difference measured over all
scenarios on the development machine is 2.0e-5 (speculative with sinks 4,
3,416 rows, in test_restart_without_state: its logits are the
undisturbed run's), and most are 3e-6 to 9e-6: TOL leaves a factor of 5
for other CPUs and builds, while a real error costs far more: test_negative_control runs the
engine with a window one position wider and finds logits 0.44 off (over
4,000 x TOL), besides the rows themselves.

Re-homing (test_restart_without_state, test_stale_state): a daemon
restarted without its state, or from an older copy of it, mid-generation;
the engine adopts what its cache holds and goes on, and its text and
every logit must equal the undisturbed run's, byte for byte, besides
passing the reference. Their negative controls run the same with
EVICTD_LLAMA_REHOME=off (the engine as it was before re-homing; no-expect:
re-homing without the precondition), a variable for the tests only, and
must fail.

Run: `make e2e-llamacpp` (builds llama.cpp, evictd-llama and the GGUF
files first), or, with those built, `/usr/bin/python3
tests/llamacpp/test_llamacpp.py -v [Case.test_name]`.
"""

import dataclasses
import os
import shutil
import signal
import subprocess
import unittest
from typing import Dict, List, Optional, Tuple

os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")

import torch  # noqa: E402

import model as lm  # noqa: E402
from evictd_client import EvictdClient, UnknownSession  # noqa: E402
from proxy import LosingProxy  # noqa: E402
from support import generate as gen  # noqa: E402
from support import paths  # noqa: E402
from support import reference as ref  # noqa: E402
from support.daemon import Daemon  # noqa: E402
from support.generate import (BIN, DRAFT_GGUF, RESULTS,  # noqa: E402
                              TARGET_GGUF, TOL, Engine, gguf_py_dir,
                              kill_at, kill_midway, prompt, wait_newest)

REPO = paths.REPO
MODELS = paths.llama_models()
setUpModule = gen.set_up
tearDownModule = gen.tear_down


class Case(Engine):

    # -- the scenarios --

    def test_window(self) -> None:
        # 40 + 300 positions at budget 32: far past llama.cpp's n_ctx of
        # 256 (budget + 1 cells, rounded up), with no context shift.
        out, res = self.generate(32, 300, prompt(0, 40))
        self.assertEqual(len(out), 300)
        self.assertEqual(res.widest, 33)  # the budget, and the token

    def test_sinks(self) -> None:
        out, res = self.generate(32, 300, prompt(1, 40), sinks=4)
        self.assertEqual(len(out), 300)
        self.assertEqual(res.widest, 33)

    def test_budget_one(self) -> None:
        out, res = self.generate(1, 120, prompt(2, 20))
        self.assertEqual(len(out), 120)
        self.assertEqual(res.widest, 2)

    def test_budget_past_sequence(self) -> None:
        # Nothing is ever evicted: the rows are full causal attention, and
        # llama.cpp's logits are the model's plain forward pass.
        text = prompt(3, 60)
        out, res = self.generate(4096, 200, text)
        self.assertEqual(res.widest, 1 + 60 + 199)
        events, rows = ref.load_dump(self.last_prefix())
        toks = [lm.BOS] + list(text) + list(out[:-1])
        with torch.no_grad():
            full = gen.TARGET(torch.tensor(toks)).numpy()
        last = rows[-199:]
        diff = float(abs(last - full[-199:]).max())
        self.assertLessEqual(diff, TOL)

    def last_prefix(self) -> str:
        return os.path.join(gen.TMP.name, "%s-%d" % (self.name, self.runs))

    def test_chunked_prefill(self) -> None:
        # A 200-byte prompt in chunks of 16 (lookahead 16) at budget 48:
        # one evictd step and one llama.cpp pass per chunk.
        out, res = self.generate(48, 60, prompt(4, 200), "--lookahead", "16")
        self.assertEqual(len(out), 60)
        self.assertEqual(res.widest, 48 + 16)

    def speculate(self, budget: int, text: bytes, n: int
                  ) -> Tuple[bytes, bytes, str, ref.Result]:
        """A speculative run and a plain one with the same prompt chunks
        (lookahead 5, the speculative default for 4 drafts): (speculative
        text, plain text, the drafts line, the check's result)."""
        args = ["--budget", str(budget), "-n", str(n), "-p",
                text.decode("ascii"), "--lookahead", "5"]
        out, err, prefix = self.run_engine(*args, "--draft", DRAFT_GGUF,
                                           "--draft-n", "4")
        res = self.check(prefix)
        plain, _, _ = self.run_engine(*args, dump=False)
        accepted = [line for line in err.splitlines() if "accepted" in line]
        self.assertTrue(accepted, err)
        drafts = [int(w) for w in accepted[0].split() if w.isdigit()]
        self.assertGreater(drafts[0], 0, accepted[0])     # some accepted
        self.assertLess(drafts[0], drafts[1], accepted[0])  # some rejected
        # Every token is the target's own greedy choice given its cache:
        # drafts only decide how many are verified per pass.
        events, rows = ref.load_dump(prefix)
        toks = [lm.BOS] + list(text) + list(ref.text_of(out))
        checked, bad = ref.greedy_mismatches(events, rows, toks, len(text))
        self.assertFalse(bad, bad[:5])
        self.assertGreater(checked, n // 2)
        return (ref.text_of(out), ref.text_of(plain),
                accepted[0].split(": ", 1)[1], res)

    def test_speculative(self) -> None:
        # Drafts from the draft model, tentative in evictd, verified in one
        # pass; the rejected ones leave the cache with the next commit.
        # Under the window, a draft p + i attends to the committed window
        # and the drafts before it (llama.cpp's causal mask over the
        # cache), i positions more than plain decoding lets it see; the
        # logits are checked against exactly that, and where the text
        # parts from plain greedy decoding's is reported.
        # (A prompt the greedy text does not turn into a run of spaces,
        # which the draft model predicts perfectly.)
        out, plain, drafts, res = self.speculate(32, prompt(11, 40), 200)
        same = next((i for i, (a, b) in enumerate(zip(out, plain))
                     if a != b), None)
        RESULTS[self.name] += " (%s; text %s)" % (
            drafts, "equals plain greedy decoding's" if same is None else
            "parts from plain greedy decoding's at token %d" % same)

    def test_speculative_full_attention(self) -> None:
        # With nothing evicted, speculative decoding must give exactly the
        # plain greedy text: the drafts, commits and drops change nothing.
        out, plain, drafts, res = self.speculate(4096, prompt(10, 40), 200)
        self.assertEqual(out, plain)
        RESULTS[self.name] += " (%s; text equals plain greedy decoding's)" \
            % drafts

    def test_truncate_and_regenerate(self) -> None:
        # After 100 tokens, take 20 back (evictd truncate) and go on with
        # the runner-up: positions evicted before stay gone.
        text = prompt(6, 40)
        out, res = self.generate(32, 200, text, "--rewind", "100:20")
        plain, _, _ = self.run_engine("--budget", "32", "-n", "200", "-p",
                                      text.decode("ascii"), dump=False)
        self.assertEqual(len(out), 200)
        self.assertEqual(out[:80], ref.text_of(plain)[:80])
        self.assertNotEqual(out[80], ref.text_of(plain)[80])

    def test_fork_four_samples(self) -> None:
        out, err, prefix = self.run_engine(
            "--budget", "32", "-n", "150", "-p",
            prompt(7, 40).decode("ascii"), "--parallel", "4", "--temp",
            "0.8", "--seed", "7")
        res = self.check(prefix)
        samples = out.split(b"--- sample ")[1:]
        self.assertEqual(len(samples), 4)
        texts = [s.split(b"\n", 1)[1].rstrip(b"\n") for s in samples]
        self.assertEqual([len(t) for t in texts], [150] * 4)
        self.assertGreater(len(set(texts)), 1)
        self.assertEqual(res.widest, 33)

    def test_negative_control(self) -> None:
        # The engine evicts with a budget one too large; checked against
        # the budget the user meant, the check must fail, and by far.
        out, _, prefix = self.run_engine(
            "--budget", "33", "-n", "200", "-p",
            prompt(8, 40).decode("ascii"))
        res = self.verify(prefix, budget=32)
        self.assertTrue(res.row_mismatches)
        # The rows as the window of 32 holds them, so the logits compare
        # what a token would have seen: off by far more than TOL.
        self.assertGreater(res.max_diff, 100 * TOL, res.summary())
        RESULTS[self.name] = ("budget 33 checked as 32: %d row mismatches, "
                              "max diff %.3g (%.0f x TOL)"
                              % (len(res.row_mismatches), res.max_diff,
                                 res.max_diff / TOL))

    def test_kill_restart(self) -> None:
        # evictd (--state-dir, --fsync always, on a unix socket) is killed
        # with SIGKILL mid-generation and restarted; the engine resends the
        # request whose answer it lost, and the output and every logit
        # equal an uninterrupted run's.
        d = gen.durable_daemon("kill")
        try:
            text = prompt(9, 40).decode("ascii")
            args = ["--budget", "32", "-n", "1500", "-p", text]
            base, _, bprefix = self.run_engine(*args, url=d.addr)
            self.runs += 1
            prefix = os.path.join(gen.TMP.name,
                                  "%s-%d" % (self.name, self.runs))
            cmd = [BIN, "generate", "-m", TARGET_GGUF, "--evictd", d.addr,
                   "--session", "killed", "--stats", "--dump", prefix] + args
            p, got = kill_midway(d, cmd, 300)
            rest, err = p.communicate(timeout=600)
            self.assertEqual(p.returncode, 0, err.decode())
            out = got + rest
            self.assertEqual(out, base)
            stats = [line for line in err.decode().splitlines()
                     if "resends" in line]
            self.assertTrue(stats and " 0 resends" not in stats[0],
                            err.decode())
            a_events, a_rows = ref.load_dump(bprefix)
            b_events, b_rows = ref.load_dump(prefix)
            self.assertEqual(a_rows.tobytes(), b_rows.tobytes())
            res = self.check(prefix, stats[0].split(": ", 1)[1])
            self.assertGreater(res.compared, 1500)
        finally:
            d.stop()

    def test_lost_answers(self) -> None:
        # A proxy loses answers the daemon had already applied: a step's
        # (resent, answered "replayed"), a fork's (the resent fork finds
        # the child in the prompt's state) and a delete's (the resent
        # delete meets 404, which the engine accepts). Nothing changes.
        text = prompt(12, 40).decode("ascii")
        host, port = gen.MAIN.addr.rsplit(":", 1)

        deletes = []

        def lose(method: str, path: str, n: int) -> bool:
            if method == "DELETE":
                deletes.append(path)
                return len(deletes) == 1  # the first delete's answer
            return ((path.endswith("/step") and n == 50) or
                    (path.endswith("/fork") and n == 1))

        proxy = LosingProxy((host, int(port)), lose)
        self.addCleanup(proxy.close)
        args = ["--budget", "32", "-n", "120", "-p", text]
        base, _, _ = self.run_engine(*args, dump=False)
        out, err, prefix = self.run_engine(*args, url=proxy.url)
        self.assertEqual(out, base)
        stats = [line for line in err.splitlines() if "resends" in line][0]
        self.assertIn(" 1 replayed", stats)
        self.check(prefix, stats.split(": ", 1)[1])
        # Samples: the first fork's answer and a delete's are lost.
        sargs = args + ["--parallel", "3", "--temp", "0.8", "--seed", "2"]
        samples, _, _ = self.run_engine(*sargs, url=proxy.url)
        again, _, _ = self.run_engine(*sargs, dump=False)
        self.assertEqual(samples, again)
        self.assertIn("POST /session/lost_answers.3~0/fork", proxy.lost)
        self.assertEqual(len([x for x in proxy.lost if "DELETE" in x]), 1)
        with EvictdClient(gen.MAIN.url) as ev:
            for i in range(3):
                with self.assertRaises(UnknownSession):
                    ev.get("lost_answers.3~%d" % i)

    # -- re-homing: a daemon that lost the session, or holds an old copy --

    def disturbed(self, d: Daemon, args: List[str], session: str,
                  disturb, env: Optional[Dict[str, str]] = None
                  ) -> Tuple[subprocess.CompletedProcess, str]:
        """Runs evictd-llama generate against d (--session session,
        --dump) and calls disturb(p) while it runs; returns the finished
        process (stdout, stderr as bytes) and the dump prefix."""
        self.runs += 1
        prefix = os.path.join(gen.TMP.name, "%s-%d" % (self.name, self.runs))
        cmd = [BIN, "generate", "-m", self.model_file(), "--evictd", d.url,
               "--session", session, "--stats", "--dump", prefix] + args
        p = subprocess.Popen(cmd, stdin=subprocess.DEVNULL,
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                             env=dict(os.environ, **(env or {})))
        # Its text (a few KB) waits in the pipe meanwhile.
        try:
            disturb(p)
        finally:
            out, err = p.communicate(timeout=600)
        return subprocess.CompletedProcess(cmd, p.returncode, out,
                                           err), prefix

    def same_as_undisturbed(self, base: Tuple[bytes, str],
                            run: subprocess.CompletedProcess, prefix: str,
                            rehomes: str, what: str) -> None:
        """The run succeeded, re-homed as said ("1 lost, 0 diverged"), and
        wrote the undisturbed run's text and logits, which the reference
        checks too."""
        err = run.stderr.decode("utf-8", "replace")
        self.assertEqual(run.returncode, 0, err)
        self.assertEqual(run.stdout, base[0])
        stats = [line for line in err.splitlines() if "re-homes" in line]
        self.assertTrue(stats, err)
        self.assertIn("(%s" % rehomes, stats[0])
        _, a_rows = ref.load_dump(base[1])
        _, b_rows = ref.load_dump(prefix)
        self.assertEqual(a_rows.tobytes(), b_rows.tobytes())
        self.check(prefix, stats[0].split(": ", 1)[1])
        RESULTS["%s (%s)" % (self.name, what)] = RESULTS.pop(self.name)

    def test_restart_without_state(self) -> None:
        # The daemon is killed with SIGKILL mid-generation and restarted
        # WITHOUT --state-dir: the next step, expecting the session's
        # newest, is 404 unknown_session; the engine adopts the state its
        # cache holds and sends the step again. Text and every logit equal
        # the undisturbed run's: plain decoding (a step per iteration),
        # samples (a batch: the failed items re-homed and resent within
        # the iteration) and speculative decoding (the committed state
        # adopted, the pending drafts stepped again), and, without the
        # precondition (EVICTD_LLAMA_REHOME=no-expect), the fresh window
        # autocreate makes, told by the answer's size, replaced.
        d = Daemon.started(gen.TMP.name)
        self.addCleanup(d.stop)
        text = prompt(9, 40).decode("ascii")
        plain = ["--budget", "32", "--sinks", "4", "-n", "1500", "-p", text]
        for what, args, sid, watch, env, rehomes in (
                ("plain", plain, "restart", "restart", None,
                 "1 lost, 0 diverged, 0 fresh"),
                ("samples", plain + ["--parallel", "3", "--temp", "0.8",
                                     "--seed", "3"], "restart.s",
                 "restart.s~0", None, "3 lost, 0 diverged, 0 fresh"),
                ("speculative", plain + ["--draft", DRAFT_GGUF,
                                         "--lookahead", "5"], "restart.d",
                 "restart.d", None, "1 lost, 0 diverged, 0 fresh"),
                ("no precondition", plain, "restart.n", "restart.n",
                 {"EVICTD_LLAMA_REHOME": "no-expect"},
                 "0 lost, 0 diverged, 1 fresh")):
            with self.subTest(what):
                base = self.run_engine(*args, url=d.url)
                run, prefix = self.disturbed(
                    d, args, sid, lambda p: kill_at(d, p, watch, 300), env)
                self.same_as_undisturbed((base[0], base[2]), run, prefix,
                                         rehomes, what)

    def test_restart_without_state_negative_control(self) -> None:
        # The same restart with re-homing off (the engine as it was): the
        # fresh window's answers no longer describe the cache, and the run
        # stops saying so.
        d = Daemon.started(gen.TMP.name)
        self.addCleanup(d.stop)
        run, _ = self.disturbed(
            d, ["--budget", "32", "-n", "1500", "-p", "Licensed"], "lost",
            lambda p: kill_at(d, p, "lost", 300),
            {"EVICTD_LLAMA_REHOME": "off"})
        self.assertEqual(run.returncode, 1)
        self.assertIn(b"the daemon lost the session", run.stderr)

    def stale(self, d: Daemon, state: str, sid: str):
        """A disturbance: at position 300 the daemon is frozen (SIGSTOP) and
        its state directory copied; at 700 it is killed, the old copy put
        back, and it is restarted from it: a window 400 positions old."""
        def disturb(p: subprocess.Popen) -> None:
            old = state + ".old"
            wait_newest(d, p, sid, 300)
            d.proc.send_signal(signal.SIGSTOP)
            shutil.rmtree(old, ignore_errors=True)
            shutil.copytree(state, old)
            d.proc.send_signal(signal.SIGCONT)
            wait_newest(d, p, sid, 700)
            d.kill()
            shutil.rmtree(state)
            os.rename(old, state)
            d.restart()
        return disturb

    def test_stale_state(self) -> None:
        # The daemon restarted from an older copy of its state directory
        # holds the session 400 positions back: the precondition refuses
        # the next step (409 diverged), the engine adopts its own state
        # with replace and goes on. Text and logits equal the undisturbed
        # run's, plain and speculative. Without the precondition the old
        # window answers, wrongly (its victims were evicted long ago), and
        # the run fails: the negative controls, with re-homing off and
        # with re-homing but no precondition.
        state = os.path.join(gen.TMP.name, "stale-state")
        os.mkdir(state)
        d = Daemon.started(gen.TMP.name, "--state-dir", state, "--fsync",
                           "always")
        self.addCleanup(d.stop)
        text = prompt(15, 40).decode("ascii")
        plain = ["--budget", "32", "--sinks", "4", "-n", "1500", "-p", text]
        for what, args, sid in (
                ("plain", plain, "stale"),
                ("speculative", plain + ["--draft", DRAFT_GGUF,
                                         "--lookahead", "5"], "stale.d")):
            with self.subTest(what):
                base = self.run_engine(*args, url=d.url)
                run, prefix = self.disturbed(d, args, sid,
                                             self.stale(d, state, sid))
                self.same_as_undisturbed((base[0], base[2]), run, prefix,
                                         "0 lost, 1 diverged, 0 fresh", what)
        for mode in ("off", "no-expect"):
            with self.subTest("negative control", rehome=mode):
                sid = "stale." + mode
                run, _ = self.disturbed(d, plain, sid,
                                        self.stale(d, state, sid),
                                        {"EVICTD_LLAMA_REHOME": mode})
                self.assertEqual(run.returncode, 1, run.stderr)
                self.assertIn(b"llama.cpp refused to remove positions",
                              run.stderr)

    def test_end_of_generation(self) -> None:
        # A copy of the weights whose EOS looks like a '.', only more so
        # (the head is tied to the embedding): plain and speculative
        # decoding both stop at the first one, with the same text, and a
        # rewind that takes the EOS back goes on.
        state = lm.load(lm.WEIGHTS).state_dict()
        state["embed.weight"][lm.EOS] = state["embed.weight"][ord(".")] * 1.05
        pt = os.path.join(gen.TMP.name, "eos.pt")
        torch.save({"config": dataclasses.asdict(lm.load(lm.WEIGHTS).cfg),
                    "state": state}, pt)
        gguf = os.path.join(gen.TMP.name, "eos.gguf")
        gguf_py = gguf_py_dir()
        subprocess.run(["/usr/bin/python3", os.path.join(
            REPO, "deploy", "llama", "export_gguf.py")] +
            (["--gguf-py", gguf_py] if gguf_py else []) +
            ["--weights", pt, gguf], check=True, capture_output=True)
        model = lm.load(pt).double()
        text = prompt(14, 40).decode("ascii")
        args = ["-m", gguf, "--budget", "32", "-n", "400", "-p", text,
                "--lookahead", "5"]
        plain, _, prefix = self.run_engine(*args)
        self.check(prefix, target=model)
        self.assertLess(len(plain), 401, "no end token in 400: pick "
                        "another prompt")
        spec, _, prefix = self.run_engine(*args, "--draft", DRAFT_GGUF)
        self.check(prefix, target=model)
        self.assertEqual(spec, plain)
        n = len(ref.text_of(plain))
        rewound, _, prefix = self.run_engine(
            *args, "--rewind", "%d:3" % (n + 1))
        self.check(prefix, target=model)
        self.assertEqual(rewound[:n - 2], plain[:n - 2])
        self.assertGreaterEqual(len(ref.text_of(rewound)), n - 1)
        RESULTS[self.name] += " (EOS after %d tokens)" % n

    def test_options(self) -> None:
        text = prompt(14, 40)
        path = os.path.join(gen.TMP.name, "prompt.txt")
        with open(path, "wb") as f:
            f.write(text)
        a, _, _ = self.run_engine("--budget", "16", "-n", "40", "-p",
                                  text.decode("ascii"), dump=False)
        b, _, _ = self.run_engine("--budget", "16", "-n", "40", "-f", path,
                                  "--n-ctx", "512", "--threads", "2",
                                  dump=False)
        self.assertEqual(a, b)
        # -n 0 decodes nothing and leaves nothing; --keep-session keeps.
        out, _, _ = self.run_engine("-n", "0", "-p", "x", dump=False)
        self.assertEqual(out, b"\n")
        self.run_engine("--budget", "16", "-n", "10", "-p", "x",
                        "--keep-session", "--session", "kept", dump=False)
        with EvictdClient(gen.MAIN.url) as ev:
            view = ev.get("kept")
            self.assertEqual(view.newest, 10)  # BOS, x, 9 decoded
            ev.delete("kept")
            with self.assertRaises(UnknownSession):
                ev.get("%s.%d" % (self.name, self.runs - 1))

    def test_dump_model_path_with_control_characters(self) -> None:
        # The dump's start event names the model's path; a path holding a
        # tab, a quote, a backslash and a control character must still be
        # one valid JSON line (the dump escaped only '"' and '\\', so a
        # control character gave invalid JSON).
        odd = os.path.join(gen.TMP.name, 'odd\t"model"\\\x01.gguf')
        os.symlink(TARGET_GGUF, odd)
        self.runs += 1
        prefix = os.path.join(gen.TMP.name, "odd-%d" % self.runs)
        p = subprocess.run([BIN, "generate", "-m", odd, "--evictd",
                            gen.MAIN.url, "-n", "4", "-p", "x", "--dump",
                            prefix],
                           stdin=subprocess.DEVNULL, capture_output=True,
                           timeout=60)
        self.assertEqual(p.returncode, 0, p.stderr)
        events, rows = ref.load_dump(prefix)
        self.assertEqual(events[0]["op"], "start")
        self.assertEqual(events[0]["model"], odd)
        self.assertEqual(len(rows), sum(len(e["tokens"]) for e in events
                                        if e["op"] == "pass"))

    def test_token(self) -> None:
        token = os.path.join(gen.TMP.name, "token")
        with open(token, "w") as f:
            f.write("a-token-of-some-length\n")
        d = Daemon.started(gen.TMP.name, "--token-file", token)
        try:
            out, err, _ = self.run_engine("-n", "5", "-p", "x", url=d.url,
                                          dump=False, check=False)
            self.assertIn("401 unauthorized", err)
            out, err, _ = self.run_engine("-n", "5", "-p", "x",
                                          "--token-file", token, url=d.url,
                                          dump=False)
            self.assertEqual(len(out), 6)
        finally:
            d.stop()


class Refusals(unittest.TestCase):
    """What a user gets wrong is refused with a sentence that says what,
    and nothing is left behind in evictd."""

    def engine(self, *args: str) -> Tuple[int, str]:
        p = subprocess.run([BIN] + list(args), stdin=subprocess.DEVNULL,
                           capture_output=True, timeout=60)
        return p.returncode, p.stderr.decode("utf-8", "replace")

    def generate(self, *args: str) -> Tuple[int, str]:
        return self.engine("generate", "-m", TARGET_GGUF, "--evictd",
                           gen.MAIN.url, "-n", "3", "-p", "x", *args)

    def test_usage(self) -> None:
        for args, says in (
                ((), "no command"),
                (("frob",), "unknown command 'frob'"),
                (("generate", "-p", "x"), "-m MODEL.gguf is required"),
                (("generate", "-m", TARGET_GGUF, "--budget", "0"),
                 "--budget wants a whole number from 1"),
                (("generate", "-m", TARGET_GGUF, "--rewind", "5:6"),
                 "takes back more tokens than were generated"),
                (("generate", "-m", TARGET_GGUF, "--rewind", "-1:2"),
                 "wants a whole number"),
                (("generate", "-m", TARGET_GGUF, "-n", "50", "--rewind",
                  "100:20"), "would never happen"),
                (("generate", "-m", TARGET_GGUF, "--draft", DRAFT_GGUF,
                  "--parallel", "2"), "--draft decodes one sequence"),
                (("generate", "-m", TARGET_GGUF, "-p", "x", "-f", "y"),
                 "give -p or -f, not both")):
            rc, err = self.engine(*args)
            self.assertEqual(rc, 2, (args, err))
            self.assertIn(says, err)
        rc, out = self.engine("--help")
        self.assertEqual(rc, 0)

    def test_daemon_refusals(self) -> None:
        rc, err = self.generate("--budget", "4", "--sinks", "4",
                                "--session", "refused.sinks")
        self.assertEqual(rc, 1)
        self.assertIn("400 invalid_sinks", err)
        rc, err = self.generate("--session", "refused.draft", "--draft",
                                DRAFT_GGUF, "--lookahead", "2")
        self.assertEqual(rc, 1)
        self.assertIn("needs a session lookahead of at least 5", err)
        rc, err = self.generate("--evictd", "http://127.0.0.1:1",
                                "--reconnect-ms", "0")
        self.assertEqual(rc, 1)
        self.assertIn("connection_failed", err)
        # A model that cannot be loaded: the session made for it is gone.
        rc, err = self.engine("generate", "-m", "/nonexistent.gguf",
                              "--evictd", gen.MAIN.url, "--session",
                              "refused.model", "-n", "3", "-p", "x")
        self.assertEqual(rc, 1)
        self.assertIn("cannot load the target model", err)
        # Rewinding past the window's unpinned part would leave llama.cpp
        # no newest position to continue from.
        rc, err = self.generate("--budget", "8", "--sinks", "4", "-n", "30",
                                "--rewind", "20:6", "--session",
                                "refused.rewind")
        self.assertEqual(rc, 1)
        self.assertIn("takes back more tokens than the window keeps", err)
        rc, err = self.generate("--budget", "32", "--n-ctx", "16", "-n", "100",
                                "--session", "refused.nctx")
        self.assertEqual(rc, 1)
        self.assertIn("--n-ctx 16 is below what a sequence can hold", err)
        with EvictdClient(gen.MAIN.url) as ev:
            for sid in ("refused.sinks", "refused.draft", "refused.model",
                        "refused.rewind", "refused.nctx"):
                with self.assertRaises(UnknownSession):
                    ev.get(sid)

    def test_configure_names_what_is_missing(self) -> None:
        # A llama.cpp from before its memory API: configure says so rather
        # than failing to compile.
        tree = os.path.join(gen.TMP.name, "old-llama")
        os.makedirs(os.path.join(tree, "include"))
        with open(os.path.join(MODELS, "config.mk")) as f:
            flags = [line for line in f if line.startswith("LLAMA_CFLAGS")]
        include = [w[2:] for w in flags[0].split() if w.startswith("-I")]
        with open(os.path.join(include[0], "llama.h")) as f:
            header = f.read().replace("llama_memory_seq_rm", "llama_kv_rm")
        with open(os.path.join(tree, "include", "llama.h"), "w") as f:
            f.write(header)
        p = subprocess.run(
            [os.path.join(REPO, "deploy", "llama", "configure.sh"),
             os.path.join(gen.TMP.name, "old-out")],
            env=dict(os.environ, LLAMA_CPP_SRC=tree), capture_output=True,
            text=True, timeout=60)
        self.assertEqual(p.returncode, 1, p.stderr)
        self.assertIn("does not declare llama_memory_seq_rm", p.stderr)
        self.assertIn("predates its memory API", p.stderr)


class Memcheck(unittest.TestCase):
    """evictd-llama under valgrind memcheck: no invalid access, no definite
    leak, in the two modes that keep the most books (speculative, with
    the draft's cache; samples forked, with a truncation-free batch)."""

    def test_memcheck(self) -> None:
        if shutil.which("valgrind") is None:
            self.skipTest("no valgrind on this machine")
        for i, extra in enumerate((["--draft", DRAFT_GGUF],
                                   ["--parallel", "3", "--temp", "0.7"])):
            p = subprocess.run(
                ["valgrind", "-q", "--error-exitcode=9", "--leak-check=full",
                 "--errors-for-leak-kinds=definite", BIN, "generate", "-m",
                 TARGET_GGUF, "--evictd", gen.MAIN.url, "--budget", "16", "-n",
                 "30", "-p", "Licensed", "--session", "memcheck.%d" % i,
                 "--dump", os.path.join(gen.TMP.name, "memcheck%d" % i)]
                + extra, stdin=subprocess.DEVNULL, capture_output=True,
                text=True, timeout=600)
            self.assertEqual(p.returncode, 0, p.stderr[-3000:])


class Installed(unittest.TestCase):
    """evictd-llama builds against an installed libllama too: llama.cpp's
    own `cmake --install` of the build at hand into a scratch prefix,
    found through its llama.pc (LLAMA_CPP_SRC=pkg-config), and decodes
    the same text as the binary built against the source tree."""

    def test_installed_libllama(self) -> None:
        with open(os.path.join(MODELS, "config.mk")) as f:
            libs = [line for line in f if line.startswith("LLAMA_LIBS")]
        libdir = [w[2:] for w in libs[0].split() if w.startswith("-L")]
        if not libdir or not libdir[0].endswith("/bin"):
            self.skipTest("llama.cpp here is not a build of a source tree")
        build = os.path.dirname(libdir[0])
        prefix = os.path.join(gen.TMP.name, "inst")
        subprocess.run(["cmake", "--install", build, "--prefix", prefix],
                       check=True, capture_output=True, timeout=120)
        pc = os.path.join(prefix, "lib", "pkgconfig", "llama.pc")
        with open(pc) as f:
            text = f.read()
        # Its paths are the build's default prefix, not the scratch one.
        default = [line.split("=", 1)[1] for line in text.split("\n")
                   if line.startswith("prefix=")][0]
        with open(pc, "w") as f:
            f.write(text.replace(default, prefix))
        out = os.path.join(gen.TMP.name, "inst-build")
        # A make of its own: `make e2e-llamacpp LLAMA_CPP_SRC=...` hands its
        # command-line variables down through MAKEFLAGS, and they would
        # override this environment's LLAMA_CPP_SRC.
        env = {k: v for k, v in os.environ.items()
               if k not in ("MAKEFLAGS", "MFLAGS", "MAKEOVERRIDES",
                            "MAKELEVEL")}
        # llama.cpp installs no headers of its common library: configure
        # builds it from a source of the installed version, here the tree
        # at hand (a few minutes on 2 cores).
        with open(os.path.join(MODELS, "config.mk")) as f:
            flags = [line for line in f
                     if line.startswith("LLAMA_COMMON_CXXFLAGS")]
        tree = os.path.dirname(flags[0].split("-isystem", 1)[1].strip())
        env.update(LLAMA_CPP_SRC="pkg-config", LLAMA_COMMON_SRC=tree,
                   PKG_CONFIG_PATH=os.path.dirname(pc))
        p = subprocess.run(["make", "--no-print-directory", "B=" + out,
                            "evictd-llama"], cwd=REPO, env=env,
                           capture_output=True, text=True, timeout=1500)
        self.assertEqual(p.returncode, 0, p.stdout + p.stderr)
        run_env = dict(os.environ)  # libllama is found by its rpath
        run_env.pop("LD_LIBRARY_PATH", None)
        binary = os.path.join(out, "evictd-llama")
        p = subprocess.run([binary, "--version"], env=run_env,
                           capture_output=True, text=True, timeout=60)
        self.assertIn("installed libllama", p.stdout)
        texts = []
        for i, b in enumerate((binary, BIN)):
            p = subprocess.run(
                [b, "generate", "-m", TARGET_GGUF, "--evictd", gen.MAIN.url,
                 "--budget", "16", "-n", "60", "-p", "Licensed under",
                 "--session", "installed.%d" % i], env=run_env,
                capture_output=True, timeout=120)
            self.assertEqual(p.returncode, 0, p.stderr)
            texts.append(p.stdout)
        self.assertEqual(texts[0], texts[1])


if __name__ == "__main__":
    unittest.main()

#!/usr/bin/python3
"""evictd-llama --positions cache (streaming-llm's positions), every logit
checked (make e2e-llamacpp runs it after test_llamacpp.py).

In cache mode a token goes to llama.cpp at its index in the kept cache
(the count the cache holds), and after each removal the cells above every
gap move down with llama_memory_seq_add, so that llama.cpp re-rotates
those keys (K-shift) before its next pass. The reference
(support/reference.py, forward_rows) rotates each key at its index in the
cache as each query sees it and each query at its own index:
streaming-llm's arithmetic, computed from the policy's rows alone. Every
scenario of test_llamacpp.py that moves keys runs here in cache mode and
must agree within TOL; the
negative controls check the same records against original positions and
against keys left at the index they were computed at (no shift): both
must be far off. (Without sinks a window has no gap, and cache positions
give the same query-key offsets as absolute ones: test_cache_window checks
that the record agrees with both.)
"""

import os
import shutil
import subprocess
import unittest

os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")

import torch  # noqa: E402

import model as lm  # noqa: E402
from support import generate as gen  # noqa: E402
from support import reference as ref  # noqa: E402

setUpModule = gen.set_up
tearDownModule = gen.tear_down
prompt = gen.prompt
TOL = gen.TOL
CACHE = ("--positions", "cache")


class CachePositions(gen.Engine):

    def generate_cache(self, budget: int, n: int, text: bytes, *args: str,
                       sinks: int = 0):
        return self.generate(budget, n, text, *CACHE, *args, sinks=sinks)

    def test_cache_window(self) -> None:
        # The window of test_window in cache mode. Without sinks the
        # window has no gap: every key moves down by one per step, the
        # offsets between query and keys (all RoPE sees) are the absolute
        # ones, and the record checks as original positions too. Keys left
        # where they were computed (an engine that never calls
        # llama_memory_seq_add) are far off.
        out, res = self.generate_cache(32, 300, prompt(0, 40))
        self.assertEqual(len(out), 300)
        self.assertEqual(res.widest, 33)
        prefix = self.prefix()
        events, _ = ref.load_dump(prefix)
        self.assertEqual(events[0]["positions"], "cache")
        # Before each pass llama.cpp holds the budget at 0..31, and the
        # new token goes at 32, however far the sequence has gone.
        spans = [ev["max"] for ev in events if ev["op"] == "cache"]
        self.assertEqual(max(spans), 31)
        given = [tk[3] for ev in events if ev["op"] == "pass"
                 for tk in ev["tokens"]]
        self.assertEqual(max(given), 32)
        self.assertEqual(given[-1], 32)
        same = self.verify(prefix, rope="original")
        self.assertLessEqual(same.max_diff, TOL, same.summary())
        stale = self.verify(prefix, rope="stale")
        self.assertGreater(stale.max_diff, 100 * TOL, stale.summary())
        gen.RESULTS[self.name] += (" (checked as original %.3g, as stale "
                                   "%.3g)" % (same.max_diff, stale.max_diff))

    def test_cache_sinks(self) -> None:
        # With sinks the window has a gap above them, and cache positions
        # differ from absolute ones: the negative controls check this
        # record as original positions and as keys never moved (no
        # llama_memory_seq_add); both must be far outside TOL.
        out, res = self.generate_cache(32, 300, prompt(1, 40), sinks=4)
        self.assertEqual(len(out), 300)
        self.assertEqual(res.widest, 33)
        notes = []
        for rope in ("original", "stale"):
            bad = self.verify(self.prefix(), rope=rope)
            self.assertGreater(bad.max_diff, 100 * TOL, bad.summary())
            notes.append("%s %.3g" % (rope, bad.max_diff))
        gen.RESULTS[self.name] += " (checked as %s)" % ", ".join(notes)

    def test_cache_budget_one(self) -> None:
        # Every step evicts the position before: the new token and its
        # predecessor sit at 0 and 1 forever.
        out, res = self.generate_cache(1, 120, prompt(2, 20))
        self.assertEqual(len(out), 120)
        self.assertEqual(res.widest, 2)

    def test_cache_chunked_prefill(self) -> None:
        # Chunks of 16 at budget 48: a chunk's tokens go at the count held
        # and up, and the chunk's victims (up to 16) leave after the pass.
        out, res = self.generate_cache(48, 60, prompt(4, 200),
                                       "--lookahead", "16")
        self.assertEqual(len(out), 60)
        self.assertEqual(res.widest, 48 + 16)

    def test_cache_full_attention(self) -> None:
        # Nothing evicted: a token's index in the cache is its absolute
        # position, and the two modes compute the very same logits.
        text = prompt(3, 60)
        runs = []
        for mode in ("original", "cache"):
            out, _, prefix = self.run_engine(
                "--budget", "4096", "-n", "100", "-p", text.decode("ascii"),
                "--positions", mode)
            with open(prefix + ".f32", "rb") as f:
                runs.append((out, f.read()))
        self.assertEqual(runs[0], runs[1])
        self.check(prefix)

    def test_cache_fork_four_samples(self) -> None:
        # Forked after the prompt: llama_memory_seq_cp copies the cells
        # with their cache positions, each sample shifts its own stream.
        out, _, prefix = self.run_engine(
            "--budget", "32", "-n", "150", "-p",
            prompt(7, 40).decode("ascii"), "--parallel", "4", "--temp",
            "0.8", "--seed", "7", *CACHE)
        res = self.check(prefix)
        samples = out.split(b"--- sample ")[1:]
        self.assertEqual(len(samples), 4)
        self.assertGreater(len(set(samples)), 1)
        self.assertEqual(res.widest, 33)

    def test_cache_speculative(self) -> None:
        # Both caches in cache mode: the target's drafts go at the count
        # held and are dropped before the next pass (the top: no shift);
        # the draft model's cache, a commit behind, has indices of its own.
        out, err, prefix = self.run_engine(
            "--budget", "32", "-n", "200", "-p",
            prompt(11, 40).decode("ascii"), "--lookahead", "5", "--draft",
            gen.DRAFT_GGUF, "--draft-n", "4", *CACHE)
        res = self.check(prefix)
        events, rows = ref.load_dump(prefix)
        self.assertTrue(any(ev["op"] == "pass" and ev["model"] == "draft"
                            for ev in events))
        toks = [lm.BOS] + list(prompt(11, 40)) + list(ref.text_of(out))
        checked, bad = ref.greedy_mismatches(events, rows, toks, 40)
        self.assertFalse(bad, bad[:5])
        self.assertGreater(checked, 100)
        accepted = [line for line in err.splitlines() if "accepted" in line]
        gen.RESULTS[self.name] += " (%s)" % accepted[0].split(": ", 1)[1]
        self.assertGreater(res.compared, 200)

    def test_cache_rewind(self) -> None:
        # A truncation removes the top of the cache (no shift), and the
        # runner-up goes at the count held.
        out, res = self.generate_cache(32, 200, prompt(6, 40),
                                       "--rewind", "100:20")
        self.assertEqual(len(out), 200)

    def test_cache_rewind_past_the_window(self) -> None:
        # Refused with original positions (llama.cpp continues a sequence
        # only from its newest position, which the truncation took); with
        # cache positions the newest held is always the count - 1.
        out, res = self.generate_cache(8, 30, prompt(5, 20), "--rewind",
                                       "20:6", sinks=4)
        self.assertEqual(len(out), 30)

    def test_cache_kill_restart(self) -> None:
        # evictd killed with SIGKILL mid-generation and restarted from its
        # state: the resent step is answered as first, and output and
        # logits equal an uninterrupted cache-mode run's.
        d = gen.durable_daemon("kill-cache")
        try:
            args = ["--budget", "32", "-n", "800", "-p",
                    prompt(9, 40).decode("ascii"), *CACHE]
            base, _, bprefix = self.run_engine(*args, url=d.addr)
            self.runs += 1
            prefix = self.prefix()
            cmd = [gen.BIN, "generate", "-m", gen.TARGET_GGUF, "--evictd",
                   d.addr, "--session", "killed-cache", "--stats", "--dump",
                   prefix] + args
            p, got = gen.kill_midway(d, cmd, 300)
            rest, err = p.communicate(timeout=600)
            self.assertEqual(p.returncode, 0, err.decode())
            self.assertEqual(got + rest, base)
            stats = [line for line in err.decode().splitlines()
                     if "resends" in line]
            self.assertTrue(stats and " 0 resends" not in stats[0],
                            err.decode())
            with open(bprefix + ".f32", "rb") as a, \
                    open(prefix + ".f32", "rb") as b:
                self.assertEqual(a.read(), b.read())
            res = self.check(prefix, stats[0].split(": ", 1)[1])
            self.assertGreater(res.compared, 800)
        finally:
            d.stop()

    def test_reference_rows(self) -> None:
        # forward_rows, the reference's attention with a RoPE position per
        # query and key, is the model's own masked forward pass when the
        # positions are the absolute ones (sinks-and-window rows).
        toks = [lm.BOS] + list(prompt(13, 80))
        w = ref.Window(16, 4, 1)
        rows = [(0,)]
        for p in range(1, len(toks)):
            got, _ = w.step([p], False)
            rows.append(got[p])
        mask = torch.zeros(len(toks), len(toks), dtype=torch.bool)
        for p, r in enumerate(rows):
            mask[p, list(r)] = True
        with torch.no_grad():
            want = gen.TARGET(torch.tensor(toks), mask=mask)
            qpos, kpos = ref.rope_positions("original", rows)
            got = ref.forward_rows(gen.TARGET, toks, rows, qpos, kpos)
            cache = ref.forward_rows(gen.TARGET, toks, rows,
                                     *ref.rope_positions("cache", rows))
        self.assertLess(float((got - want).abs().max()), 1e-10)
        self.assertGreater(float((cache - want).abs().max()), 0.1)

    def test_cache_option(self) -> None:
        rc, err = self.refused("--positions", "Cache")
        self.assertEqual(rc, 2)
        self.assertIn("--positions is original or cache, not 'Cache'", err)

    def test_cache_memcheck(self) -> None:
        # The books of cache mode (both caches' maps, a fork's copies, the
        # draft's rejected drafts) under valgrind memcheck.
        if shutil.which("valgrind") is None:
            self.skipTest("no valgrind on this machine")
        for i, extra in enumerate((["--draft", gen.DRAFT_GGUF],
                                   ["--parallel", "3", "--temp", "0.7"])):
            p = subprocess.run(
                ["valgrind", "-q", "--error-exitcode=9", "--leak-check=full",
                 "--errors-for-leak-kinds=definite", gen.BIN, "generate",
                 "-m", gen.TARGET_GGUF, "--evictd", gen.MAIN.url, "--budget",
                 "16", "--sinks", "4", "-n", "24", "-p", "Licensed",
                 "--session", "memcheck-cache.%d" % i, "--dump",
                 os.path.join(gen.TMP.name, "memcheck-cache%d" % i), *CACHE]
                + extra, stdin=subprocess.DEVNULL, capture_output=True,
                text=True, timeout=600)
            self.assertEqual(p.returncode, 0, p.stderr[-3000:])

    def prefix(self) -> str:
        return os.path.join(gen.TMP.name, "%s-%d" % (self.name, self.runs))

    def refused(self, *args: str):
        p = subprocess.run([gen.BIN, "generate", "-m", gen.TARGET_GGUF,
                            "-p", "x", *args], capture_output=True,
                           timeout=60)
        return p.returncode, p.stderr.decode()


if __name__ == "__main__":
    unittest.main()

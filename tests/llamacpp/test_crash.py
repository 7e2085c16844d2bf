#!/usr/bin/python3
"""evictd-llama serve killed with SIGKILL (issue 43): --cache-dir written
behind (deploy/llama/serve/engine/disk.c: whole files, fsynced and
renamed, a checksum in each), on stories260K (--exact, one thread) with
the real daemon.

1. After 60 turns of a conversation through /v1/completions (budget 96,
   sinks 4), serve killed once its writes are done (--cache-write-ms
   1000: the last park is written by the idle engine's timer), and
   started again on the same folder: turn 61 decodes only its new
   tokens, with the answer of a serve never killed; turn 60 regenerated
   decodes its last 4 (its checkpoint was written with the
   conversation), with its first answer.
2. The same, one byte of the file changed before the restart: the file
   is refused (said, removed) and turn 61 continues from turn 60's
   checkpoint; the checkpoints' files changed too (and the conversation's
   gone), decoded afresh.
3. A crash loop: three conversations at once over -np 2
   (24 turns each, --cache-write-ms 200, lookahead 1: a prompt decoded a token a pass,
   so that whichever of a conversation's turns reached the disk, its cells
   come back as the undisturbed run's), serve killed six times at random
   moments under that load and started again; each client sends a turn
   again when its serve died under it. Every answer is the one a serve
   never killed gives, no file is ever refused as torn, and turns after a
   restart continue conversations found on disk.
4. A full --cache-dir (a small tmpfs filled, as root: skipped with the
   reason otherwise): serve goes on answering, counts the failed writes
   and says so once; with room again the write is tried again by itself
   and found after a kill.

Runs in about 40 s on two cores; the figures go to stderr.
"""

import json
import os
import random
import subprocess
import sys
import tempfile
import threading
import time
import unittest
from typing import Dict, List, Optional

from support import metrics, paths
from support.daemon import Daemon
from support.http import request
from support.serve import Serve

GGUF = paths.stories_gguf()
EXACT = ["--exact", "--threads", "1"]
WINDOW = ["--budget", "96", "--sinks", "4", "--lookahead", "16", "-np", "1"]
OPENER = "Once upon a time, there was a little girl named Lily."
LINES = [" She liked to play.", " One day she saw a dog.",
         " The dog was big.", " Lily was happy.",
         " They played in the park.", " Then it was night.",
         " The sun came up.", " Her mom made cake.", " It was sweet.",
         " Lily said thank you.", " They went for a walk.",
         " A bird sang.", " Lily smiled."]

TMP: Optional[tempfile.TemporaryDirectory] = None
FIGURES: Dict[str, str] = {}


def setUpModule() -> None:
    global TMP
    paths.checked_stories()
    TMP = tempfile.TemporaryDirectory(prefix="evictd-crash-")


def tearDownModule() -> None:
    if TMP is not None:
        TMP.cleanup()
    print("", file=sys.stderr)
    for name, line in sorted(FIGURES.items()):
        print("%-10s %s" % (name, line), file=sys.stderr)


def post(addr: str, prompt: str, n: int) -> dict:
    body = dict(prompt=prompt, max_tokens=n, temperature=0)
    status, _, raw = request(addr, "POST", "/v1/completions", body)
    assert status == 200, (status, raw)
    out = json.loads(raw)
    return {"text": out["choices"][0]["text"],
            "prompt_n": out["timings"]["prompt_n"],
            "prompt_tokens": out["usage"]["prompt_tokens"],
            "cache_from": ("none", "conversation", "saved", "disk",
                           "checkpoint")[out["timings"]["cache_kind"]]}


def line(k: int) -> str:
    return LINES[k % len(LINES)]


def talk(addr: str, turns: int, n: int = 16) -> List[dict]:
    """The conversation's first `turns` turns: each answer, with its
    prompt."""
    hist, out = OPENER, []
    for k in range(turns):
        a = post(addr, hist + line(k), n)
        a["prompt"] = hist + line(k)
        out.append(a)
        hist = a["prompt"] + a["text"]
    return out


def kill(sv: Serve) -> None:
    sv.proc.kill()
    sv.proc.wait(10)


def flip(path: str) -> None:
    """Changes one bit of the file, 100 bytes before its end."""
    with open(path, "r+b") as f:
        f.seek(os.path.getsize(path) - 100)
        b = f.read(1)
        f.seek(-1, os.SEEK_CUR)
        f.write(bytes([b[0] ^ 0x40]))


def figures(sv: Serve) -> Dict[str, float]:
    m = metrics.scrape(sv.addr)
    return {k.replace("evictd_llama_", ""): v for k, v in m.items()
            if "cache_dir" in k or "conversations" in k}


def written(sv: Serve, secs: float = 10) -> Dict[str, float]:
    """serve's figures once every parked conversation is on disk (its
    writer has nothing waiting, and has written each one given it)."""
    deadline = time.monotonic() + secs
    while True:
        f = figures(sv)
        if (f["cache_dir_writes_pending"] == 0 and
                f["conversations_written_total"] > 0 and
                f["cache_dir_writes_total"] >= 1):
            return f
        assert time.monotonic() < deadline, f
        time.sleep(0.1)


class Case(unittest.TestCase):
    def setUp(self) -> None:
        self.evd = Daemon.started(TMP.name)
        self.servers: List[Serve] = []

    def tearDown(self) -> None:
        for sv in self.servers:
            if sv.proc.poll() is None:
                sv.stop()
        self.evd.stop()

    def serve(self, *args: str) -> Serve:
        sv = Serve(TMP.name, self.evd.url, *args, model=GGUF)
        self.servers.append(sv)
        return sv


class Kill(Case):
    """Tests 1 and 2: one kill, the file whole or changed."""

    TURNS = 60

    def killed_after(self, folder: str) -> List[dict]:
        sv = self.serve(*WINDOW, *EXACT, "--cache-dir", folder)
        turns = talk(sv.addr, self.TURNS)
        # The last turn parked less than --cache-write-ms after the one
        # before was written: the idle engine writes it when that is up.
        time.sleep(1.2)
        f = written(sv)
        self.assertGreaterEqual(f["conversations_written_total"], 2)
        kill(sv)
        return turns

    def test_sigkill_then_next_turn(self) -> None:
        folder = os.path.join(TMP.name, "kill")
        turns = self.killed_after(folder)
        calm = self.serve(*WINDOW, *EXACT)
        undisturbed = talk(calm.addr, self.TURNS + 1)
        self.assertEqual([t["text"] for t in turns],
                         [t["text"] for t in undisturbed[:-1]])
        again = self.serve(*WINDOW, *EXACT, "--cache-dir", folder)
        self.assertIn("conversations found in", again.log())
        last = undisturbed[-1]
        got = post(again.addr, last["prompt"], 16)
        self.assertEqual(got["text"], last["text"])
        self.assertEqual(got["cache_from"], "disk")
        # Only the new line (and the last answer's token the window
        # stepped but never computed) decoded.
        self.assertLess(got["prompt_n"], 16)
        self.assertLess(got["prompt_n"], last["prompt_n"] + 2)
        # Turn 60's answer regenerated: from its checkpoint, written
        # beside the conversation, the first answer again.
        regen = post(again.addr, turns[-1]["prompt"], 16)
        self.assertEqual(regen["text"], turns[-1]["text"])
        self.assertEqual(regen["cache_from"], "checkpoint")
        self.assertLessEqual(regen["prompt_n"], 4)
        FIGURES["1 kill"] = (
            "turn %d after SIGKILL: %d of %d prompt tokens decoded (the "
            "undisturbed run: %d), the same answer" % (
                self.TURNS + 1, got["prompt_n"], got["prompt_tokens"],
                last["prompt_n"]))

    def test_changed_file_refused(self) -> None:
        folder = os.path.join(TMP.name, "changed")
        turns = self.killed_after(folder)
        files = [f for f in os.listdir(folder) if f.startswith("conv-")]
        self.assertEqual(len(files), 1, files)
        path = os.path.join(folder, files[0])
        flip(path)
        again = self.serve(*WINDOW, *EXACT, "--cache-dir", folder)
        self.assertIn("is not a whole conversation", again.log())
        self.assertFalse(os.path.exists(path))
        nxt = turns[-1]["prompt"] + turns[-1]["text"] + line(self.TURNS)
        got = post(again.addr, nxt, 16)
        # Not from the refused file: from turn 60's checkpoint, whose file
        # is whole (its last 4 prompt tokens, its answer and the new line
        # decoded); with that file changed too, afresh.
        self.assertEqual(got["cache_from"], "checkpoint")
        self.assertLess(got["prompt_n"], 4 + 16 + 16)
        again.stop()
        ck = [f for f in os.listdir(folder) if f.startswith("ckpt-")]
        self.assertGreaterEqual(len(ck), 1, ck)
        for f in ck:
            flip(os.path.join(folder, f))
        for f in os.listdir(folder):
            if f.startswith("conv-"):
                os.unlink(os.path.join(folder, f))
        third = self.serve(*WINDOW, *EXACT, "--cache-dir", folder)
        self.assertIn("is not a whole conversation", third.log())
        got = post(third.addr, nxt, 16)
        self.assertEqual(got["cache_from"], "none")
        self.assertEqual(got["prompt_n"], got["prompt_tokens"])


class Loop(Case):
    """Test 3: killed at random under load, six times."""

    CONVS, TURNS, ANSWER, KILLS = 3, 24, 12, 6
    ARGS = ["--budget", "64", "--sinks", "4", "--lookahead", "1", "-np",
            "2"] + EXACT

    def test_crash_loop(self) -> None:
        calm = self.serve(*self.ARGS)
        want = [self.conversation(calm.addr, c) for c in range(self.CONVS)]
        calm.stop()
        folder = os.path.join(TMP.name, "loop")
        args = [*self.ARGS, "--cache-dir", folder, "--cache-write-ms", "200"]
        cur = {"sv": self.serve(*args)}
        logs: List[str] = []
        got: List[List[dict]] = [[] for _ in range(self.CONVS)]
        errors: List[str] = []
        last: List[str] = ["" for _ in range(self.CONVS)]
        done = threading.Event()
        settled = threading.Event()

        def client(c: int) -> None:
            hist = "%s %s" % (OPENER, "Tom Sue Ben".split()[c])
            try:
                for k in range(self.TURNS):
                    prompt = hist + line(k + c)
                    while not done.is_set():
                        try:
                            a = post(cur["sv"].addr, prompt, self.ANSWER)
                            break
                        except (OSError, AssertionError) as e:
                            last[c] = "turn %d: %r" % (k, e)
                            if settled.is_set() and \
                                    cur["sv"].proc.poll() is not None:
                                # Died by itself after the last restart:
                                # nobody starts it again.
                                errors.append("serve exited %s under "
                                              "conversation %d" % (
                                                  cur["sv"].proc.poll(),
                                                  c))
                                return
                            time.sleep(0.05)  # killed: sent again
                    else:
                        return
                    got[c].append(a)
                    hist = prompt + a["text"]
            except Exception as e:  # noqa: BLE001
                errors.append(repr(e))

        rng = random.Random(43)
        threads = [threading.Thread(target=client, args=(c,), daemon=True)
                   for c in range(self.CONVS)]
        for t in threads:
            t.start()
        kills = 0
        try:
            while kills < self.KILLS and any(t.is_alive() for t in threads):
                time.sleep(rng.uniform(0.05, 0.3))
                kill(cur["sv"])
                kills += 1
                logs.append(cur["sv"].log())
                cur["sv"] = self.serve(*args)
            settled.set()
            # A conversation's turns take minutes under ASan on a busy
            # machine: the clients get them (an error fails anyway).
            for t in threads:
                t.join(900)
        finally:
            done.set()
        logs.append(cur["sv"].log())
        # A sanitizer's report ends a serve as a kill does: its log says.
        for log in logs:
            self.assertNotRegex(log, "runtime error|Sanitizer", log[-3000:])
        self.assertEqual(errors, [], logs[-1][-3000:])
        self.assertGreaterEqual(kills, 3)
        alive = cur["sv"].proc.poll() is None
        for c in range(self.CONVS):
            self.assertEqual(
                [a["text"] for a in got[c]], [a["text"] for a in want[c]],
                "conversation %d; its last retry: %s; serve %s; its log "
                "ends:\n%s" % (c, last[c] or "none",
                                "running" if alive else "gone",
                                logs[-1][-3000:]))
        found = sum("conversations found in" in log for log in logs)
        self.assertGreater(found, 0)
        self.assertFalse(any("is not a whole conversation" in log
                             for log in logs))
        saved = sum(1 for c in range(self.CONVS) for a, w in
                    zip(got[c], want[c]) if a["prompt_n"] < w["prompt_n"]
                    + 2 and w["prompt_n"] < w["prompt_tokens"])
        FIGURES["3 loop"] = (
            "%d kills under %d conversations of %d turns; every answer "
            "the undisturbed one; %d restarts found conversations on "
            "disk; %d continued turns as cheap as undisturbed" % (
                kills, self.CONVS, self.TURNS, found, saved))

    def conversation(self, addr: str, c: int) -> List[dict]:
        hist, out = "%s %s" % (OPENER, "Tom Sue Ben".split()[c]), []
        for k in range(self.TURNS):
            prompt = hist + line(k + c)
            a = post(addr, prompt, self.ANSWER)
            out.append(a)
            hist = prompt + a["text"]
        return out


class Full(Case):
    """Test 4: a full --cache-dir."""

    def test_full_disk(self) -> None:
        if os.geteuid() != 0:
            self.skipTest("needs root to mount a small tmpfs")
        mnt = os.path.join(TMP.name, "full")
        os.mkdir(mnt)
        r = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=1m",
                            "tmpfs", mnt], capture_output=True, text=True)
        if r.returncode != 0:
            self.skipTest("cannot mount a tmpfs: " + r.stderr.strip())
        try:
            self.full(mnt)
        finally:
            subprocess.run(["umount", "-l", mnt], capture_output=True)

    def full(self, mnt: str) -> None:
        folder = os.path.join(mnt, "convs")
        filler = os.path.join(mnt, "filler")
        sv = self.serve(*WINDOW, *EXACT, "--cache-dir", folder,
                        "--cache-write-ms", "0")
        fd = os.open(filler, os.O_WRONLY | os.O_CREAT, 0o600)
        try:
            while os.write(fd, b"\0" * 4096) > 0:
                pass
        except OSError:
            pass
        os.close(fd)
        turns = talk(sv.addr, 6)
        f = figures(sv)
        self.assertGreater(f["cache_dir_write_errors_total"], 0)
        self.assertEqual(sv.log().count("cannot write"), 1)
        # With room again, the failed write is tried again by itself
        # (every 2 s), no new turn needed.
        os.unlink(filler)
        f2 = written(sv)
        self.assertGreater(f2["cache_dir_writes_total"],
                           f["cache_dir_writes_total"])
        self.assertIn("writing %s again" % folder, sv.log())
        kill(sv)
        again = self.serve(*WINDOW, *EXACT, "--cache-dir", folder)
        self.assertIn("conversations found in", again.log())
        nxt = turns[-1]["prompt"] + turns[-1]["text"] + line(6)
        b = post(again.addr, nxt, 16)
        self.assertEqual(b["cache_from"], "disk")
        self.assertLess(b["prompt_n"], 16)
        FIGURES["4 full"] = "%d writes failed while full; found after" % (
            f["cache_dir_write_errors_total"])


if __name__ == "__main__":
    unittest.main()

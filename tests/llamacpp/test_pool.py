"""evictd-llama serve on a pool of evictd instances that changes size under
load (make e2e-llamacpp): three instances (--no-autocreate, no state
directory) behind a real nginx running deploy/nginx-shard.conf, serve
(stories260K, --exact) with 16 generations in flight through nginx; then a
fourth instance added and nginx reloaded, one instance killed with SIGKILL
and restarted without state, the pool shrunk back to the first three
(tests/support/resize.py, whose plan says beforehand which sessions each
change moves). Every generation completes with the text the same request
got from the pool left alone, none fails, and serve's /metrics and the
daemons' count exactly the re-homings the plan predicts: unknown_session
where a session is not held (the fourth instance, the restarted one),
diverged where an instance holds an old window of it (a session back from
the fourth). The same run with re-homing off (EVICTD_LLAMA_REHOME=off)
fails requests: the negative control.

nginx refuses POST /step (421), so serve steps one session per request
through it (told once in its log, a gauge in /metrics).

Why here and not in `make check` with the rest of the nginx harness
(tests/shard): the engine needs llama.cpp, which `make check` does not
build (about 5 minutes from the npm source on 2 cores, and an npm
registry); `make e2e-llamacpp` builds it and CI runs it. `make check` has
the daemons' side of the same changes (tests/shard/resize_test.py: 16
engines written with the Python client).
"""

import http.client
import json
import shutil
import sys
import threading
import time
import unittest
from typing import List, Optional

from support import paths, resize, shard
from support.metrics import scrape as serve_metrics
from support.serve import Serve
from support.shard import NGINX

EVICTD = paths.evictd_bin()
STORIES = paths.stories_gguf()
# --no-cache-prompt: each request its own session, whose ids the plan
# knows beforehand (a request may otherwise continue a conversation an
# earlier one left, in that one's session).
SETTINGS = ["--budget", "48", "--sinks", "4", "--lookahead", "8", "--exact",
            "--no-cache-prompt",
            "--parallel", "16", "--threads", "1"]
N_PREDICT = 1000
STARTS = ["Once upon a time", "One day", "Lily", "Tom and his dog",
          "The sun", "A little bird", "There was a", "Mom said",
          "The cat", "Ben wanted", "In the park", "A big truck",
          "Sue had a", "The girl", "Tim saw", "It was a"]


class Stream(threading.Thread):
    """One streamed /completion through serve: its text, its events so
    far, and how it ended."""

    def __init__(self, addr: str, prompt: str) -> None:
        super().__init__(daemon=True)
        self.addr, self.prompt = addr, prompt
        self.text, self.events, self.last = "", 0, None
        self.session: Optional[str] = None
        self.ended_at = 0.0

    def run(self) -> None:
        host, port = self.addr.rsplit(":", 1)
        c = http.client.HTTPConnection(host, int(port), timeout=300)
        c.request("POST", "/completion", body=json.dumps(dict(
            prompt=self.prompt, n_predict=N_PREDICT, stream=True,
            temperature=0)))
        r = c.getresponse()
        buf = b""
        while True:
            chunk = r.read1(4096)
            if not chunk:
                break
            buf += chunk
            while b"\n\n" in buf:
                block, buf = buf.split(b"\n\n", 1)
                ev = json.loads(block[6:])
                self.events += 1
                self.text += ev.get("content", "")
                if ev.get("stop") or "error" in ev:
                    self.last = ev
        c.close()
        self.ended_at = time.monotonic()


def prefix(sv: Serve) -> str:
    """serve's task (and session) ids are PREFIX-K, K from 1; its log says
    PREFIX as it starts."""
    p = sv.line.prefix()
    assert p, sv.log()
    return p


def run_all(addr: str, during=None) -> List[Stream]:
    """The 16 requests at once; during(streams) runs while they stream."""
    streams = [Stream(addr, p) for p in STARTS]
    for s in streams:
        s.start()
    if during is not None:
        during(streams)
    for s in streams:
        s.join(600)
    return streams


def wait_events(streams: List[Stream], n: int, secs: float = 120) -> None:
    """Until every stream has sent n more events than it had."""
    want = [s.events + n for s in streams]
    deadline = time.monotonic() + secs
    while any(s.events < w and s.is_alive() for s, w in zip(streams, want)):
        if time.monotonic() > deadline:
            raise AssertionError("streams stalled: %s"
                                 % [s.events for s in streams])
        time.sleep(0.01)


class Pool(unittest.TestCase):

    def setUp(self) -> None:
        paths.require(EVICTD, paths.evictd_llama(), STORIES, NGINX)
        self.tmp = shard.scratch("evictd-pool-")
        self.addCleanup(shutil.rmtree, self.tmp, True)

    def pool(self) -> resize.ResizingPool:
        p = resize.ResizingPool(EVICTD, NGINX, self.tmp)
        self.addCleanup(p.stop)
        return p

    def serve(self, pool: resize.ResizingPool, **env: str) -> Serve:
        sv = Serve(self.tmp, pool.url(), *SETTINGS, model=STORIES, env=env)
        self.addCleanup(sv.stop)
        return sv

    def resize(self, pool: resize.ResizingPool, plan: resize.Plan):
        """The changes, each once every stream has moved on a little."""
        marks = {}

        def during(streams: List[Stream]) -> None:
            wait_events(streams, 30)
            pool.grow(plan)
            wait_events(streams, 30)
            pool.kill_restart(plan)
            wait_events(streams, 30)
            pool.shrink(plan)
            marks["shrunk"] = time.monotonic()
        return during, marks

    def test_resize_under_load(self) -> None:
        pool = self.pool()
        sv = self.serve(pool)
        base = run_all(sv.addr)
        for s in base:
            self.assertEqual((s.last or {}).get("stop_type"), "limit",
                             (s.prompt, s.last, sv.log()[-2000:]))
        self.assertIn("steps go one session per request", sv.log())
        # serve's task ids are PREFIX-K (its log says PREFIX): the next 16
        # are known.
        ids = ["%s-%d" % (prefix(sv), k) for k in range(17, 33)]
        plan = resize.plan(pool.names, ids)
        during, marks = self.resize(pool, plan)
        got = run_all(sv.addr, during)
        for s, b in zip(got, base):
            self.assertEqual((s.last or {}).get("stop_type"), "limit",
                             (s.prompt, s.last, sv.log()[-3000:]))
            self.assertEqual(s.text, b.text, s.prompt)
            self.assertGreater(s.ended_at, marks["shrunk"],
                               "a generation ended before the pool shrank")
        m = serve_metrics(sv.addr)
        self.assertEqual(m["evictd_llama_requests_failed_total"], 0)
        self.assertEqual(m["evictd_llama_evictd_per_session"], 1)
        rehomed = {c: m['evictd_llama_rehomes_total{cause="%s"}' % c]
                   for c in ("unknown_session", "diverged", "size")}
        self.assertEqual(rehomed, {"unknown_session": plan.unknown(),
                                   "diverged": plan.diverged(), "size": 0},
                         str(plan))
        # Every session was made by a PUT after its first step met 404.
        self.assertEqual(m["evictd_llama_evictd_creates_total"], 32)
        self.assertGreater(m["evictd_llama_evictd_gateway_resends_total"], 0)
        self.assertEqual(pool.counts("evictd_adoptions_created_total"),
                         plan.unknown())
        self.assertEqual(pool.counts("evictd_adoptions_replaced_total"),
                         plan.diverged())
        self.assertEqual(pool.counts("evictd_divergences_total"),
                         plan.diverged())
        print("\npool: %s; 16 generations of %d tokens identical to the "
              "undisturbed run" % (plan, N_PREDICT), file=sys.stderr)

    def test_resize_without_rehoming_fails(self) -> None:
        # The negative control: the same changes, re-homing off.
        pool = self.pool()
        sv = self.serve(pool, EVICTD_LLAMA_REHOME="off")
        ids = ["%s-%d" % (prefix(sv), k) for k in range(1, 17)]
        plan = resize.plan(pool.names, ids)
        during, _ = self.resize(pool, plan)
        got = run_all(sv.addr, during)
        failed = [s for s in got if "error" in (s.last or {})]
        self.assertTrue(failed, [s.last for s in got])
        self.assertIn("unknown_session", failed[0].last["error"]["message"])
        m = serve_metrics(sv.addr)
        self.assertEqual(m["evictd_llama_requests_failed_total"], len(failed))


if __name__ == "__main__":
    unittest.main()

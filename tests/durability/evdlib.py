"""Shared by the durability tests: the daemon as a child process, a
keep-alive JSON client, a naive model of a session's window, and a client's
sessions with the requests it may send and the answers it must get.

The model is deliberately the dumbest thing that can work (a list of
(position, slot) pairs and a cursor), so that it cannot share a bug with the
ring buffer of server/window.c. Standard library only.
"""
import argparse
import copy
import http.client
import json
import os
import random
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time

LISTEN_RE = re.compile(r"listening on (\S+)\s")
DEFAULT_BUDGET = 8


class Fail(Exception):
    """A test expectation that did not hold."""


def expect(ok, what):
    if not ok:
        raise Fail(what)


# ---- the daemon -------------------------------------------------------------


class Daemon:
    """One evictd process; its stderr goes to a log file that outlives it, so
    that a failure can show what the daemon said. Every instance started is
    stopped (by its own pid) when the test ends; see stop_all()."""

    live = []

    def __init__(self, binary, log_path):
        self.binary, self.log_path = binary, log_path
        self.proc, self.addr, self.offset = None, None, 0

    def start(self, *args, wait=20.0):
        """Starts the daemon on an ephemeral loopback port. Returns None once
        it logs its address, or its exit status if it exits first."""
        self.offset = (os.path.getsize(self.log_path)
                       if os.path.exists(self.log_path) else 0)
        env = {k: v for k, v in os.environ.items()
               if not k.startswith("EVICTD_")}
        with open(self.log_path, "ab") as log:
            self.proc = subprocess.Popen(
                [self.binary, "--listen", "127.0.0.1:0", *map(str, args)],
                stdin=subprocess.DEVNULL, stdout=log, stderr=log, env=env)
        Daemon.live.append(self)
        deadline = time.monotonic() + wait
        while time.monotonic() < deadline:
            m = LISTEN_RE.search(self.log())
            if m:
                self.addr = m.group(1)
                return None
            rc = self.proc.poll()
            if rc is not None:
                self._forget()
                return rc
            time.sleep(0.01)
        self.kill()
        raise Fail(f"evictd did not start within {wait:.0f} s; log:\n"
                   + self.log()[-3000:])

    def log(self):
        """What this start of the daemon has logged so far."""
        with open(self.log_path, "rb") as f:
            f.seek(self.offset)
            return f.read().decode("utf-8", "replace")

    @property
    def pid(self):
        return self.proc.pid

    def _forget(self):
        if self in Daemon.live:
            Daemon.live.remove(self)

    def kill(self):
        """SIGKILL, then reap. Returns the exit status (negative: signal)."""
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGKILL)
        rc = self.proc.wait()
        self._forget()
        return rc

    def term(self, timeout=30.0):
        """SIGTERM, then wait for the exit. Returns the exit status."""
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
        try:
            rc = self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            self.kill()
            raise Fail(f"evictd ignored SIGTERM for {timeout:.0f} s")
        self._forget()
        return rc

    @staticmethod
    def stop_all():
        for d in list(Daemon.live):
            d.kill()


def wait_dir_free(state_dir, timeout=10.0):
    """Waits until no process still runs with `state_dir` on its command
    line: after a SIGKILL, the snapshot writer the daemon forked (a copy of
    it, same command line) dies of its parent-death signal, but not at the
    very instant its parent does."""
    needle = state_dir.encode()
    deadline = time.monotonic() + timeout
    while True:
        busy = []
        for p in os.listdir("/proc"):
            if not p.isdigit():
                continue
            try:
                with open(f"/proc/{p}/cmdline", "rb") as f:
                    if needle in f.read():
                        busy.append(p)
            except OSError:
                pass
        if not busy:
            return
        if time.monotonic() > deadline:
            raise Fail(f"processes {busy} still use {state_dir}")
        time.sleep(0.01)


# ---- the client -------------------------------------------------------------


class Transport(Exception):
    """No complete answer: the request may or may not have been applied."""


class Client:
    """A keep-alive HTTP/1.1 JSON client for one daemon address."""

    def __init__(self, addr, timeout=30.0):
        host, port = addr.rsplit(":", 1)
        self.c = http.client.HTTPConnection(host, int(port), timeout=timeout)

    def raw(self, method, path, data=None, headers=None):
        """Returns (status, body bytes). Raises Transport when the
        connection fails before a whole answer was read."""
        try:
            self.c.request(method, path, body=data, headers=headers or {})
            r = self.c.getresponse()
            return r.status, r.read()
        except (OSError, http.client.HTTPException) as e:
            self.c.close()
            raise Transport(f"{method} {path}: {e!r}") from None

    def metric(self, name):
        """The value of an unlabelled counter or gauge of GET /metrics."""
        status, text = self.raw("GET", "/metrics")
        expect(status == 200, f"GET /metrics: status {status}")
        m = re.search(rb"^" + re.escape(name.encode()) + rb" (\S+)$", text,
                      re.M)
        expect(m is not None, f"GET /metrics has no {name}")
        return float(m.group(1))

    def call(self, method, path, body=None):
        """Returns (status, parsed JSON body or None). Raises Transport when
        the connection fails before a whole answer was read."""
        data = None
        headers = {}
        if body is not None:
            data = body if isinstance(body, bytes) else json.dumps(
                body, separators=(",", ":")).encode()
            headers["Content-Type"] = "application/json"
        status, raw = self.raw(method, path, data, headers)
        if not raw:
            return status, None
        try:
            return status, json.loads(raw)
        except ValueError:
            raise Fail(f"{method} {path}: answer is not JSON: {raw[:200]!r}")

    def close(self):
        self.c.close()


# ---- the model --------------------------------------------------------------


class Win:
    """A window kept as a plain list: slots are handed out by a cursor that
    runs 0..budget and then wraps to sinks; the oldest unpinned position
    (slot >= sinks) goes first."""

    def __init__(self, budget, sinks):
        self.budget, self.sinks = budget, sinks
        self.kept = [(0, 0)]  # (position, slot), oldest first
        self.tail = 1 if budget > 0 else 0
        self.newest = 0

    def _next(self, s):
        return self.sinks if s == self.budget else s + 1

    def _drop_to(self, budget):
        victims = []
        while len(self.kept) > budget:
            i = next(k for k, (_, s) in enumerate(self.kept)
                     if s >= self.sinks)
            victims.append(self.kept.pop(i)[0])
        return victims

    def step(self, positions):
        victims, slots = [], []
        for p in positions:
            assert p > self.newest
            slot = self.tail
            self.kept.append((p, slot))
            self.tail = self._next(slot)
            self.newest = p
            slots.append(slot)
            victims += self._drop_to(self.budget)
        return {"victims": victims, "slots": slots, "size": len(self.kept),
                "newest": self.newest}

    def evict(self, budget):
        victims = self._drop_to(budget)
        return {"victims": victims, "size": len(self.kept)}

    def view(self, sid):
        return {"id": sid, "budget": self.budget, "sinks": self.sinks,
                "size": len(self.kept), "newest": self.newest,
                "kept": [p for p, _ in self.kept],
                "slots": [s for _, s in self.kept]}


class Sess:
    """What one session is: absent, or a window and the positions and answer
    of its last applied step request (what a retry gets again)."""

    def __init__(self):
        self.win = None
        self.last = None  # (positions tuple, answer dict)

    def view(self, sid):
        return None if self.win is None else self.win.view(sid)


def same_answer(got, want):
    """Answers compare exactly, except the wording of error messages."""
    if isinstance(want, dict) and isinstance(got, dict):
        if set(got) != set(want):
            return False
        return all(k == "message" and isinstance(got[k], str)
                   or same_answer(got[k], want[k]) for k in want)
    if isinstance(want, list) and isinstance(got, list):
        return len(got) == len(want) and all(
            same_answer(g, w) for g, w in zip(got, want))
    return type(got) is type(want) and got == want


class Op:
    """One request, the answer the model predicts, and the states of the
    sessions it touches before and after (`after` is applied once the answer
    is in; at a crash either may be what the daemon recovers)."""

    def __init__(self, method, path, body, status, answer, before, after,
                 kind):
        self.method, self.path, self.body = method, path, body
        self.status, self.answer = status, answer
        self.before, self.after, self.kind = before, after, kind

    def describe(self):
        b = json.dumps(self.body, separators=(",", ":"))
        return f"{self.method} {self.path} {b[:200]}"


BUDGETS = (1, 2, 3, 5, 8, 13, 40, 300)
GAPS = (1, 1, 1, 1, 2, 3, 9, 1000)


class Fleet:
    """The sessions one client owns (nobody else touches them, so that the
    client alone decides their order of changes), with a generator of
    requests over them. `ids` may be any valid session ids."""

    def __init__(self, rng, ids):
        self.rng = rng
        self.ids = list(ids)
        self.s = {i: Sess() for i in self.ids}

    # -- helpers --
    def _positions(self, sess, n):
        p, out = sess.win.newest if sess.win else 0, []
        for _ in range(n):
            p += self.rng.choice(GAPS)
            out.append(p)
        return out

    def _config(self):
        b = self.rng.choice(BUDGETS)
        return b, self.rng.randrange(0, min(4, b))

    def _step_item(self, sid, sess, body):
        """Fills a step body for session sid (state `sess`, changed in
        place) and returns the expected answer."""
        n = 1 if self.rng.random() < 0.6 else self.rng.randrange(2, 12)
        positions = self._positions(sess, n)
        if n == 1 and self.rng.random() < 0.7:
            body["pos"] = positions[0]
        else:
            body["positions"] = positions
        if self.rng.random() < 0.1:
            body["attention"] = [0.5, {"any": "json"}]
        if sess.win is None:
            budget, sinks = DEFAULT_BUDGET, 0
            if self.rng.random() < 0.8:
                budget, sinks = self._config()
                body["budget"], body["sinks"] = budget, sinks
            sess.win = Win(budget, sinks)
        ans = sess.win.step(positions)
        sess.last = (tuple(positions), ans)
        return ans

    # -- requests --
    def op_step(self, sid):
        before = self.s[sid]
        sess = copy.deepcopy(before)
        body = {}
        ans = self._step_item(sid, sess, body)
        return Op("POST", f"/session/{sid}/step", body, 200, ans,
                  {sid: before}, {sid: sess}, "step")

    def op_batch(self):
        k = self.rng.randrange(1, 6)
        sids = [self.rng.choice(self.ids) for _ in range(k)]
        before = {sid: self.s[sid] for sid in sids}
        after = {sid: copy.deepcopy(self.s[sid]) for sid in sids}
        items, results = [], []
        for sid in sids:
            sess = after[sid]
            item = {"session": sid}
            if sess.win is not None and self.rng.random() < 0.1:
                # A stale item: refused alone, the others still apply.
                # Position 0 is never a retry (no step request holds it).
                item["pos"] = 0
                results.append({"error": {
                    "code": "stale_position", "message": "",
                    "status": 409, "newest": sess.win.newest}})
            else:
                results.append(self._step_item(sid, sess, item))
            items.append(item)
        return Op("POST", "/step", {"steps": items}, 200,
                  {"results": results}, before, after, "batch")

    def op_evict(self, sid):
        before = self.s[sid]
        sess = copy.deepcopy(before)
        body = None
        b = sess.win.budget
        if self.rng.random() < 0.7:
            b = self.rng.randrange(sess.win.sinks + 1,
                                   sess.win.budget + 2)
            body = {"budget": b}
        ans = sess.win.evict(b)
        return Op("POST", f"/session/{sid}/evict", body, 200, ans,
                  {sid: before}, {sid: sess}, "evict")

    def op_put(self, sid):
        before = self.s[sid]
        sess = copy.deepcopy(before)
        if sess.win is None:
            budget, sinks = self._config()
            sess.win = Win(budget, sinks)
            status = 201
        else:
            budget, sinks = sess.win.budget, sess.win.sinks
            status = 200
        return Op("PUT", f"/session/{sid}", {"budget": budget, "sinks": sinks},
                  status, sess.win.view(sid), {sid: before}, {sid: sess},
                  "put")

    def op_delete(self, sid):
        before = self.s[sid]
        return Op("DELETE", f"/session/{sid}", None, 204, None,
                  {sid: before}, {sid: Sess()}, "delete")

    def op_retry(self, sid):
        """The last step request again: answered as before, plus
        "replayed", and nothing changes."""
        sess = self.s[sid]
        positions, ans = sess.last
        return Op("POST", f"/session/{sid}/step",
                  {"positions": list(positions)}, 200,
                  dict(ans, replayed=True), {sid: sess}, {sid: sess}, "retry")

    def op_get(self, sid):
        sess = self.s[sid]
        if sess.win is None:
            return Op("GET", f"/session/{sid}", None, 404,
                      {"error": {"code": "unknown_session", "message": ""}},
                      {sid: sess}, {sid: sess}, "get")
        return Op("GET", f"/session/{sid}", None, 200, sess.win.view(sid),
                  {sid: sess}, {sid: sess}, "get")

    def next_op(self):
        """A random request over this fleet's sessions."""
        sid = self.rng.choice(self.ids)
        sess = self.s[sid]
        r = self.rng.random()
        if sess.win is None:
            if r < 0.3:
                return self.op_put(sid)
            if r < 0.4:
                return self.op_get(sid)
            if r < 0.6:
                return self.op_batch()
            return self.op_step(sid)
        if r < 0.45:
            return self.op_step(sid)
        if r < 0.65:
            return self.op_batch()
        if r < 0.75:
            return self.op_evict(sid)
        if r < 0.79:
            return self.op_delete(sid)
        if r < 0.83:
            return self.op_put(sid)
        if r < 0.9 and sess.last is not None:
            return self.op_retry(sid)
        return self.op_get(sid)

    def send(self, client, op):
        """Sends op and checks the answer against the model; applies it to
        the model once the answer is in. Raises Transport when no whole
        answer came (then the caller decides what the model is)."""
        status, body = client.call(op.method, op.path, op.body)
        expect(status == op.status and same_answer(body, op.answer),
               f"{op.describe()}: expected {op.status} "
               f"{json.dumps(op.answer)[:400]}, got {status} "
               f"{json.dumps(body)[:400]}")
        self.s.update(op.after)

    def run(self, client, n):
        for _ in range(n):
            self.send(client, self.next_op())


def verify(client, fleets, pending=None):
    """Checks that the daemon holds exactly what the fleets' models say, by
    GET of every session and a retry of every live session's last step
    request. pending maps a fleet to the Op that was in flight when the
    daemon died: its sessions must be all as before it or all as after it
    (a request is all or nothing); the model then takes whichever holds.
    Returns the number of in-flight requests found applied."""
    pending = pending or {}
    applied = 0
    for f in fleets:
        views = {}
        for sid in f.ids:
            status, body = client.call("GET", f"/session/{sid}")
            expect(status in (200, 404), f"GET {sid}: status {status} {body}")
            views[sid] = body if status == 200 else None
        op = pending.get(f)
        if op is not None:
            was = all(views[s] == st.view(s) for s, st in op.before.items())
            now = all(views[s] == st.view(s) for s, st in op.after.items())
            if not was and not now:
                lines = [f"  {s}: got {json.dumps(views[s])}\n"
                         f"    before {json.dumps(op.before[s].view(s))}\n"
                         f"    after  {json.dumps(op.after[s].view(s))}"
                         for s in op.before]
                raise Fail("a request in flight at the crash was half "
                           f"applied: {op.describe()}\n" + "\n".join(lines))
            if now:
                if not was:
                    applied += 1
                f.s.update(op.after)
        for sid in f.ids:
            want = f.s[sid].view(sid)
            expect(views[sid] == want,
                   f"session {sid}: the daemon holds "
                   f"{json.dumps(views[sid])}, expected {json.dumps(want)}")
        for sid in f.ids:
            if f.s[sid].last is not None:
                f.send(client, f.op_retry(sid))
    return applied


def session_ids(prefix, n):
    """n session ids, a few of them long (up to the 128-byte limit) and
    using every character class the id rule allows."""
    ids = []
    for i in range(n):
        if i % 17 == 5:
            ids.append((f"{prefix}.{i}~long-" + "x" * 128)[:128])
        elif i % 11 == 3:
            ids.append(f"{prefix}_{i}.A-z~9")
        else:
            ids.append(f"{prefix}s{i}")
    return ids


def segments(state_dir):
    """The journal segment numbers in the state directory, ascending."""
    return sorted(int(n[8:]) for n in os.listdir(state_dir)
                  if re.fullmatch(r"journal\.\d+", n))


# ---- running cases ----------------------------------------------------------


class Ctx:
    """What a case gets: the binary, a scratch directory of its own, a
    seeded random source, and daemons that log into that directory."""

    def __init__(self, binary, tmp, seed):
        self.binary, self.tmp, self.seed = binary, tmp, seed
        self.rng = random.Random(seed)
        self.daemons = []

    def path(self, name):
        return os.path.join(self.tmp, name)

    def daemon(self, name="evictd"):
        d = Daemon(self.binary, self.path(name + ".log"))
        self.daemons.append(d)
        return d


def run_cases(doc, cases, extra_args=None):
    """The command line of a test program: [--seed N] [--keep]
    [--only NAME[,NAME]] [path/to/evictd] (default $EVICTD_BIN), plus the
    options in extra_args (name -> (default, type, help)). Runs each case
    with a fresh scratch directory and prints one line per case (with the
    daemons' logs when it fails); exits 1 when any failed."""
    ap = argparse.ArgumentParser(description=doc,
                                 formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("binary", nargs="?", default=os.environ.get("EVICTD_BIN"))
    ap.add_argument("--seed", type=int, default=None)
    ap.add_argument("--keep", action="store_true",
                    help="keep the scratch directories")
    ap.add_argument("--only", default=None, help="comma-separated cases")
    for name, (default, typ, hlp) in (extra_args or {}).items():
        ap.add_argument("--" + name, type=typ, default=default, help=hlp)
    opts = ap.parse_args()
    if not opts.binary:
        ap.error("no daemon: give its path or set EVICTD_BIN")
    opts.binary = os.path.abspath(opts.binary)
    seed = opts.seed if opts.seed is not None else random.randrange(1 << 31)
    prog = os.path.basename(sys.argv[0])
    print(f"{prog}: seed {seed} (rerun with --seed {seed})", flush=True)
    only = set(opts.only.split(",")) if opts.only else None
    failed = []
    for i, (name, fn) in enumerate(cases):
        if only is not None and name not in only:
            continue
        tmp = tempfile.mkdtemp(prefix=f"evictd-{name}-")
        ctx = Ctx(opts.binary, tmp, seed + i)
        ctx.opts = opts
        t0 = time.monotonic()
        try:
            note = fn(ctx)
        except (Fail, Transport, AssertionError, OSError) as e:
            Daemon.stop_all()
            failed.append(name)
            print(f"FAIL {name} (seed {seed}): {e}", flush=True)
            for d in ctx.daemons:
                if os.path.exists(d.log_path):
                    with open(d.log_path, errors="replace") as f:
                        text = f.read()
                    print(f"--- {os.path.basename(d.log_path)} (last 40 "
                          "lines):\n" + "\n".join(text.splitlines()[-40:]))
            continue
        finally:
            Daemon.stop_all()
            if opts.keep:
                print(f"scratch directory kept: {tmp}")
            else:
                shutil.rmtree(tmp, ignore_errors=True)
        print(f"ok {name} ({time.monotonic() - t0:.1f} s)"
              + (f": {note}" if note else ""), flush=True)
    if failed:
        print(f"{prog}: FAILED: {', '.join(failed)} (seed {seed})",
              flush=True)
        sys.exit(1)

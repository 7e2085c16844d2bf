"""What the durability and fault suites share: a keep-alive JSON client,
the check of a daemon's state against a client's sessions (Fleet,
support.fleet's, whose names are handed on here too), and the command
line that runs a suite's cases. The daemon itself is support.daemon's.
Standard library only.
"""
import argparse
import http.client
import json
import os
import random
import re
import shutil
import sys
import tempfile
import time

from support.daemon import Daemon
from support.fail import Fail, expect
# Fleet and its names are handed on: the suites import them from here.
from support.fleet import (COVERAGE, DEFAULT_BUDGET, Fleet,  # noqa: F401
                           Op, Transport)
from support.window_model import apply_request, request_of, same_answer

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


def coverage(fleets, required=COVERAGE):
    """What the fleets' answered requests exercised: (counts by tag, tags
    of `required` never exercised)."""
    total = {}
    for f in fleets:
        for t, n in f.count.items():
            total[t] = total.get(t, 0) + n
    return total, [t for t in required if not total.get(t)]


def _probe(client, f, sids, op):
    """The in-flight op left every view of its sessions as it was, so the
    views cannot tell whether it was applied; its replay records can. For
    each session whose record it replaced, send the request of the new
    record: a replay of it means op was applied; an answer as the model
    gives for the old state means it was not (and now that request is).
    Returns the set of verdicts ("applied", "not applied")."""
    verdicts = set()
    for sid in sids:
        new, old = op.after[sid], op.before[sid]
        if new.last is None or new.last == old.last:
            continue
        method, path, body = request_of(sid, new.last[0], f.rng)
        status, got = client.call(method, path, body)
        if status == 200 and same_answer(got, dict(new.last[1],
                                                   replayed=True)):
            verdicts.add("applied")
            continue
        fresh = {sid: old.copy()}
        want = apply_request(fresh, sid, method, path, body)
        expect((status, True) == (want[0], same_answer(got, want[1])),
               f"{method} {path} {json.dumps(body)} (probing whether "
               f"{op.describe()} was applied at the crash): got {status} "
               f"{json.dumps(got)}, expected either "
               f"{json.dumps(dict(new.last[1], replayed=True))} or "
               f"{want[0]} {json.dumps(want[1])}")
        verdicts.add("not applied")
        f.s[sid] = fresh[sid]
        op.before[sid] = fresh[sid]
        status, view = client.call("GET", f"/session/{sid}")
        expect(status == 200 and view == fresh[sid].view(sid),
               f"GET {sid} after the probe: {status} {json.dumps(view)}, "
               f"expected {json.dumps(fresh[sid].view(sid))}")
    return verdicts


def verify(client, fleets, pending=None):
    """Checks that the daemon holds exactly what the fleets' models say, by
    GET of every session and a retry of every live session's last step,
    commit or truncate request. pending maps a fleet to the Op that was in
    flight when the daemon died: its sessions must be all as before it or
    all as after it (a request is all or nothing); the model then takes
    whichever holds. Returns the number of in-flight requests found
    applied."""
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
            # Sessions whose view the op leaves as it was: their records
            # tell (all must tell the same, and agree with the views).
            same = [s for s in op.before
                    if op.before[s].view(s) == op.after[s].view(s)]
            verdicts = _probe(client, f, same, op)
            if "not applied" in verdicts:
                for s in same:  # the probes may have changed them
                    views[s] = f.s[s].view(s)
            if now and was:
                now = verdicts != {"not applied"}
            expect(len(verdicts) < 2 and (
                not verdicts or (now and "applied" in verdicts)
                or (not now and "not applied" in verdicts)),
                f"a request in flight at the crash was half applied (by "
                f"its sessions' replay records): {op.describe()}")
            if now:
                if verdicts or not was:
                    applied += 1
                f.s.update(op.after)
        for sid in f.ids:
            want = f.s[sid].view(sid)
            expect(views[sid] == want,
                   f"session {sid}: the daemon holds "
                   f"{json.dumps(views[sid])}, expected {json.dumps(want)}")
        for sid in f.ids:
            st = f.s[sid]
            if st.win is None:
                continue
            w, tags = st.win, set()
            if w.drafts():
                tags.add("held-drafts")
            if not w.held:
                tags.add("held-nothing")
            if w.lookahead > 1:
                tags.add("held-lookahead")
            if w.page_size:
                tags.add("held-pages")
            if sid in f.children:
                tags.add("held-fork-child")
            if sid in f.adopted:
                tags.add("held-adopted")
            if st.last is not None:
                key = st.last[0]
                tags.add("record-" + key[0])
                if key[0] == "step" and key[3] is not None:
                    tags.add("record-commit-step" if key[1]
                             else "record-commit-only")
            for t in tags:
                f.count[t] = f.count.get(t, 0) + 1
            origin = f.fork_origin.get(sid)
            if sid in f.children and st.last is None and origin:
                # A fork's child has no replay record: its parent's last
                # request is new to it (applied, or refused as stale).
                method, path, body = request_of(sid, origin, f.rng)
                op = f._op("record-none-after-fork", method, path, body,
                           [sid], lambda a: apply_request(a, sid, method,
                                                          path, body))
                op.tags = {"record-none-after-fork"}
                f.send(client, op)
        for sid in f.ids:
            if f.s[sid].last is not None:
                op = f.op_retry(sid)
                op.tags = {"verify-" + op.kind}
                f.send(client, op)
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
        d = Daemon(self.path(name + ".log"), self.binary)
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

#!/usr/bin/env python3
"""Damaged, torn and foreign files in --state-dir, and a second daemon.

- A journal segment cut off inside its last record (a crash mid-write):
  the daemon starts, drops only that record, says so, and serves exactly
  the state before it; later records are appended and recovered fine.
- A byte flipped in the middle of a segment with records after it, or a
  segment missing between others: start-up refuses with a clear error and
  exit status 1, and leaves the files as they were (nothing truncated).
- A foreign file named snapshot or journal.00000001, a damaged or truncated
  snapshot: a clear error, exit status 1, never an empty state.
- A stray snapshot.tmp (a snapshot cut short) is ignored.
- A second daemon on the same --state-dir is refused while the first one
  goes on serving.

Usage: files_test.py [--seed N] [--only CASE,...] [path/to/evictd]
(default $EVICTD_BIN)."""
import copy
import os
import random
import re
import struct
import sys

sys.dont_write_bytecode = True
from support.durability import (  # noqa: E402
    DEFAULT_BUDGET, Client, Fleet, run_cases, segments, session_ids, verify)
from support.fail import expect  # noqa: E402

# Segments this release writes (version 2; version 1 is still read).
SEG_MAGICS = (b"EVDJRNL2", b"EVDJRNL1")


def seg_path(state, n):
    return os.path.join(state, f"journal.{n:08d}")


def records(data):
    """(offset, length on disk, lsn) of each record of a segment, as its
    format says: u32 len, u64 lsn, payload[len], u32 crc."""
    expect(data[:8] in SEG_MAGICS, "not a journal segment")
    out, at = [], 8
    while at + 12 <= len(data):
        n, lsn = struct.unpack_from("<IQ", data, at)
        if at + 16 + n > len(data):
            break
        out.append((at, 16 + n, lsn))
        at += 16 + n
    expect(at == len(data), f"segment has {len(data) - at} bytes of tail")
    return out


def start(d, state, *args):
    rc = d.start("--state-dir", state, "--fsync", "always", "--budget",
                 DEFAULT_BUDGET, *args)
    expect(rc is None, f"evictd exited with {rc} at start:\n{d.log()}")
    return Client(d.addr)


def populated(ctx, ops=300, runs=1, name="state"):
    """A state directory whose journal holds `ops` requests per run (a
    daemon killed after each run, so no snapshot; each run starts a new
    segment), and the fleet that models it."""
    state = ctx.path(name)
    d = ctx.daemon(f"evictd-{name}")
    f = Fleet(ctx.rng, session_ids("s", 20))
    for _ in range(runs):
        c = start(d, state)
        f.run(c, ops)
        c.close()
        d.kill()
    return state, d, f


def refused(d, state, what, *words):
    """Starting must fail with exit status 1 and an error naming `words`,
    leaving every file in the state directory as it was."""
    before = {n: open(os.path.join(state, n), "rb").read()
              for n in os.listdir(state) if n != "lock"}
    rc = d.start("--state-dir", state)
    log = d.log()
    sizes = {n: (len(before[n]), os.path.getsize(os.path.join(state, n))
                 if os.path.exists(os.path.join(state, n)) else None)
             for n in before}
    changed = {n: f"{a} -> {b} bytes" for n, (a, b) in sizes.items()
               if b is None or open(os.path.join(state, n), "rb").read()
               != before[n]}
    expect(rc == 1, f"{what}: exit status {rc}"
           f"{' (it started and serves)' if rc is None else ''}, expected "
           f"1; files changed: {changed or 'none'}")
    expect("listening on" not in log, f"{what}: it listened")
    line = next((ln for ln in log.splitlines() if " error " in ln), None)
    expect(line is not None, f"{what}: no error line in the log:\n{log}")
    for w in words:
        expect(re.search(w, line), f"{what}: the error does not say "
               f"{w!r}: {line}")
    expect(not changed, f"{what}: files changed: {changed}")
    return line


def why(line):
    """The reason in an error line, without time, level and state dir."""
    return re.sub(r"^.* error (--state-dir \S+: )?", "", line)


def case_torn_last_record(ctx):
    state, d, f = populated(ctx)
    cuts = []
    for kind in ("payload", "header", "boundary"):
        # One more request, so that the last record is a known one.
        before = copy.deepcopy(f.s)
        c = start(d, state)
        sid = next(s for s in f.ids if f.s[s].win is not None)
        op = f.op_step(sid)
        while len(op.body.get("positions", [])) < 2:
            op = f.op_step(sid)
        f.send(c, op)
        c.close()
        d.kill()
        seg = seg_path(state, segments(state)[-1])
        data = open(seg, "rb").read()
        at, n, _ = records(data)[-1]
        cut = {"payload": at + ctx.rng.randrange(12, n),
               "header": at + ctx.rng.randrange(1, 12),
               "boundary": at}[kind]
        os.truncate(seg, cut)
        f.s = before  # the cut request is lost: it was the last one
        c = start(d, state)
        log = d.log()
        if kind == "boundary":
            expect("dropping a torn record" not in log,
                   f"a clean cut reported as torn:\n{log}")
        else:
            expect(re.search(r"dropping a torn record at byte %d \(%d "
                             r"bytes\)" % (at, cut - at), log),
                   f"no word of the torn record at byte {at}:\n{log}")
            expect(os.path.getsize(seg) == at, "the torn record was not "
                   "cut off the file")
        verify(c, [f])
        f.run(c, 50)  # appended after the cut, and found again
        c.close()
        d.kill()
        c = start(d, state)
        verify(c, [f])
        c.close()
        d.kill()
        cuts.append(f"{kind} ({cut - at} of {n} bytes kept)")
    return "cut inside: " + ", ".join(cuts)


def case_damaged_middle(ctx):
    """A flipped byte in a record with records after it, in an older
    segment and then in the last one (where a torn end could be)."""
    notes = []
    for which in ("older", "last"):
        state, d, f = populated(ctx, 150, runs=2, name=which)
        segs = segments(state)
        seg = seg_path(state, segs[0] if which == "older" else segs[-1])
        data = bytearray(open(seg, "rb").read())
        recs = records(data)
        at, n, _ = recs[len(recs) // 2]
        data[at + 12 + ctx.rng.randrange(0, n - 16)] ^= 0x20  # the payload
        open(seg, "wb").write(data)
        line = refused(d, state, f"a flipped byte in the middle of the "
                       f"{which} journal segment", os.path.basename(seg),
                       r"damaged|corrupt")
        notes.append(f"{which} segment, record {len(recs) // 2 + 1} of "
                     f"{len(recs)}: {why(line)}")
    return "; ".join(notes)


def case_missing_segment(ctx):
    state, d, f = populated(ctx, 100, runs=3)
    segs = segments(state)
    expect(len(segs) == 3, f"segments {segs}")
    os.unlink(seg_path(state, segs[1]))
    line = refused(d, state, "a journal segment missing in the middle",
                   r"missing|LSN|damaged|corrupt")
    return why(line)


FOREIGN = (b"# evictd notes\nnothing to see here, just a text file that "
           b"happens to sit in the state directory\n")


def case_foreign_files(ctx):
    notes = []
    for name, content in (("snapshot", FOREIGN),
                          ("snapshot", bytes(random.Random(1).randbytes(300))),
                          ("journal.00000001", FOREIGN),
                          ("journal.00000001", b"hi")):
        state = ctx.path(f"state-{len(notes)}")
        os.mkdir(state)
        with open(os.path.join(state, name), "wb") as fh:
            fh.write(content)
        d = ctx.daemon(f"evictd-{len(notes)}")
        line = refused(d, state, f"a foreign {name}",
                       name if name != "snapshot" else r"snapshot",
                       r"not|corrupt")
        notes.append(why(line))
    return "; ".join(sorted(set(notes)))


def case_damaged_snapshot(ctx):
    notes = []
    for kind in ("flipped", "truncated"):
        state = ctx.path(f"state-{kind}")
        d = ctx.daemon(f"evictd-{kind}")
        f = Fleet(ctx.rng, session_ids("s", 20))
        c = start(d, state)
        f.run(c, 300)
        c.close()
        expect(d.term() == 0, "SIGTERM: exit status not 0")
        snap = os.path.join(state, "snapshot")
        data = bytearray(open(snap, "rb").read())
        if kind == "flipped":
            data[ctx.rng.randrange(24, len(data) - 20)] ^= 0x01
        else:
            data = data[:ctx.rng.randrange(1, len(data))]
        open(snap, "wb").write(data)
        line = refused(d, state, f"a {kind} snapshot", r"snapshot",
                       r"corrupt|truncated|checksum|trailer")
        notes.append(why(line))
    return "; ".join(notes)


def case_stray_snapshot_tmp(ctx):
    state, d, f = populated(ctx, 100)
    with open(os.path.join(state, "snapshot.tmp"), "wb") as fh:
        fh.write(FOREIGN)
    c = start(d, state)
    verify(c, [f])
    c.close()
    expect(d.term() == 0, "SIGTERM: exit status not 0")
    expect(not os.path.exists(os.path.join(state, "snapshot.tmp")),
           "snapshot.tmp is still there")


def case_second_daemon(ctx):
    state = ctx.path("state")
    first, second = ctx.daemon("first"), ctx.daemon("second")
    f = Fleet(ctx.rng, session_ids("s", 20))
    c = start(first, state)
    f.run(c, 200)
    rc = second.start("--state-dir", state)
    log = second.log()
    expect(rc == 1, f"a second daemon on the same --state-dir: exit status "
           f"{rc}, expected 1; log:\n{log}")
    expect(re.search(r"in use|locked", log), f"no clear error:\n{log}")
    f.run(c, 200)  # the first one goes on as if nothing happened
    verify(c, [f])
    c.close()
    expect(first.term() == 0, "SIGTERM: exit status not 0")
    c = start(first, state)
    verify(c, [f])
    c.close()
    first.term()
    return why(next(ln for ln in log.splitlines() if " error " in ln))


def case_not_a_directory(ctx):
    path = ctx.path("plain-file")
    with open(path, "w") as fh:
        fh.write("x")
    d = ctx.daemon()
    rc = d.start("--state-dir", path)
    expect(rc == 1, f"--state-dir naming a file: exit status {rc}")
    expect(re.search(r"plain-file", d.log()), f"no clear error:\n{d.log()}")


CASES = [
    ("torn-last-record", case_torn_last_record),
    ("damaged-middle-refused", case_damaged_middle),
    ("missing-segment-refused", case_missing_segment),
    ("foreign-files", case_foreign_files),
    ("damaged-snapshot", case_damaged_snapshot),
    ("stray-snapshot-tmp", case_stray_snapshot_tmp),
    ("second-daemon", case_second_daemon),
    ("not-a-directory", case_not_a_directory),
]

if __name__ == "__main__":
    run_cases(__doc__, CASES)

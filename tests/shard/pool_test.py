#!/usr/bin/env python3
"""The pool clients (deploy/clients/python/evictd_pool.py, evictd_pool_aio.py)
against a real nginx running deploy/nginx-shard.conf in front of three real
daemons:

- for hundreds of session ids (with `~` children, odd characters, 128-byte
  ids), the instance the pool computes is the one nginx routed to
  (X-Evictd-Backend), for the blocking and the asyncio pool;
- a pool batch comes back in request order, each item stepped on its own
  instance (checked directly on every instance), parts split per instance;
- with one instance down, its items are InstanceFailed naming it, and the
  other instances' items are answered and applied;
- a pool of one answers a batch exactly as a plain client does.

Usage: pool_test.py [path/to/evictd]  (default: $EVICTD_BIN). Needs nginx.
"""
import asyncio
import os
import random
import subprocess
import sys

from evictd_client import EvictdClient, StepResult
from evictd_pool import EvictdPool, InstanceFailed, Unroutable
from evictd_pool_aio import AsyncEvictdPool
from support.fail import Fail, expect
from support.shard import (Conn, Instance, harness_main, start_nginx,
                           stop_all)

PROBE = os.environ.get("POOL_PROBE")  # the C client's pool, tests/shard/pool_probe.c
ID_CHARS = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789._-"


def session_ids(rng):
    """Parents, `~` children of some, and odd shapes."""
    ids = [f"seq-{i}" for i in range(300)]
    ids += ["".join(rng.choice(ID_CHARS) for _ in range(rng.randint(1, 40)))
            for _ in range(150)]
    ids.append("x" * 128)
    ids += [f"{p}~{k}" for p in ids[:100] for k in ("1", "beam2")]
    ids += [f"{p}~a~b" for p in ids[300:330]]
    return list(dict.fromkeys(ids))


def probe(mode, urls, stdin):
    r = subprocess.run([PROBE, mode] + urls, input=stdin, capture_output=True,
                       text=True, timeout=60)
    expect(r.returncode == 0, f"pool_probe {mode}: {r.returncode} {r.stderr}")
    return r.stdout


def c_batch(urls, items):
    """The C pool's batch of {"session", "pos"} items: (rc, code, newest, msg)."""
    out = probe("batch", urls, "".join(f"{it['session']} {it['pos']}\n" for it in items))
    rows = [line.split(" ", 3) for line in out.splitlines()]
    expect(len(rows) == len(items), f"C pool batch: {len(rows)} rows for {len(items)}")
    return [(int(rc), code, int(newest), msg) for rc, code, newest, msg in rows]


def check_routing(front, addrs, urls):
    proxy = Conn(front)
    ids = session_ids(random.Random(12))
    routed = {}
    for sid in ids:
        status, _, backend = proxy.call("GET", f"/session/{sid}")
        expect(status == 404 and backend in addrs, f"GET {sid}: {status} via {backend}")
        routed[sid] = addrs.index(backend)
    with EvictdPool(urls) as pool:
        wrong = [s for s in ids if pool.instance_of(s) != routed[s]]
        expect(not wrong, f"blocking pool disagrees with nginx on {len(wrong)} ids, "
               f"e.g. {wrong[:5]}")
        try:
            pool.instance_of("~x")
            raise Fail("an empty shard key was routed")
        except Unroutable:
            pass
    apool = AsyncEvictdPool(urls)
    wrong = [s for s in ids if apool.instance_of(s) != routed[s]]
    expect(not wrong, f"asyncio pool disagrees with nginx on {wrong[:5]}")
    got = probe("route", urls, "".join(s + "\n" for s in ids)).split()
    wrong = [s for s, g in zip(ids, got) if int(g) != routed[s]]
    expect(len(got) == len(ids) and not wrong, f"C pool disagrees with nginx on {wrong[:5]}")
    expect(probe("route", urls, "~x\n").split() == ["-1"], "C pool routed an empty key")
    spread = [sum(1 for s in ids if routed[s] == i) for i in range(len(addrs))]
    expect(all(spread), f"nginx used only some instances: {spread}")
    print(f"pool: {len(ids)} ids ({sum('~' in s for s in ids)} with '~'), "
          f"the Python pools and the C pool route as nginx did: {spread}")
    return ids, routed


def check_batches(urls, addrs, routed, ids):
    sids = [s for s in ids if "~" not in s][:60]
    rng = random.Random(3)
    rng.shuffle(sids)
    items = [{"session": s, "positions": list(range(1, 2 + i % 3))}
             for i, s in enumerate(sids)]
    with EvictdPool(urls) as pool:
        for s in sids:  # the pool runs --no-autocreate, as nginx-shard wants
            pool.create(s, budget=8)
        out = pool.batch(items)
    expect(len(out) == len(items), "pool batch: wrong number of outcomes")
    for item, res in zip(items, out):
        expect(isinstance(res, StepResult) and res.newest == item["positions"][-1],
               f"pool batch item {item}: {res!r}")
    direct = {a: Conn(a) for a in addrs}
    for sid in sids:
        for i, a in enumerate(addrs):
            status, _, _ = direct[a].call("GET", f"/session/{sid}")
            expect(status == (200 if i == routed[sid] else 404),
                   f"{sid} on {a}: {status}, nginx routes it to {addrs[routed[sid]]}")
    # The asyncio pool: the next positions, same order promise.
    items2 = [{"session": it["session"], "pos": it["positions"][-1] + 1}
              for it in items]

    async def aio():
        async with AsyncEvictdPool(urls) as ap:
            return await ap.batch(items2)
    out2 = asyncio.run(aio())
    for item, res in zip(items2, out2):
        expect(isinstance(res, StepResult) and res.newest == item["pos"],
               f"aio pool batch item {item}: {res!r}")
    items3 = [{"session": it["session"], "pos": it["pos"] + 1} for it in items2]
    for item, (rc, code, newest, msg) in zip(items3, c_batch(urls, items3)):
        expect(rc == 0 and newest == item["pos"], f"C pool batch item {item}: {rc} {code} {msg}")
    items2 = items3
    print(f"pool: a {len(items)}-item batch split over {len(addrs)} instances "
          "comes back in request order, each item on its own instance (both Python pools, C pool)")
    return items2


def check_instance_down(daemons, urls, addrs, routed, items):
    down = 1
    expect(daemons[down].down() == 0, "could not stop an instance")
    items3 = [{"session": it["session"], "pos": it["pos"] + 1} for it in items]
    with EvictdPool(urls, timeout=2) as pool:
        out = pool.batch(items3)

    async def aio():
        async with AsyncEvictdPool(urls, timeout=2) as ap:
            return await ap.batch([{"session": it["session"], "pos": it["pos"] + 1}
                                   for it in items3])
    out_aio = asyncio.run(aio())
    out_c = c_batch(urls, [{"session": it["session"], "pos": it["pos"] + 2}
                           for it in items3])
    failed = ok = 0
    for item, res, res2, c in zip(items3, out, out_aio, out_c):
        if routed[item["session"]] == down:
            expect(c[0] == -2 and c[1] == "connection_failed" and
                   f"instance {addrs[down]} (" in c[3], f"C item {item} of the stopped instance: {c}")
            for r in (res, res2):
                expect(isinstance(r, InstanceFailed) and r.instance == addrs[down]
                       and addrs[down] in str(r) and r.code == "connection_failed",
                       f"item {item} of the stopped instance: {r!r}")
            failed += 1
        else:
            expect(isinstance(res, StepResult) and res.newest == item["pos"],
                   f"item {item} of a live instance: {res!r}")
            expect(isinstance(res2, StepResult) and res2.newest == item["pos"] + 1,
                   f"aio item {item} of a live instance: {res2!r}")
            expect(c[0] == 0 and c[2] == item["pos"] + 2, f"C item {item}: {c}")
            ok += 1
    expect(failed and ok, f"instance down: {failed} failed, {ok} ok")
    print(f"pool: with {addrs[down]} down its {failed} items are InstanceFailed "
          f"naming it, the other {ok} answered (Python pools, C pool)")


def check_pool_of_one(daemon):
    url = "http://" + daemon.addr
    items = [{"session": f"one-{i}", "positions": [1, 2, 3]} for i in range(5)]
    items.append({"session": "one-0", "pos": 9})  # a session twice: item error
    items.append({"session": "~alone", "pos": 1})  # one instance: nginx routes it
    twin = [dict(it, session="twin-" + it["session"]) for it in items]
    with EvictdPool([url]) as pool, EvictdClient(url) as plain:
        for i in range(5):
            pool.create(f"one-{i}", budget=8)
            plain.create(f"twin-one-{i}", budget=8)
        got, want = pool.batch(items), plain.batch(twin)
    expect(len(got) == len(want), "pool of one: wrong length")
    for g, w in zip(got, want):
        expect(type(g) is type(w) and repr(g).replace("twin-", "") ==
               repr(w).replace("twin-", ""), f"pool of one {g!r} vs plain {w!r}")
    c = c_batch([url], [{"session": "one-1", "pos": 4}, {"session": "~alone", "pos": 2},
                        {"session": "nope", "pos": 1}])
    # "~alone" is routed to the one instance (which answers it: not created).
    expect(c[0][:3] == (0, "ok", 4) and c[1][:2] == (-1, "unknown_session") and
           c[2][:2] == (-1, "unknown_session"), f"C pool of one: {c}")
    print("pool: a pool of one answers as a plain client does (Python; C routes "
          "every id, '~alone' too, to its one instance)")


def run(binary, nginx, tmp):
    daemons = [Instance(binary, tmp, f"evictd{i}") for i in range(3)]
    nginx_proc = None
    try:
        for d in daemons:
            expect(d.up(), f"{d.name} exited: {d.log()}")
        addrs = [d.addr for d in daemons]
        nginx_proc, front = start_nginx(nginx, tmp, addrs)
        urls = ["http://" + a for a in addrs]
        ids, routed = check_routing(front, addrs, urls)
        items = check_batches(urls, addrs, routed, ids)
        check_instance_down(daemons, urls, addrs, routed, items)
        check_pool_of_one(daemons[0])
    finally:
        stop_all(nginx_proc, daemons)


def main():
    return harness_main("pool", run)


if __name__ == "__main__":
    sys.exit(main())

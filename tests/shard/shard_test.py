#!/usr/bin/env python3
"""Scale-out through nginx: three evictd instances behind a real nginx that
runs deploy/nginx-shard.conf (hash on the session id, consistent).

Shows that
- every session, stepped many times through nginx, lives on exactly one
  instance, which holds every step, and nginx names that instance in
  X-Evictd-Backend on every answer;
- POST /step is refused by nginx (421) and creates nothing anywhere, while
  batches grouped per instance and sent to the instances directly work;
- restarting one instance leaves the sessions of the other two alone (their
  next steps continue from the right state, during and after the restart),
  and its own sessions are not re-routed to a neighbour while it is down
  (502); restarted with its --state-dir it has them all back, restarted
  without it they are reported lost (404) rather than silently recreated,
  because the pool runs with --no-autocreate.

Usage: shard_test.py [path/to/evictd]  (default: $EVICTD_BIN). Needs nginx.
"""
import random
import sys
import time

from support.fail import expect
from support.shard import (BUDGET, Conn, Instance, Model, harness_main,
                           start_nginx, stop_all)

SESSIONS = 50  # not a multiple of 3, and the order is shuffled per round,
              # so that no routing but by session can pass by chance
ROUNDS = 20


def step_via(conn, sid, model, n, home=None):
    """Steps session sid by n positions through conn; checks the answer."""
    positions = list(range(model.newest + 1, model.newest + 1 + n))
    status, body, backend = conn.call("POST", f"/session/{sid}/step",
                                      {"positions": positions})
    expect(status == 200, f"step {sid} {positions}: {status} {body}")
    victims = model.step(positions)
    expect(body["victims"] == victims and body["newest"] == model.newest and
           body["size"] == len(model.kept),
           f"step {sid}: got {body}, want victims {victims} newest {model.newest}")
    if home is not None:
        expect(backend == home, f"{sid}: answered by {backend}, lives on {home}")


def holders(direct, sid):
    """Which instances hold sid, asked directly; with their views."""
    found = {}
    for addr, conn in direct.items():
        status, body, _ = conn.call("GET", f"/session/{sid}")
        expect(status in (200, 404), f"GET {sid} on {addr}: {status} {body}")
        if status == 200:
            found[addr] = body
    return found


def run(binary, nginx, tmp):
    daemons = [Instance(binary, tmp, f"evictd{i}") for i in range(3)]
    nginx_proc = None
    try:
        for d in daemons:
            expect(d.up(state_dir=d.state_dir), f"{d.name} exited: {d.log()}")
        addrs = [d.addr for d in daemons]
        nginx_proc, front = start_nginx(nginx, tmp, addrs)
        proxy = Conn(front)
        direct = {a: Conn(a) for a in addrs}
        print(f"shard: nginx on {front} in front of {', '.join(addrs)}")

        # Sessions are created through nginx, which says where each lives.
        models, home = {}, {}
        for i in range(SESSIONS):
            sid = f"seq-{i:03d}"
            status, body, backend = proxy.call("PUT", f"/session/{sid}",
                                               {"budget": BUDGET})
            expect(status == 201, f"PUT {sid}: {status} {body}")
            expect(backend in addrs, f"PUT {sid}: X-Evictd-Backend {backend!r}")
            models[sid], home[sid] = Model(), backend
        rng = random.Random(6)
        order = list(models)
        for r in range(ROUNDS):
            rng.shuffle(order)
            for sid in order:
                step_via(proxy, sid, models[sid], 1 + (r % 3), home[sid])

        per_backend = {a: [s for s in models if home[s] == a] for a in addrs}
        for sid, model in models.items():
            found = holders(direct, sid)
            expect(list(found) == [home[sid]],
                   f"{sid} is held by {list(found)}, nginx sent it to {home[sid]}")
            view = found[home[sid]]
            expect(view["kept"] == model.kept and view["newest"] == model.newest,
                   f"{sid} on {home[sid]}: kept {view['kept']}, want {model.kept}")
        spread = {a: len(s) for a, s in per_backend.items()}
        print(f"shard: {SESSIONS} sessions x {ROUNDS} steps, each on exactly one "
              f"instance with every step: {spread}")
        expect(sum(1 for n in spread.values() if n) >= 2,
               f"hashing put every session on one instance: {spread}")

        # A batch through nginx is refused and reaches no instance.
        status, body, _ = proxy.call("POST", "/step", {"steps": [
            {"session": "batch-probe", "pos": 1}]})
        expect(status == 421 and body["error"]["code"] == "misdirected_request",
               f"POST /step through nginx: {status} {body}")
        expect(holders(direct, "batch-probe") == {}, "a refused batch created a session")
        # Batches grouped per instance, sent to each instance directly.
        for addr, sids in per_backend.items():
            if not sids:
                continue
            steps = []
            for sid in sids:
                m = models[sid]
                steps.append({"session": sid, "pos": m.newest + 1})
            status, body, _ = direct[addr].call("POST", "/step", {"steps": steps})
            expect(status == 200, f"batch to {addr}: {status} {body}")
            for sid, res in zip(sids, body["results"]):
                m = models[sid]
                victims = m.step([m.newest + 1])
                expect(res.get("victims") == victims and res.get("newest") == m.newest,
                       f"batch item {sid} on {addr}: {res}")
        print("shard: POST /step through nginx is 421 and creates nothing; "
              "per-instance batches work")

        # Forks through nginx: children named {parent}~{k} live on their
        # parent's instance, where the fork made them, and step on there.
        forked = 0
        for sid in sorted(models)[:10]:
            for k in range(3):
                child = f"{sid}~{k}"
                status, body, backend = proxy.call(
                    "POST", f"/session/{sid}/fork", {"into": child})
                expect(status == 201 and backend == home[sid],
                       f"fork {sid} into {child}: {status} {body} on {backend}")
                m = Model()
                m.kept, m.newest = list(models[sid].kept), models[sid].newest
                models[child], home[child] = m, home[sid]
                step_via(proxy, child, m, 1 + k, home[sid])
                expect(list(holders(direct, child)) == [home[sid]],
                       f"{child} is not on its parent's instance only")
                forked += 1
            step_via(proxy, sid, models[sid], 1, home[sid])
        print(f"shard: {forked} forks into {{parent}}~{{k}} children live and "
              "step on their parent's instance")

        # Restart the instance holding the most sessions, twice: with its
        # state directory (its sessions come back), then without one, as an
        # instance without persistence (its sessions are lost, and say so).
        victim = max(addrs, key=lambda a: len(per_backend[a]))
        d = daemons[addrs.index(victim)]
        others = [s for s in models if home[s] != victim]
        expect(others, "no sessions outside the restarted instance")
        mine = per_backend[victim]

        def restart(state_dir):
            expect(d.down() == 0, f"{victim} did not exit 0 on SIGTERM")
            # While it is down: the others go on; its own sessions get 502
            # and are not re-routed to a neighbour.
            for sid in others:
                step_via(proxy, sid, models[sid], 2, home[sid])
            status, body, _ = proxy.call("POST", f"/session/{mine[0]}/step",
                                         {"pos": models[mine[0]].newest + 1})
            expect(status == 502,
                   f"step for {mine[0]} while {victim} is down: {status} {body}")
            expect(holders({a: c for a, c in direct.items() if a != victim},
                           mine[0]) == {},
                   f"{mine[0]} was re-routed while its instance was down")
            # The same address again (the kernel may hold it briefly).
            deadline = time.monotonic() + 10
            while not d.up(victim, state_dir):
                expect(time.monotonic() < deadline, f"cannot restart on {victim}")
                time.sleep(0.2)
            for sid in others:
                step_via(proxy, sid, models[sid], 3, home[sid])
                found = holders(direct, sid)
                expect(list(found) == [home[sid]] and
                       found[home[sid]]["kept"] == models[sid].kept,
                       f"{sid} after the restart of {victim}: {found}")

        restart(d.state_dir)
        for sid in mine:
            step_via(proxy, sid, models[sid], 1, victim)
        print(f"shard: restarted {victim} with its --state-dir: its {len(mine)} "
              f"sessions and the other {len(others)} continued from the right state")
        restart(None)
        for sid in mine:
            status, body, backend = proxy.call("POST", f"/session/{sid}/step",
                                               {"pos": models[sid].newest + 1})
            expect(status == 404 and body["error"]["code"] == "unknown_session"
                   and backend == victim,
                   f"{sid} after its instance restarted: {status} {body} via {backend}")
        print(f"shard: restarted {victim} without state: its {len(mine)} sessions "
              f"are reported lost (404), the other {len(others)} continued")
    finally:
        stop_all(nginx_proc, daemons)


def main():
    return harness_main("shard", run)


if __name__ == "__main__":
    sys.exit(main())

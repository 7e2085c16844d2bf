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
import http.client
import json
import os
import random
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
TEMPLATE = os.path.join(HERE, "..", "..", "deploy", "nginx-shard.conf")
BUDGET = 8
SESSIONS = 50  # not a multiple of 3, and the order is shuffled per round,
              # so that no routing but by session can pass by chance
ROUNDS = 20


class Fail(Exception):
    pass


def expect(ok, what):
    if not ok:
        raise Fail(what)


class Conn:
    """A keep-alive JSON client for one address."""

    def __init__(self, addr):
        host, port = addr.rsplit(":", 1)
        self.addr = addr
        self.c = http.client.HTTPConnection(host, int(port), timeout=10)

    def call(self, method, path, body=None):
        data = None if body is None else json.dumps(body).encode()
        for attempt in (1, 2):
            try:
                self.c.request(method, path, body=data,
                               headers={"Content-Type": "application/json"})
                r = self.c.getresponse()
                raw = r.read()
                break
            except (ConnectionError, http.client.RemoteDisconnected):
                # The peer closed an idle keep-alive connection (e.g. an
                # instance that was restarted): reconnect once.
                self.c.close()
                if attempt == 2:
                    raise
        ctype = r.getheader("Content-Type") or ""
        payload = json.loads(raw) if raw and "json" in ctype else raw
        return r.status, payload, r.getheader("X-Evictd-Backend")


class Daemon:
    def __init__(self, binary, tmp, name):
        self.binary, self.name = binary, name
        self.log = os.path.join(tmp, name + ".log")
        self.state_dir = os.path.join(tmp, name + ".state")
        self.proc, self.addr = None, None

    def start(self, listen="127.0.0.1:0", state_dir=None):
        """Starts the daemon; True once it logs its address, False if it
        exits first (e.g. the address is still taken after a restart)."""
        offset = os.path.getsize(self.log) if os.path.exists(self.log) else 0
        args = [self.binary, "--listen", listen, "--no-autocreate",
                "--budget", str(BUDGET)]
        if state_dir:
            args += ["--state-dir", state_dir, "--fsync", "everysec"]
        with open(self.log, "a") as log:
            self.proc = subprocess.Popen(args, stdout=subprocess.DEVNULL,
                                         stderr=log)
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            with open(self.log) as f:
                f.seek(offset)
                m = re.search(r"listening on (\S+)", f.read())
            if m:
                self.addr = m.group(1)
                return True
            if self.proc.poll() is not None:
                return False
            time.sleep(0.02)
        raise Fail(f"{self.name} did not start: {open(self.log).read()}")

    def stop(self):
        if self.proc and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                return self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
                raise Fail(f"{self.name} ignored SIGTERM")
        return self.proc.returncode if self.proc else None


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def render_nginx(tmp, backends, port):
    """deploy/nginx-shard.conf with our instances and port, wrapped in a
    minimal nginx.conf whose every path is under tmp."""
    with open(TEMPLATE) as f:
        conf = f.read()
    servers = re.findall(r"^    server (\S+)(.*);\n", conf, re.M)
    expect(servers, "nginx-shard.conf: no `server` lines in the upstream")
    options = servers[0][1]  # e.g. " max_fails=0", kept for ours
    ours = "".join(f"    server {b}{options};\n" for b in backends)
    servers = re.findall(r"^    server \S+.*;\n", conf, re.M)
    conf = conf.replace("".join(servers), ours)
    expect(conf.count(ours) == 1, "nginx-shard.conf: server lines not together")
    conf, n = re.subn(r"^    listen 8090;$", f"    listen 127.0.0.1:{port};",
                      conf, flags=re.M)
    expect(n == 1, "nginx-shard.conf: no single `listen 8090;`")
    with open(os.path.join(tmp, "evictd-shard.conf"), "w") as f:
        f.write(conf)
    main = f"""
worker_processes 1;
pid {tmp}/nginx.pid;
error_log {tmp}/nginx-error.log info;
events {{ worker_connections 256; }}
http {{
    access_log off;
    client_body_temp_path {tmp}/client_body;
    proxy_temp_path {tmp}/proxy;
    fastcgi_temp_path {tmp}/fastcgi;
    uwsgi_temp_path {tmp}/uwsgi;
    scgi_temp_path {tmp}/scgi;
    include {tmp}/evictd-shard.conf;
}}
"""
    path = os.path.join(tmp, "nginx.conf")
    with open(path, "w") as f:
        f.write(main)
    return path


def start_nginx(nginx, tmp, backends):
    """Starts nginx in the foreground on a free port; retries if another
    process takes the port between our probe and nginx's bind."""
    for _ in range(5):
        port = free_port()
        conf = render_nginx(tmp, backends, port)
        args = [nginx, "-p", tmp, "-e", os.path.join(tmp, "nginx-error.log"),
                "-c", conf]
        check = subprocess.run(args + ["-t"], capture_output=True, text=True)
        expect(check.returncode == 0, f"nginx -t: {check.stderr}")
        proc = subprocess.Popen(args + ["-g", "daemon off;"],
                                stdout=subprocess.DEVNULL,
                                stderr=subprocess.DEVNULL)
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline and proc.poll() is None:
            try:
                with socket.create_connection(("127.0.0.1", port), 0.2):
                    return proc, f"127.0.0.1:{port}"
            except OSError:
                time.sleep(0.05)
        proc.kill()
        proc.wait()
    raise Fail("nginx did not start: " +
               open(os.path.join(tmp, "nginx-error.log")).read()[-2000:])


class Model:
    """The expected state of one session (sinks 0): the newest BUDGET
    positions, starting from position 0."""

    def __init__(self):
        self.kept, self.newest = [0], 0

    def step(self, positions):
        victims = []
        for p in positions:
            self.kept.append(p)
            if len(self.kept) > BUDGET:
                victims.append(self.kept.pop(0))
        self.newest = positions[-1]
        return victims


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
    daemons = [Daemon(binary, tmp, f"evictd{i}") for i in range(3)]
    nginx_proc = None
    try:
        for d in daemons:
            expect(d.start(state_dir=d.state_dir),
                   f"{d.name} exited: {open(d.log).read()}")
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
            expect(d.stop() == 0, f"{victim} did not exit 0 on SIGTERM")
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
            while not d.start(victim, state_dir):
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


def stop_all(nginx_proc, daemons):
    """Stops nginx (killed if it does not stop in 10 s) and the daemons."""
    if nginx_proc is not None:
        nginx_proc.terminate()
        try:
            nginx_proc.wait(10)
        except subprocess.TimeoutExpired:
            nginx_proc.kill()
            nginx_proc.wait()
    for d in daemons:
        try:
            d.stop()
        except Fail:
            pass


def harness_main(name, run):
    """The main() of a test behind nginx: the daemon binary (argument or
    EVICTD_BIN) and nginx checked, run(binary, nginx, tmp) in a fresh
    directory, its logs shown when it fails. Returns the exit status."""
    binary = sys.argv[1] if len(sys.argv) > 1 else os.environ.get("EVICTD_BIN")
    if not binary or not os.access(binary, os.X_OK):
        print(f"{name}_test: no evictd binary (argument or EVICTD_BIN)",
              file=sys.stderr)
        return 2
    nginx = shutil.which("nginx") or "/usr/sbin/nginx"
    if not os.access(nginx, os.X_OK):
        print(f"{name}_test: nginx is not installed", file=sys.stderr)
        return 2
    tmp = tempfile.mkdtemp(prefix=f"evictd-{name}.")
    os.chmod(tmp, 0o755)  # nginx workers drop to another user when run as root
    try:
        run(binary, nginx, tmp)
    except Fail as e:
        print(f"{name}_test: FAIL {e}", file=sys.stderr)
        for log in sorted(os.listdir(tmp)):
            if log.endswith(".log"):
                print(f"--- {log}\n" + open(os.path.join(tmp, log)).read()[-1500:],
                      file=sys.stderr)
        return 1
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    print(f"{name}: ok")
    return 0


def main():
    return harness_main("shard", run)


if __name__ == "__main__":
    sys.exit(main())

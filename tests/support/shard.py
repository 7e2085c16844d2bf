"""A pool of evictd instances behind a real nginx that runs
deploy/nginx-shard.conf, as the shard suites (tests/shard) and serve's
pool suites (tests/llamacpp/test_pool.py, test_faults.py) run it: the
instances, nginx with our upstream block, a keep-alive client that names
the instance nginx chose, the expected state of a session, and the main()
of such a test."""
import http.client
import json
import os
import re
import shutil
import socket
import subprocess
import sys
import tempfile
import time

from support import paths
from support.daemon import Daemon
from support.fail import Fail, expect

TEMPLATE = os.path.join(paths.REPO, "deploy", "nginx-shard.conf")
NGINX = shutil.which("nginx") or "/usr/sbin/nginx"
BUDGET = 8


class Instance(Daemon):
    """One instance of the pool: evictd with --no-autocreate and a budget
    of BUDGET, its log tmp/NAME.log, its state directory (when a test
    gives it one) tmp/NAME.state."""

    def __init__(self, binary, tmp, name):
        super().__init__(os.path.join(tmp, name + ".log"), binary)
        self.name = name
        self.state_dir = os.path.join(tmp, name + ".state")

    def up(self, listen="127.0.0.1:0", state_dir=None):
        """Starts the instance; True once it logs its address, False if it
        exits first (e.g. the address is still taken after a restart)."""
        args = ["--no-autocreate", "--budget", str(BUDGET)]
        if state_dir:
            args += ["--state-dir", state_dir, "--fsync", "everysec"]
        return self.start(*args, listen=listen, wait=10) is None

    def down(self):
        """SIGTERM; the exit status (Fail if it ignores SIGTERM)."""
        return self.term(10)


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


def scratch(prefix):
    """A new directory for the pool's logs, sockets and nginx's files,
    which nginx's workers can read: they drop to another user when nginx
    runs as root."""
    tmp = tempfile.mkdtemp(prefix=prefix)
    os.chmod(tmp, 0o755)
    return tmp


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
        d.stop()


def harness_main(name, run):
    """The main() of a test behind nginx: the daemon binary (argument or
    EVICTD_BIN) and nginx checked, run(binary, nginx, tmp) in a fresh
    directory, its logs shown when it fails. Returns the exit status."""
    binary = sys.argv[1] if len(sys.argv) > 1 else os.environ.get("EVICTD_BIN")
    if not binary or not os.access(binary, os.X_OK):
        print(f"{name}_test: no evictd binary (argument or EVICTD_BIN)",
              file=sys.stderr)
        return 2
    nginx = NGINX
    if not os.access(nginx, os.X_OK):
        print(f"{name}_test: nginx is not installed", file=sys.stderr)
        return 2
    tmp = scratch(f"evictd-{name}.")
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

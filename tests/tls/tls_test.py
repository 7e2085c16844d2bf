#!/usr/bin/env python3
"""HTTPS: the daemon with --tls-cert/--tls-key (libmicrohttpd's TLS over
GnuTLS), tested with a certificate made here (openssl) and real clients:
curl --cacert, `evictd --probe https://...`, and the Python clients (sync
and asyncio) with cafile. A client that does not trust the certificate,
or speaks plain HTTP to the TLS port, is refused; bad flag combinations,
unreadable or non-PEM files and a key that is not the certificate's stop
start-up with exit status 2 and a clear message.

Usage: tls_test.py [path/to/evictd]   (default $EVICTD_BIN)."""
import asyncio
import json
import os
import shutil
import subprocess
import sys
import tempfile

sys.dont_write_bytecode = True
import evictd_client as ec  # noqa: E402
from evictd_aio import AsyncEvictdClient  # noqa: E402
from support.daemon import Daemon  # noqa: E402


def fail(what):
    raise SystemExit(f"tls: FAIL: {what}")


def expect(ok, what):
    if not ok:
        fail(what)


def make_cert(d, name, cn, san):
    key, cert = os.path.join(d, name + ".key"), os.path.join(d, name + ".pem")
    subprocess.run(["openssl", "req", "-x509", "-newkey", "ec", "-pkeyopt",
                    "ec_paramgen_curve:P-256", "-nodes", "-keyout", key,
                    "-out", cert, "-days", "2", "-subj", "/CN=" + cn,
                    "-addext", "subjectAltName=" + san],
                   check=True, capture_output=True)
    return cert, key


def start(binary, log, *args, env=None):
    """The daemon with these flags (and EVICTD_* variables), which must
    say that it listens with TLS."""
    d = Daemon(log, binary)
    rc = d.start(*args, env=env, wait=10)
    if rc is not None:
        fail(f"the daemon exited {rc}: {d.log()}")
    if not d.listening.about.endswith(", TLS"):
        d.kill()
        fail("the daemon did not say it listens with TLS: " + d.log())
    return d, d.addr


def curl(*args):
    r = subprocess.run(["curl", "-sS", "-m", "5", *args], capture_output=True,
                       text=True)
    return r.returncode, r.stdout, r.stderr


def main():
    binary = sys.argv[1] if len(sys.argv) > 1 else os.environ["EVICTD_BIN"]
    d = tempfile.mkdtemp(prefix="evictd-tls-")
    procs = []
    try:
        cert, key = make_cert(d, "server", "localhost",
                              "DNS:localhost,IP:127.0.0.1")
        other, other_key = make_cert(d, "other", "other", "DNS:other")
        p, addr = start(binary, os.path.join(d, "evictd.log"),
                        "--tls-cert", cert, "--tls-key", key)
        procs.append(p)
        url = "https://" + addr
        # curl trusting the certificate: every kind of request works.
        rc, out, err = curl("--cacert", cert, url + "/healthz")
        expect(rc == 0 and json.loads(out) == {"status": "ok"},
               f"curl --cacert /healthz: {rc} {out} {err}")
        rc, out, _ = curl("--cacert", cert, "-XPOST", url + "/session/a/step",
                          "-d", '{"positions":[1,2,3]}')
        expect(rc == 0 and json.loads(out)["newest"] == 3, f"step: {out}")
        rc, out, _ = curl("--cacert", cert, "https://localhost:" +
                          addr.rsplit(":", 1)[1] + "/session/a")
        expect(rc == 0 and json.loads(out)["kept"] == [0, 1, 2, 3],
               f"GET by the name localhost: {out}")
        # Not trusted, or not TLS: refused.
        rc, _, err = curl(url + "/healthz")
        expect(rc == 60, f"curl without the CA should fail verification "
               f"(60), got {rc}: {err}")
        rc, _, err = curl("--cacert", other, url + "/healthz")
        expect(rc == 60, f"curl with another CA: {rc} {err}")
        rc, out, _ = curl("http://" + addr + "/healthz")
        expect(rc != 0 and "ok" not in out, f"plain HTTP to the TLS port "
               f"answered: {rc} {out}")
        # The probe speaks https (unverified, as Kubernetes' probes).
        r = subprocess.run([binary, "--probe", url + "/healthz"],
                           capture_output=True, text=True)
        expect(r.returncode == 0, f"--probe https: {r.returncode} {r.stderr}")
        r = subprocess.run([binary, "--probe", "http://" + addr],
                           capture_output=True, text=True)
        expect(r.returncode == 1, f"--probe http to the TLS port: "
               f"{r.returncode} {r.stderr}")
        # The Python clients, sync and asyncio.
        with ec.EvictdClient(url, cafile=cert) as c:
            expect(c.step("a", 4).newest == 4, "sync client step")
            expect(c.health() == {"status": "ok"}, "sync client health")
        try:
            with ec.EvictdClient(url) as c:  # the system's trust store
                c.health()
            fail("a client that does not trust the certificate connected")
        except ec.ConnectionFailed:
            pass

        async def aio():
            async with AsyncEvictdClient(url, cafile=cert) as c:
                results = await asyncio.gather(
                    *[c.step(f"s{i}", [1, 2]) for i in range(16)])
                expect(all(r.newest == 2 for r in results), "aio steps")
        asyncio.run(aio())
        # Start-up refusals: exit 2 with a reason.
        bad = [
            (["--tls-cert", cert], "go together"),
            (["--tls-key", key], "go together"),
            (["--tls-cert", os.path.join(d, "none.pem"), "--tls-key", key],
             "cannot read"),
            (["--tls-cert", "/etc/hostname", "--tls-key", key],
             "not a PEM file"),
            (["--tls-cert", cert, "--tls-key", other_key], "do not match"),
        ]
        for args, why in bad:
            r = subprocess.run([binary, "--listen", "127.0.0.1:0", *args],
                               capture_output=True, text=True, timeout=10)
            expect(r.returncode == 2 and why in r.stderr,
                   f"{args}: exit {r.returncode}, {r.stderr!r}")
        # The environment works as the flags do.
        env = dict(EVICTD_TLS_CERT=cert, EVICTD_TLS_KEY=key)
        p2, addr2 = start(binary, os.path.join(d, "env.log"), env=env)
        procs.append(p2)
        rc, out, _ = curl("--cacert", cert, "https://" + addr2 + "/healthz")
        expect(rc == 0 and "ok" in out, f"EVICTD_TLS_*: {rc} {out}")
        print(f"tls: ok (curl --cacert, the probe and both Python clients "
              f"over https; untrusted and plain clients refused; "
              f"{len(bad)} bad configurations refused)")
    finally:
        for p in procs:
            p.stop()
        shutil.rmtree(d, ignore_errors=True)


if __name__ == "__main__":
    main()

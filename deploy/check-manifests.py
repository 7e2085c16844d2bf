#!/usr/bin/python3
"""Checks what yamllint cannot: that deploy/kubernetes.yaml, deploy/compose.yaml,
the Dockerfile (evictd) and deploy/llama/image/Dockerfile (the engine) agree
with each other and keep their promises.

- Each image runs as a numeric non-root user, the same one (evictd's socket
  has mode 0755, and connecting needs write permission); its HEALTHCHECK
  probes the port its CMD listens on (the engine's on /health) and EXPOSE
  says that port.
- evictd listens on a Unix socket and the engine's --evictd names that
  socket; both mount one volume (an emptyDir in Kubernetes, a named volume
  in compose) on its directory, which both images create; evictd has a
  volume on its --state-dir and no TCP port.
- Every container runs as its image's user, with a read-only root, no
  capabilities, no privilege escalation and the default seccomp profile.
- Probes: evictd's readiness and liveness probe its socket, the engine's
  readiness probes /health on its port, and its liveness does not (/health
  fails while evictd restarts, which must not restart the engine); compose's
  healthcheck probes evictd's socket.
- evictd's memory request and limit cover the sessions they were sized for:
  --max-sessions x 2.2 KB (the measured cost at budget 512) + 5 MiB fits in
  the limit, and the request holds the engine's --parallel sessions.
- Other pods reach only the engine's port (Service, NetworkPolicy).
- Both files run the same images with the same arguments (compose's evictd
  without Kubernetes' --log-format json).
Run from the repository top; exits 1 naming every broken rule.
"""
import json
import os
import re
import sys

import yaml

SESSION_BYTES = 2200       # per session at budget 512 (the benchmark figure)
BASELINE = 5 * 2**20       # the idle daemon
problems = []


def check(ok, what):
    if not ok:
        problems.append(what)


def quantity(q):
    """Kubernetes/compose memory quantity to bytes."""
    m = re.fullmatch(r"(\d+)([KMG]i?|[kmg])?", str(q))
    if m is None:
        raise SystemExit(f"check-manifests: cannot read memory quantity {q!r}")
    unit = {None: 1, "K": 10**3, "M": 10**6, "G": 10**9, "k": 2**10,
            "m": 2**20, "g": 2**30, "Ki": 2**10, "Mi": 2**20, "Gi": 2**30}
    return int(m.group(1)) * unit[m.group(2)]


def flag(args, name):
    return args[args.index(name) + 1] if name in args else None


def port_of(addr):
    return int(addr.rsplit(":", 1)[1])


def dockerfile(path, want_path):
    """USER uid, CMD, the HEALTHCHECK's URL; checks their ports agree."""
    text = open(path).read().replace("\\\n", " ")
    user = re.search(r"^USER (\d+):(\d+)$", text, re.M)
    hc = re.search(r"^HEALTHCHECK .*CMD (\[.*--probe.*\])$", text, re.M)
    cmd = re.findall(r"^CMD (\[.*\])$", text, re.M)
    expose = re.search(r"^EXPOSE (\d+)$", text, re.M)
    if not (user and hc and cmd and expose):
        raise SystemExit(f"check-manifests: {path} lacks USER, HEALTHCHECK, CMD or EXPOSE")
    probe_url = json.loads(hc.group(1))[-1]
    args = json.loads(cmd[-1])
    listen = flag(args, "--listen")
    probe_port = probe_url.split("/")[2].rsplit(":", 1)[1]
    check(str(port_of(listen)) == probe_port == expose.group(1),
          f"{path}: CMD --listen {listen}, HEALTHCHECK {probe_url} and "
          f"EXPOSE {expose.group(1)} disagree on the port")
    check(probe_url.endswith(want_path),
          f"{path}: HEALTHCHECK probes {probe_url}, not {want_path}")
    check(int(user.group(1)) != 0, f"{path}: USER is root")
    return int(user.group(1)), args, text


def makes_dir(text, d):
    return re.search(r"install -d [^&\n]*" + re.escape(d) + r"\b", text) is not None


def probe_cmd(probe):
    return (probe or {}).get("exec", {}).get("command", [])


def kubernetes(uid, sock):
    docs = list(yaml.safe_load_all(open("deploy/kubernetes.yaml")))
    kinds = {d["kind"]: d for d in docs}
    pod = kinds["Deployment"]["spec"]["template"]["spec"]
    every = pod["containers"] + [c for c in pod.get("initContainers", [])
                                 if c.get("restartPolicy") == "Always"]
    named = {c["name"]: c for c in every}
    check(set(named) == {"engine", "evictd"} and len(every) == 2,
          "kubernetes: the pod does not hold one engine and one evictd container")
    e, v = named["engine"], named["evictd"]
    psc = pod.get("securityContext", {})
    for c in (e, v):
        sc = {**psc, **c.get("securityContext", {})}
        n = c["name"]
        check(sc.get("runAsNonRoot") is True, f"kubernetes: {n} lacks runAsNonRoot")
        check(sc.get("runAsUser") == uid, f"kubernetes: {n} runAsUser is not the images' {uid}")
        check(c.get("securityContext", {}).get("readOnlyRootFilesystem") is True,
              f"kubernetes: {n} root is writable")
        check(c.get("securityContext", {}).get("allowPrivilegeEscalation") is False,
              f"kubernetes: {n} may escalate privileges")
        check(c.get("securityContext", {}).get("capabilities", {}).get("drop") == ["ALL"],
              f"kubernetes: {n} keeps capabilities")
        check((sc.get("seccompProfile") or {}).get("type") == "RuntimeDefault",
              f"kubernetes: {n} has no RuntimeDefault seccomp profile")
        check("memory" in c.get("resources", {}).get("limits", {}),
              f"kubernetes: {n} has no memory limit")

    # The socket: evictd's listener, the engine's URL, one emptyDir on its
    # directory in both.
    check(flag(v["args"], "--listen") == "unix:" + sock,
          f"kubernetes: evictd does not listen on unix:{sock}")
    check(flag(e["args"], "--evictd") == "unix:" + sock,
          f"kubernetes: the engine's --evictd is not unix:{sock}")
    mounts = {c["name"]: {m["mountPath"]: m["name"] for m in c.get("volumeMounts", [])}
              for c in (e, v)}
    vols = {x["name"]: x for x in pod.get("volumes", [])}
    d = os.path.dirname(sock)
    shared = mounts["evictd"].get(d)
    check(shared is not None and mounts["engine"].get(d) == shared and
          "emptyDir" in vols.get(shared, {}),
          f"kubernetes: engine and evictd do not mount one emptyDir on {d}")
    state = flag(v["args"], "--state-dir")
    check(state is not None and state in mounts["evictd"],
          "kubernetes: evictd has no volume on its --state-dir")
    check(not v.get("ports"), "kubernetes: evictd has a TCP port")

    # Probes.
    for kind in ("readinessProbe", "livenessProbe"):
        check(probe_cmd(v.get(kind)) == ["evictd", "--probe", "unix:" + sock],
              f"kubernetes: evictd {kind} is not `evictd --probe unix:{sock}`")
    port = port_of(flag(e["args"], "--listen"))
    ready = probe_cmd(e.get("readinessProbe"))
    check(ready == ["evictd", "--probe", f"http://127.0.0.1:{port}/health"],
          f"kubernetes: engine readinessProbe is not /health on port {port}")
    live = probe_cmd(e.get("livenessProbe"))
    check(live and not any(a.endswith("/health") for a in live),
          "kubernetes: the engine's livenessProbe is missing or on /health")

    # evictd's memory.
    res = v["resources"]
    limit = quantity(res["limits"]["memory"])
    request = quantity(res["requests"]["memory"])
    sessions = int(flag(v["args"], "--max-sessions") or 1000000)
    budget = int(flag(v["args"], "--budget") or 512)
    parallel = int(flag(e["args"], "--parallel") or 8)
    check(budget == 512, "kubernetes: sizing assumes --budget 512; resize for another")
    need = sessions * SESSION_BYTES + BASELINE
    check(limit >= need, f"kubernetes: evictd memory limit {limit} B is below "
          f"--max-sessions {sessions} x {SESSION_BYTES} B + 5 MiB = {need} B")
    check(request >= parallel * SESSION_BYTES + BASELINE,
          f"kubernetes: evictd memory request {request} B is below {parallel} sessions")
    check(request <= limit, "kubernetes: evictd memory request above limit")
    threads = flag(e["args"], "--threads")
    cpu = str(e["resources"].get("requests", {}).get("cpu", "0"))
    cores = float(cpu[:-1]) / 1000 if cpu.endswith("m") else float(cpu)
    check(threads is None or cores >= int(threads),
          f"kubernetes: the engine requests {cpu} CPU for --threads {threads}")

    for p in kinds["Service"]["spec"]["ports"]:
        check(p.get("targetPort") in (port, "http"),
              "kubernetes: the Service exposes another port than the engine's")
    for rule in kinds["NetworkPolicy"]["spec"].get("ingress", []):
        opened = [p.get("port") for p in rule.get("ports", [])]
        check(opened == [port], "kubernetes: the NetworkPolicy opens more than the engine's port")
    return e, v


def compose(uid, sock, k_engine, k_evictd):
    doc = yaml.safe_load(open("deploy/compose.yaml"))
    svc = doc["services"]
    e, v = svc["engine"], svc["evictd"]
    for s, k, n in ((e, k_engine, "engine"), (v, k_evictd, "evictd")):
        check(s["image"] == k["image"], f"compose: {n} image {s['image']}, kubernetes {k['image']}")
        want = [a for a in k["args"]]
        if n == "evictd" and "--log-format" in want:
            i = want.index("--log-format")
            del want[i:i + 2]
        check(s["command"] == want, f"compose: {n} command differs from kubernetes' args")
        check(s.get("read_only") is True, f"compose: {n} root is writable")
        check(s.get("cap_drop") == ["ALL"], f"compose: {n} keeps capabilities")
        check("no-new-privileges:true" in s.get("security_opt", []),
              f"compose: {n} may gain privileges")
        check(s.get("user") == f"{uid}:{uid}", f"compose: {n} user is not the images'")
        check("mem_limit" in s, f"compose: {n} has no mem_limit")
    d = os.path.dirname(sock)
    vol = [m.split(":")[0] for m in v.get("volumes", []) if m.split(":")[1] == d]
    check(vol and any(m.split(":")[:2] == [vol[0], d] for m in e.get("volumes", [])) and
          vol[0] in (doc.get("volumes") or {}),
          f"compose: engine and evictd do not mount one named volume on {d}")
    state = flag(v["command"], "--state-dir")
    check(any(m.split(":")[1] == state for m in v.get("volumes", [])),
          "compose: evictd has no volume on its --state-dir")
    check(v.get("healthcheck", {}).get("test") == ["CMD", "evictd", "--probe", "unix:" + sock],
          f"compose: evictd's healthcheck does not probe unix:{sock}")
    check(not v.get("ports"), "compose: evictd publishes a port")
    port = port_of(flag(e["command"], "--listen"))
    check(any(str(p).endswith(f":{port}") for p in e.get("ports", [])),
          f"compose: the engine's port {port} is not published")
    sessions = int(flag(v["command"], "--max-sessions") or 1000000)
    check(quantity(v["mem_limit"]) >= sessions * SESSION_BYTES + BASELINE,
          "compose: evictd mem_limit below --max-sessions x 2.2 KB + 5 MiB")


def main():
    uid, _, evictd_text = dockerfile("Dockerfile", "/healthz")
    engine_uid, cmd, engine_text = dockerfile("deploy/llama/image/Dockerfile", "/health")
    check(engine_uid == uid, f"deploy/llama/image/Dockerfile: USER {engine_uid}, evictd's is {uid}")
    url = flag(cmd, "--evictd") or ""
    check(url.startswith("unix:"), "deploy/llama/image/Dockerfile: CMD --evictd is not a unix: URL")
    sock = url[5:]
    for path, text in (("Dockerfile", evictd_text), ("deploy/llama/image/Dockerfile", engine_text)):
        check(makes_dir(text, os.path.dirname(sock)),
              f"{path}: does not create {os.path.dirname(sock)} (a fresh volume takes its owner)")
    k_engine, k_evictd = kubernetes(uid, sock)
    check(k_engine["args"][:1] == ["serve"] and
          flag(k_engine["args"], "-m") == flag(cmd, "-m"),
          "kubernetes: the engine does not serve the image's model path")
    compose(uid, sock, k_engine, k_evictd)
    for p in problems:
        print(f"check-manifests: {p}", file=sys.stderr)
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())

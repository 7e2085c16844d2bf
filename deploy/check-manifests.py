#!/usr/bin/python3
"""Checks what yamllint cannot: that deploy/kubernetes.yaml, deploy/compose.yaml
and the Dockerfile agree with each other and keep their promises.

- The evictd container runs as the image's non-root user, with a read-only
  root, no capabilities, no privilege escalation and the default seccomp
  profile; its probes are httpGet /healthz on the port it listens on.
- Its memory request and limit cover the sessions they were sized for:
  --max-sessions x 2.2 KB (the measured cost at budget 512) + 5 MiB fits in
  the limit, and the request is at least the assumed 20,000 sessions.
- Other pods cannot reach evictd: neither the Service nor the NetworkPolicy
  opens its port.
- In compose, evictd holds the shared network namespace and listens where
  the image's HEALTHCHECK looks.
Run from the repository top; exits 1 naming every broken rule.
"""
import json
import re
import sys

import yaml

SESSION_BYTES = 2200       # per session at budget 512 (the benchmark figure)
BASELINE = 5 * 2**20       # the idle daemon
ASSUMED_SESSIONS = 20000   # what the request is sized for (kubernetes.yaml)
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


def dockerfile():
    text = open("Dockerfile").read()
    user = re.search(r"^USER (\d+):(\d+)$", text, re.M)
    hc = re.search(r"^\s*CMD (\[.*--probe.*\])$", text, re.M)
    cmd = re.findall(r"^CMD (\[.*\])$", text, re.M)
    expose = re.search(r"^EXPOSE (\d+)$", text, re.M)
    if not (user and hc and cmd and expose):
        raise SystemExit("check-manifests: Dockerfile lacks USER, HEALTHCHECK, CMD or EXPOSE")
    probe_url = json.loads(hc.group(1))[-1]
    listen = flag(json.loads(cmd[-1]), "--listen")
    probe_port = probe_url.split("/")[2].rsplit(":", 1)[1]
    check(listen.rsplit(":", 1)[1] == probe_port == expose.group(1),
          f"Dockerfile: CMD --listen {listen}, HEALTHCHECK {probe_url} and "
          f"EXPOSE {expose.group(1)} disagree on the port")
    return int(user.group(1)), probe_url


def kubernetes(uid):
    docs = list(yaml.safe_load_all(open("deploy/kubernetes.yaml")))
    kinds = {d["kind"]: d for d in docs}
    pod = kinds["Deployment"]["spec"]["template"]["spec"]
    every = pod.get("initContainers", []) + pod["containers"]
    evictd = [c for c in every if c["name"] == "evictd"]
    check(len(evictd) == 1, "kubernetes: no single evictd container")
    c = evictd[0]
    check(any(x["image"].startswith("vllm/vllm-openai") for x in pod["containers"]),
          "kubernetes: no vllm/vllm-openai model server container")
    sc = c.get("securityContext", {})
    check(sc.get("runAsNonRoot") is True, "kubernetes: evictd lacks runAsNonRoot")
    check(sc.get("runAsUser") == uid, f"kubernetes: evictd runAsUser is not the image's {uid}")
    check(sc.get("readOnlyRootFilesystem") is True, "kubernetes: evictd root is writable")
    check(sc.get("allowPrivilegeEscalation") is False,
          "kubernetes: evictd may escalate privileges")
    check(sc.get("capabilities", {}).get("drop") == ["ALL"],
          "kubernetes: evictd keeps capabilities")
    seccomp = sc.get("seccompProfile") or pod.get("securityContext", {}).get("seccompProfile")
    check((seccomp or {}).get("type") == "RuntimeDefault",
          "kubernetes: evictd has no RuntimeDefault seccomp profile")

    args = c["args"]
    port = int(flag(args, "--listen").rsplit(":", 1)[1])
    names = {p.get("name"): p["containerPort"] for p in c["ports"]}
    for kind in ("readinessProbe", "livenessProbe"):
        get = c.get(kind, {}).get("httpGet", {})
        p = names.get(get.get("port"), get.get("port"))
        check(get.get("path") == "/healthz" and p == port,
              f"kubernetes: evictd {kind} is not httpGet /healthz on port {port}")

    res = c["resources"]
    limit = quantity(res["limits"]["memory"])
    request = quantity(res["requests"]["memory"])
    sessions = int(flag(args, "--max-sessions") or 1000000)
    budget = int(flag(args, "--budget") or 512)
    check(budget == 512, "kubernetes: sizing assumes --budget 512; resize for another")
    need = sessions * SESSION_BYTES + BASELINE
    check(limit >= need, f"kubernetes: memory limit {limit} B is below "
          f"--max-sessions {sessions} x {SESSION_BYTES} B + 5 MiB = {need} B")
    check(request >= ASSUMED_SESSIONS * SESSION_BYTES + BASELINE,
          f"kubernetes: memory request {request} B is below {ASSUMED_SESSIONS} sessions")
    check(request <= limit, "kubernetes: memory request above limit")

    for p in kinds["Service"]["spec"]["ports"]:
        check(p["port"] != port and p.get("targetPort") not in (port, "evictd"),
              "kubernetes: the Service exposes evictd's port")
    for rule in kinds["NetworkPolicy"]["spec"].get("ingress", []):
        opened = [p.get("port") for p in rule.get("ports", [])]
        check(opened and port not in opened and "evictd" not in opened,
              "kubernetes: the NetworkPolicy lets other pods reach evictd")


def compose(uid, probe_url):
    doc = yaml.safe_load(open("deploy/compose.yaml"))
    svc = doc["services"]
    e, v = svc["evictd"], svc["vllm"]
    check(v.get("network_mode") == "service:evictd",
          "compose: vllm does not share evictd's network namespace")
    check(v["image"].startswith("vllm/vllm-openai"), "compose: no vLLM model server")
    listen = flag(e["command"], "--listen")
    check(probe_url.startswith(f"http://{listen}/"),
          f"compose: evictd listens on {listen}, the image's HEALTHCHECK probes {probe_url}")
    check(e.get("read_only") is True, "compose: evictd root is writable")
    check(e.get("cap_drop") == ["ALL"], "compose: evictd keeps capabilities")
    check("no-new-privileges:true" in e.get("security_opt", []),
          "compose: evictd may gain privileges")
    check(e.get("user") == f"{uid}:{uid}", "compose: evictd user is not the image's")
    sessions = int(flag(e["command"], "--max-sessions") or 1000000)
    check(quantity(e["mem_limit"]) >= sessions * SESSION_BYTES + BASELINE,
          "compose: mem_limit below --max-sessions x 2.2 KB + 5 MiB")


def main():
    uid, probe_url = dockerfile()
    check(uid != 0, "Dockerfile: USER is root")
    kubernetes(uid)
    compose(uid, probe_url)
    for p in problems:
        print(f"check-manifests: {p}", file=sys.stderr)
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())

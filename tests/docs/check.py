#!/usr/bin/env python3
"""Checks that the documents say what the code does: the OpenAPI file's error
codes are exactly the daemon's (server/apierr.c), and the Python client has
an error class for each; the OpenAPI paths are the routes; and every flag of
`evictd --help` is in README.md and in evictd(8).
Usage: check.py path/to/evictd"""
import re
import subprocess
import sys

import yaml

ROOT = __file__.rsplit("/tests/", 1)[0]


def main():
    binary = sys.argv[1]
    bad = []
    api = yaml.safe_load(open(f"{ROOT}/proto/openapi.yaml"))
    src = open(f"{ROOT}/server/apierr.c").read()
    codes = set(re.findall(r'\{\d{3}, "([a-z_]+)"', src))
    enum = set(api["components"]["schemas"]["ErrorCode"]["enum"])
    if codes != enum:
        bad.append(f"openapi ErrorCode enum differs from server/apierr.c: "
                   f"only in code {sorted(codes - enum)}, "
                   f"only in openapi {sorted(enum - codes)}")
    client = open(f"{ROOT}/deploy/clients/python/evictd_client.py").read()
    classes = set(re.findall(r'^    code = "([a-z_]+)"', client, re.M))
    if codes - classes:  # (the client adds its own: timeouts and the like)
        bad.append(f"the Python client has no error class for "
                   f"{sorted(codes - classes)}")
    # The routes as server/api.c matches them: whole paths, and the
    # suffixes after /session/{id}.
    api_c = open(f"{ROOT}/server/api.c").read()
    routes = {"/session/{id}"}
    routes |= set(re.findall(r'path_is\(p, n, "(/[a-z]+)"\)', api_c))
    routes |= {"/session/{id}" + x for x in
               re.findall(r'path_is\(slash, [^"]*"(/[a-z]+)"\)', api_c)}
    if set(api["paths"]) != routes:
        bad.append(f"openapi paths {sorted(api['paths'])} are not the routes "
                   f"{sorted(routes)}")
    helptext = subprocess.run([binary, "--help"], capture_output=True,
                              text=True, check=True).stdout
    flags = set(re.findall(r"^\s+(--[a-z-]+)", helptext, re.M))
    readme = open(f"{ROOT}/README.md").read()
    man = open(f"{ROOT}/deploy/evictd.8").read().replace("\\-", "-")
    for flag in sorted(flags):
        if flag not in readme and flag not in ("--help", "--version"):
            bad.append(f"{flag} is not in README.md")
        if flag not in man:
            bad.append(f"{flag} is not in deploy/evictd.8")
    for b in bad:
        print("docs:", b)
    if bad:
        sys.exit(1)
    print(f"docs: {len(codes)} error codes, {len(routes)} routes and "
          f"{len(flags)} flags documented")


if __name__ == "__main__":
    main()

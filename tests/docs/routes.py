#!/usr/bin/env python3
"""Checks that the docs that point into the code point where the code is:
the daemon's route table in README.md ("### Routes: which file answers",
under "## Layout") against server/api.c's
routes and handlers; serve's route table in deploy/llama/README.md
("### Routes: which file answers") against the tables its API files
register (and serve.c registers every one of them); and deploy/llama's
layout ("## The source") against its files: every source file is in it,
and every file in it exists.
Usage: routes.py (from anywhere; no binary needed)"""
import os
import re
import sys

ROOT = os.path.normpath(os.path.join(os.path.dirname(__file__), "..", ".."))
LLAMA = os.path.join(ROOT, "deploy", "llama")


def read(*parts):
    with open(os.path.join(ROOT, *parts), encoding="utf-8") as f:
        return f.read()


def section(text, heading):
    """The lines under a heading, up to the next heading of its level or
    above."""
    level = len(heading) - len(heading.lstrip("#"))
    lines = text.split("\n")
    try:
        start = lines.index(heading) + 1
    except ValueError:
        raise SystemExit("docs: no heading %r" % heading)
    out = []
    for line in lines[start:]:
        m = re.match(r"^(#+) ", line)
        if m and len(m.group(1)) <= level:
            break
        out.append(line)
    return out


def table_rows(lines):
    """The cells of a markdown table's body rows (the first table)."""
    rows = []
    for line in lines:
        if not line.startswith("|"):
            if rows:
                break
            continue
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if set("".join(cells)) <= set("-: "):
            continue
        rows.append(cells)
    return rows[1:]  # the header


def ticks(cell):
    return re.findall(r"`([^`]+)`", cell)


def defined_in(folder, name):
    """The files under folder (relative to ROOT) that define function
    name."""
    pat = re.compile(r"^(?:static )?(?:enum MHD_Result|int|void) \*?%s\("
                     % re.escape(name), re.M)
    found = []
    for base, _, files in os.walk(os.path.join(ROOT, folder)):
        for f in files:
            if f.endswith(".c") and pat.search(read(base, f)):
                found.append(os.path.relpath(os.path.join(base, f), ROOT))
    return found


def daemon_routes():
    """{(METHOD, path): handler} as server/api.c routes them."""
    src = read("server", "api.c")
    paths = {}
    for lit, route in re.findall(
            r'path_is\(p, n, "(/[a-z]+)"\)\)\s*return (EVD_R_[A-Z]+);', src):
        paths[route] = lit
    paths[re.search(r"return (EVD_R_[A-Z]+);\n  if \(path_is\(slash",
                    src).group(1)] = "/session/{id}"
    for lit, route in re.findall(
            r'path_is\(slash, [^"]*"(/[a-z]+)"\)\)\s*return (EVD_R_[A-Z]+);',
            src):
        paths[route] = "/session/{id}" + lit
    routes = {}
    for route, allow, get, put, post, dele in re.findall(
            r'^\s+\[(EVD_R_[A-Z]+)\] = \{[^,]+,\s*"([A-Z, ]+)",\s*(\w+),'
            r'\s*(\w+),\s*(\w+),\s*(\w+)\}', src, re.M):
        by = {"GET": get, "HEAD": get, "PUT": put, "POST": post,
              "DELETE": dele}
        for method in allow.split(", "):
            routes[(method, paths[route])] = by[method]
    return routes


def serve_routes():
    """{(METHOD, path): (file, function)} as serve's API files register
    them (the file relative to deploy/llama), and the tables' names."""
    routes, tables = {}, []
    api = os.path.join(LLAMA, "serve", "api")
    for f in sorted(os.listdir(api)):
        if not f.endswith(".c"):
            continue
        src = read("deploy", "llama", "serve", "api", f)
        for name, body in re.findall(
                r"const http_route_t (\w+)\[\] = \{(.*?)\}\};", src, re.S):
            tables.append(name)
            for path, method, fn in re.findall(
                    r'\{"([^"]+)", "([A-Z]+)", (\w+),', body):
                routes[(method, path)] = ("serve/api/" + f, fn)
    return routes, tables


def route_keys(cell):
    """`POST /a`, `POST /b` -> [("POST", "/a"), ("POST", "/b")]."""
    return [tuple(t.split(" ", 1)) for t in ticks(cell) if " " in t]


def check_daemon(bad):
    code = daemon_routes()
    rows = table_rows(section(read("README.md"),
                              "### Routes: which file answers"))
    doc = {}
    for cells in rows:
        if len(cells) != 3 or not route_keys(cells[0]):
            continue
        file, fn = ticks(cells[1])[0], ticks(cells[2])[0]
        for key in route_keys(cells[0]):
            doc[key] = (file, fn)
    for key in sorted(set(code) | set(doc)):
        if key not in doc:
            bad.append("README.md's route table lacks %s %s" % key)
        elif key not in code:
            bad.append("README.md's route table has %s %s, which the "
                       "daemon does not route" % key)
        elif doc[key][1] != code[key]:
            bad.append("%s %s is %s's, not %s" % (key + (code[key],
                                                        doc[key][1])))
        elif doc[key][0] not in defined_in("server", code[key]):
            bad.append("%s is not defined in %s" % (code[key], doc[key][0]))
    return len(code)


def check_serve(bad):
    code, tables = serve_routes()
    serve_c = read("deploy", "llama", "serve", "serve.c")
    for t in tables:
        if not re.search(r"\b%s\b" % t, serve_c):
            bad.append("serve.c does not register %s" % t)
    text = read("deploy", "llama", "README.md")
    rows = table_rows(section(text, "### Routes: which file answers"))
    doc = {}
    for cells in rows:
        file, fn = ticks(cells[1])[0], ticks(cells[2])[0]
        if ticks(cells[0]) and ticks(cells[0])[0] == "OPTIONS":
            if "deploy/llama/" + file not in defined_in(
                    "deploy/llama/serve/http", fn):
                bad.append("%s is not defined in %s" % (fn, file))
            continue
        for key in route_keys(cells[0]):
            doc[key] = (file, fn)
    for key in sorted(set(code) | set(doc)):
        if key not in doc:
            bad.append("deploy/llama/README.md's route table lacks %s %s"
                       % key)
        elif key not in code:
            bad.append("deploy/llama/README.md's route table has %s %s, "
                       "which no API file registers" % key)
        elif doc[key] != code[key]:
            bad.append("%s %s is %s in %s, not %s in %s" % (
                key + (code[key][1], code[key][0], doc[key][1],
                       doc[key][0])))
    return len(code)


def check_layout(bad):
    rows = table_rows(section(read("deploy", "llama", "README.md"),
                              "## The source"))
    doc = set()
    for cells in rows:
        folder = ""
        for t in ticks(cells[0]):
            if "/" in t or folder == "":
                folder = os.path.dirname(t)
                doc.add(t)
            else:
                doc.add(os.path.join(folder, t))
    tree = set()
    for base, _, files in os.walk(LLAMA):
        for f in files:
            if re.search(r"\.(c|h|cpp|hpp)$", f):
                tree.add(os.path.relpath(os.path.join(base, f), LLAMA))
    for f in sorted(tree - doc):
        bad.append("deploy/llama/README.md's layout lacks %s" % f)
    for f in sorted(doc - tree):
        bad.append("deploy/llama/README.md's layout names %s, which is "
                   "not there" % f)
    return len(tree)


def main():
    bad = []
    n_daemon = check_daemon(bad)
    n_serve = check_serve(bad)
    n_files = check_layout(bad)
    for b in bad:
        print("docs:", b)
    if bad:
        sys.exit(1)
    print("docs: the daemon's %d routes and serve's %d, each with its file "
          "and function, and deploy/llama's %d source files, as the code has "
          "them" % (n_daemon, n_serve, n_files))


if __name__ == "__main__":
    main()

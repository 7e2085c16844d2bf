"""evictd-llama serve's contract, deploy/llama/openapi.yaml, as the serve
suites check every answer against it: a validator of the subset of JSON
Schema (OpenAPI 3.0's dialect) that the document uses, where a keyword it
does not know fails the test rather than passing unchecked; the check of
one exchange (contract), and a request checked so (call)."""

import json
import os
import re
from typing import Any, Dict, List, Optional

import yaml

from support import paths
from support.http import connect

DOC_PATH = os.path.join(paths.REPO, "deploy", "llama", "openapi.yaml")

with open(DOC_PATH, encoding="utf-8") as f:
    DOC = yaml.safe_load(f)

IGNORED = {"description", "default", "title", "example", "format"}
KNOWN = IGNORED | {"type", "nullable", "enum", "properties", "required",
                   "additionalProperties", "items", "minItems", "maxItems",
                   "minimum", "maximum", "minLength", "maxLength", "pattern",
                   "oneOf", "anyOf", "allOf", "$ref", "minProperties",
                   "maxProperties", "exclusiveMinimum", "exclusiveMaximum"}


def resolve(ref: str) -> Any:
    assert ref.startswith("#/"), ref
    node: Any = DOC
    for part in ref[2:].split("/"):
        node = node[part.replace("~1", "/").replace("~0", "~")]
    return node


def follow(node: Any) -> Any:
    while isinstance(node, dict) and "$ref" in node:
        node = resolve(node["$ref"])
    return node


def type_ok(t: str, v: Any) -> bool:
    if t == "object":
        return isinstance(v, dict)
    if t == "array":
        return isinstance(v, list)
    if t == "string":
        return isinstance(v, str)
    if t == "boolean":
        return isinstance(v, bool)
    if t == "integer":
        return isinstance(v, int) and not isinstance(v, bool)
    if t == "number":
        return isinstance(v, (int, float)) and not isinstance(v, bool)
    raise AssertionError("type %r" % t)


def problems(schema: Any, v: Any, at: str = "$") -> List[str]:
    """What is wrong with v against schema ([] when it validates)."""
    schema = follow(schema)
    unknown = set(k for k in schema if not k.startswith("x-")) - KNOWN
    if unknown:
        raise AssertionError("the validator does not know %s (at %s)"
                             % (unknown, at))
    if v is None and schema.get("nullable"):
        return []
    out: List[str] = []
    if "type" in schema and not type_ok(schema["type"], v):
        return ["%s: %r is not %s" % (at, v, schema["type"])]
    if "enum" in schema and v not in schema["enum"]:
        out.append("%s: %r not in %r" % (at, v, schema["enum"]))
    for sub in schema.get("allOf", []):
        out += problems(sub, v, at)
    if "oneOf" in schema:
        n = sum(not problems(sub, v, at) for sub in schema["oneOf"])
        if n != 1:
            out.append("%s: %d of oneOf match %r" % (at, n, v))
    if "anyOf" in schema and all(problems(sub, v, at)
                                 for sub in schema["anyOf"]):
        out.append("%s: no anyOf matches" % at)
    if isinstance(v, dict):
        props = schema.get("properties", {})
        for k in schema.get("required", []):
            if k not in v:
                out.append("%s: no %s" % (at, k))
        extra = schema.get("additionalProperties", True)
        for k, x in v.items():
            if k in props:
                out += problems(props[k], x, "%s.%s" % (at, k))
            elif extra is False:
                out.append("%s: %s is not allowed" % (at, k))
            elif isinstance(extra, dict):
                out += problems(extra, x, "%s.%s" % (at, k))
        if len(v) < schema.get("minProperties", 0) or \
                len(v) > schema.get("maxProperties", len(v)):
            out.append("%s: %d properties" % (at, len(v)))
    if isinstance(v, list):
        if len(v) < schema.get("minItems", 0) or \
                len(v) > schema.get("maxItems", len(v)):
            out.append("%s: %d items" % (at, len(v)))
        if "items" in schema:
            for i, x in enumerate(v):
                out += problems(schema["items"], x, "%s[%d]" % (at, i))
    if isinstance(v, str):
        if len(v) < schema.get("minLength", 0) or \
                len(v) > schema.get("maxLength", len(v)):
            out.append("%s: length %d" % (at, len(v)))
        if "pattern" in schema and not re.search(schema["pattern"], v):
            out.append("%s: %r does not match %s" % (at, v,
                                                     schema["pattern"]))
    if type_ok("number", v) if v is not None else False:
        # OpenAPI 3.0's exclusiveMinimum/Maximum: booleans that make
        # minimum and maximum strict.
        if "minimum" in schema and (
                v <= schema["minimum"] if schema.get("exclusiveMinimum")
                else v < schema["minimum"]):
            out.append("%s: %r below %r" % (at, v, schema["minimum"]))
        if "maximum" in schema and (
                v >= schema["maximum"] if schema.get("exclusiveMaximum")
                else v > schema["maximum"]):
            out.append("%s: %r above %r" % (at, v, schema["maximum"]))
    return out


METHODS = ["get", "put", "post", "delete", "options", "head", "patch"]
# Declared headers an answer may leave out: the origin, when the request's
# does not qualify.
OPTIONAL_HEADERS = {"access-control-allow-origin"}


class Answer:
    def __init__(self, status: int, headers: Dict[str, str],
                 body: bytes) -> None:
        self.status, self.body = status, body
        self.headers = {k.lower(): v for k, v in headers.items()}

    def json(self) -> Any:
        return json.loads(self.body)

    def header(self, name: str) -> Optional[str]:
        return self.headers.get(name.lower())


def contract(method: str, path: str, body: Any, a: Answer) -> None:
    """Raises AssertionError when the answer is not one the document
    gives for the request (its status listed, declared headers there and
    valid, Content-Type one of its media types, the body valid; a 2xx's
    request valid against the operation's requestBody)."""
    where = "%s %s -> %d" % (method, path, a.status)
    item = follow(DOC["paths"].get(path.split("?")[0]))
    op = None
    if method == "OPTIONS":
        resp = DOC["components"]["responses"]["Preflight"]
    elif item is None:
        resp = DOC["components"]["responses"]["NotFound"]
    elif method.lower() not in item:
        resp = DOC["components"]["responses"]["MethodNotAllowed"]
        takes = sorted(m.upper() for m in item if m in METHODS)
        allow = sorted((a.header("Allow") or "").split(", "))
        assert allow == takes, "%s: Allow %s, the path takes %s" % (
            where, allow, takes)
    else:
        op = item[method.lower()]
        resp = op["responses"].get(str(a.status))
        assert resp is not None, "%s: status not listed (%s)" % (
            where, list(op["responses"]))
    resp = follow(resp)
    for name, h in resp.get("headers", {}).items():
        h = follow(h)
        v = a.header(name)
        if v is None:
            assert name.lower() in OPTIONAL_HEADERS and \
                not h.get("required"), "%s: no %s" % (where, name)
            continue
        p = problems(h["schema"], v)
        assert not p, "%s: header %s: %s" % (where, name, p)
    ctype = a.header("Content-Type")
    media = resp.get("content", {}).get(ctype)
    assert media is not None, "%s: Content-Type %s, not one of %s" % (
        where, ctype, list(resp.get("content", {})))
    if ctype == "application/json":
        p = problems(media["schema"], a.json())
        assert not p, "%s: %s\n%s" % (where, p, a.body[:1500])
    elif ctype == "text/event-stream":
        schema, end = media["x-event-schema"], media.get("x-stream-end")
        for block in a.body.decode().split("\n\n"):
            if not block.strip():
                continue
            assert block.startswith("data: "), block
            if block[6:] == end:
                break
            e = json.loads(block[6:])
            p = problems(DOC["components"]["schemas"]["Error"] if "error" in e
                         else schema, e)
            assert not p, "%s: event %s: %s" % (where, block[:300], p)
    else:
        p = problems(media["schema"], a.body.decode())
        assert not p, "%s: %s" % (where, p)
    if op is not None and a.status < 300 and body is not None and \
            "requestBody" in op:
        p = problems(op["requestBody"]["content"]["application/json"]
                     ["schema"], body)
        assert not p, "%s: serve took a request the document refuses: " \
            "%s" % (where, p)


def call(addr: str, method: str, path: str, body: Any = None,
         headers: Optional[Dict[str, str]] = None,
         raw: Optional[bytes] = None, check: bool = True) -> Answer:
    """One exchange, checked against the contract (unless check is
    false: a body that is not JSON, say)."""
    c = connect(addr)
    data = raw if raw is not None else (
        None if body is None else json.dumps(body).encode())
    c.request(method, path, body=data, headers=headers or {})
    r = c.getresponse()
    a = Answer(r.status, dict(r.getheaders()), r.read())
    c.close()
    if check:
        contract(method, path, body, a)
    return a

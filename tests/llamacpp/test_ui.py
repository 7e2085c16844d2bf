"""llama.cpp's web UI as serve serves it (issue 42): the page and its
assets built into the binary, with llama-server's headers (gzip or 415,
the page's ETag and 304, COEP/COOP, hashed assets cached for good), no API
key asked for them, --no-ui, --path DIR with --api-prefix, --ui-config in
/props; then the page itself in Debian's chromium (browser/ui.test.mjs,
npm's pinned playwright-core, run by node's test runner): a conversation
several times the model's training context, a reload, a generation
stopped from the page, the API key splash. The real daemon and real
servers on stories260K, on ephemeral loopback ports; the screenshots go
to $UI_SHOTS (default build/ui-shots)."""

import gzip
import json
import os
import re
import subprocess
import tempfile
import unittest
from typing import Dict, Optional

from support import paths
from support.daemon import Daemon, Scratch
from support.openapi import Answer, call
from support.serve import Serve, stop_cleanly

HERE = os.path.dirname(os.path.abspath(__file__))
BROWSER = os.path.join(HERE, "browser")
STORIES = paths.stories_gguf()
KEY = "sk-ui-test-key"
# A turn's answer at most MAX_TOKENS long: less than the (256 - 4) / 2
# positions a new turn may go back (browser/ui.test.mjs says why).
MAX_TOKENS = 120
GZIP = {"Accept-Encoding": "gzip, deflate"}

SERVERS: Dict[str, Serve] = {}
EVD: Optional[Daemon] = None
TMP: Optional[Scratch] = None
SITE: Optional[str] = None   # --path's folder


def setUpModule() -> None:
    global EVD, TMP, SITE
    paths.require(paths.evictd_llama(), STORIES)
    TMP = Scratch("evictd-ui-")
    EVD = TMP.daemon
    SITE = tempfile.mkdtemp(prefix="site-", dir=TMP.name)
    os.makedirs(os.path.join(SITE, "docs"))
    for name, text in [("index.html", "<p>our own page</p>"),
                       ("app.js", "console.log('ours');"),
                       ("docs/index.html", "<p>the docs</p>")]:
        with open(os.path.join(SITE, name), "w") as f:
            f.write(text)
    window = ["--budget", "256", "--sinks", "4"]
    flags = {
        # the conversation the page holds
        "serve": window + ["--ui-config",
                           json.dumps({"max_tokens": MAX_TOKENS})],
        # answers that run on until the page stops them
        "long": ["--budget", "64", "--sinks", "4", "--ui-config",
                 json.dumps({"max_tokens": 20000,
                             "custom": json.dumps({"ignore_eos": True})})],
        "keyed": window + ["--api-key", KEY, "--ui-config",
                           json.dumps({"max_tokens": MAX_TOKENS})],
        "none": window + ["--no-ui"],
        "site": window + ["--path", SITE, "--api-prefix", "/llm"],
    }
    try:
        for name, args in flags.items():
            SERVERS[name] = Serve(TMP.name, EVD.url, *args, model=STORIES)
    except BaseException:
        tearDownModule()
        raise


def tearDownModule() -> None:
    try:
        stop_cleanly(SERVERS.values())
    finally:
        if TMP is not None:
            TMP.close()


def get(name: str, path: str, headers: Optional[Dict[str, str]] = None,
        check: bool = False) -> Answer:
    return call(SERVERS[name].addr, "GET", path, headers=headers,
                check=check)


def page_assets(html: str):
    """The hashed assets the page names (SvelteKit's _app/immutable)."""
    return sorted(set(re.findall(r'(_app/immutable/[^"\'\s]+)', html)))


class Static(unittest.TestCase):
    """The bundle's files and their headers, as llama-server sends them."""

    def page(self, name: str = "serve") -> Answer:
        a = get(name, "/", GZIP)
        self.assertEqual(a.status, 200, a.body[:200])
        return a

    def test_page(self) -> None:
        a = self.page()
        self.assertEqual(a.header("Content-Encoding"), "gzip")
        self.assertTrue(a.header("Content-Type").startswith("text/html"))
        self.assertEqual(a.header("Cache-Control"), "no-cache")
        self.assertEqual(a.header("Cross-Origin-Embedder-Policy"),
                         "require-corp")
        self.assertEqual(a.header("Cross-Origin-Opener-Policy"),
                         "same-origin")
        html = gzip.decompress(a.body).decode()
        self.assertIn("<html", html)
        self.assertTrue(page_assets(html), html[:400])
        # /index.html is the same page
        b = get("serve", "/index.html", GZIP)
        self.assertEqual((b.status, b.body), (200, a.body))

    def test_etag_and_304(self) -> None:
        a = self.page()
        etag = a.header("ETag")
        self.assertRegex(etag, r'^"[^"]+"$')
        for inm in (etag, "W/" + etag):
            b = get("serve", "/", dict(GZIP, **{"If-None-Match": inm}))
            self.assertEqual(b.status, 304, inm)
            self.assertEqual(b.body, b"")
            self.assertEqual(b.header("ETag"), etag)
        c = get("serve", "/", dict(GZIP, **{"If-None-Match": '"other"'}))
        self.assertEqual((c.status, c.body), (200, a.body))

    def test_no_gzip_is_415(self) -> None:
        for headers in ({}, {"Accept-Encoding": "identity"},
                        {"Accept-Encoding": "br, deflate"}):
            a = get("serve", "/", headers)
            self.assertEqual(a.status, 415, headers)
            self.assertIn(b"gzip", a.body)

    def test_hashed_assets_cached_for_good(self) -> None:
        html = gzip.decompress(self.page().body).decode()
        for name in page_assets(html):
            a = get("serve", "/" + name, GZIP)
            self.assertEqual(a.status, 200, name)
            self.assertEqual(a.header("Cache-Control"),
                             "public, max-age=31536000, immutable")
            self.assertIsNone(a.header("Cross-Origin-Embedder-Policy"))
            want = "application/javascript" if name.endswith(".js") else \
                "text/css" if name.endswith(".css") else None
            if want:
                self.assertEqual(a.header("Content-Type"), want, name)
            self.assertGreater(len(gzip.decompress(a.body)), 0)
        # a name the bundle lacks: the API's 404
        a = get("serve", "/_app/immutable/nothing.js", GZIP)
        self.assertEqual(a.status, 404)
        self.assertEqual(a.json()["error"]["type"], "not_found_error")

    def test_key_guards_the_api_not_the_page(self) -> None:
        # llama.cpp's test_security: the page and its assets without the
        # key, the API not.
        a = self.page("keyed")
        html = gzip.decompress(a.body).decode()
        for name in page_assets(html)[:5]:
            self.assertEqual(get("keyed", "/" + name, GZIP).status, 200)
        self.assertEqual(get("keyed", "/props").status, 401)
        self.assertEqual(get("keyed", "/props", {
            "Authorization": "Bearer " + KEY}).status, 200)

    def test_props(self) -> None:
        p = get("serve", "/props", check=True).json()
        self.assertIs(p["ui"], True)
        self.assertEqual(p["ui_settings"], {"max_tokens": MAX_TOKENS})
        self.assertEqual(p["window"]["budget"], 256)
        self.assertTrue(p["build_info"].endswith(
            "window: budget 256, sinks 4 (the oldest position evicted "
            "first)"), p["build_info"])
        self.assertEqual(get("none", "/props").json()["ui_settings"], {})

    def test_no_ui(self) -> None:
        a = get("none", "/", GZIP)
        self.assertEqual(a.status, 404)
        self.assertEqual(a.json()["error"]["type"], "not_found_error")
        self.assertIs(get("none", "/props").json()["ui"], False)

    def test_tools_and_cors_proxy_disabled(self) -> None:
        # what llama-server answers without --tools or --webui-mcp-proxy
        for path in ("/tools", "/cors-proxy"):
            for method in ("GET", "POST"):
                a = call(SERVERS["serve"].addr, method, path,
                         body={} if method == "POST" else None)
                self.assertEqual(a.status, 403, (method, path))
                self.assertEqual(a.json()["error"]["type"],
                                 "feature_disabled")

    def test_path_and_api_prefix(self) -> None:
        def text(path: str) -> str:
            a = get("site", path)
            self.assertEqual(a.status, 200, path)
            return a.body.decode()
        self.assertEqual(text("/llm/"), "<p>our own page</p>")
        self.assertEqual(text("/llm/index.html"), "<p>our own page</p>")
        self.assertEqual(text("/llm/app.js"), "console.log('ours');")
        self.assertEqual(text("/llm/docs/"), "<p>the docs</p>")
        self.assertEqual(get("site", "/llm/app.js").header("Content-Type"),
                         "application/javascript")
        for path in ("/llm/none.html", "/llm/docs/../../etc/passwd",
                     "/llm/..", "/llm/docs"):
            self.assertEqual(get("site", path).status, 404, path)
        # the API under the prefix only
        self.assertEqual(get("site", "/llm/props").status, 200)
        self.assertIs(get("site", "/llm/props").json()["ui"], True)
        self.assertEqual(get("site", "/props").status, 404)
        # a route's path under another method: its 405, not a file's 404
        a = get("site", "/llm/v1/chat/completions")
        self.assertEqual(a.status, 405)
        self.assertEqual(a.header("Allow"), "POST")
        self.assertEqual(get("site", "/").status, 404)


class Browser(unittest.TestCase):
    """browser/ui.test.mjs in chromium: every test of it passes."""

    def test_page_in_chromium(self) -> None:
        modules = os.path.join(BROWSER, "node_modules", "playwright-core")
        self.assertTrue(os.path.isdir(modules),
                        "no %s: make e2e-llamacpp runs npm ci there" %
                        modules)
        shots = os.environ.get("UI_SHOTS") or os.path.join(
            paths.REPO, "build", "ui-shots")
        os.makedirs(shots, exist_ok=True)
        env = dict(os.environ,
                   SERVE="http://" + SERVERS["serve"].addr,
                   LONG="http://" + SERVERS["long"].addr,
                   KEYED="http://" + SERVERS["keyed"].addr, KEY=KEY,
                   TRAIN=str(paths.train_context(STORIES)),
                   MAX_TOKENS=str(MAX_TOKENS), SHOTS=shots)
        r = subprocess.run(["node", "--test", "--test-reporter=tap",
                            "ui.test.mjs"], cwd=BROWSER, env=env,
                           stdin=subprocess.DEVNULL, capture_output=True,
                           text=True, timeout=1500)
        print(r.stdout[-3000:])
        self.assertEqual(r.returncode, 0, r.stdout + r.stderr)
        self.assertRegex(r.stdout, r"(?m)^# pass 3$")
        self.assertRegex(r.stdout, r"(?m)^# fail 0$")
        for n in ("1-first-answer", "2-past-the-context", "4-model-dialog",
                  "5-stopped", "6-api-key", "7-keyed-answer"):
            self.assertGreater(os.path.getsize(
                os.path.join(shots, n + ".png")), 10000, n)


if __name__ == "__main__":
    unittest.main()

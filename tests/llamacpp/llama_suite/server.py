#!/usr/bin/python3
"""LLAMA_SERVER_BIN_PATH for llama.cpp's own server tests: starts the
server under test with the suite's command line, the model's source alone
mapped to the local stories260K.

The suite's launcher (tools/server/tests/utils.py, ServerProcess.start)
names its model by Hugging Face repository and file; there is no network
here, so `--hf-repo ggml-org/test-model-stories260K[:F32]` and `--hf-repo
ggml-org/models --hf-file tinyllamas/stories260K.gguf` become `--model
$LLAMA_SUITE_MODEL` where the first of them stood. Any other model is
refused (exit 3, before the binary runs): the tests that need it fail, for
llama-server as for serve. Every other flag goes through as the suite
wrote it.

  LLAMA_SUITE_TARGET   serve (evictd-llama serve, the daemon from
                       $EVICTD_URL) or llama-server
  LLAMA_SUITE_BIN      the binary: evictd-llama or llama-server
  LLAMA_SUITE_MODEL    stories260K.gguf
  LLAMA_SUITE_DROP=1   diagnostic only, serve only: leave out the options
                       serve refuses (as its --help lists what it takes),
                       with their values, each said on stderr; never in CI
"""

import os
import re
import subprocess
import sys

# The options ServerProcess.start passes without a value; every other one
# it passes is followed by exactly one.
NO_VALUE = {
    "--offline", "--cont-batching", "--embedding", "--reranking", "--metrics",
    "--kv-unified", "--swa-full", "--slots", "--no-slots", "--verbose",
    "--context-shift", "--no-ui", "--no-models-autoload", "--jinja",
    "--no-jinja", "--no-mmproj", "--no-cache-idle-slots", "--ui-mcp-proxy",
    "--backend_sampling",
}
REPO = {"--hf-repo", "-hfr", "-hf"}
FILE = {"--hf-file", "-hff"}
SOURCES = REPO | FILE | {"--model", "-m", "--model-url", "-mu"}
STORIES = {("ggml-org/test-model-stories260K", None),
           ("ggml-org/test-model-stories260K:F32", None),
           ("ggml-org/models", "tinyllamas/stories260K.gguf")}


def say(msg: str) -> None:
    print("llama_suite: " + msg, file=sys.stderr, flush=True)


def map_model(args: list, model: str) -> list:
    """The arguments with the model's source replaced; exits 3 for a model
    that is not stories260K."""
    out, repo, hf_file, other, at = [], None, None, [], None
    i = 0
    while i < len(args):
        a = args[i]
        if a in SOURCES and i + 1 < len(args):
            v = args[i + 1]
            if a in REPO:
                repo = v
            elif a in FILE:
                hf_file = v
            else:
                other.append(a + " " + v)
            if at is None:
                at = len(out)
            i += 2
            continue
        out.append(a)
        i += 1
    if at is None:
        return out  # no model at all (the router preset): as written
    if other or (repo, hf_file) not in STORIES:
        say("model %s is not available here (only stories260K is mapped "
            "to a local file); not starting" %
            " ".join(filter(None, [repo, hf_file] + other)))
        sys.exit(3)
    return out[:at] + ["--model", model] + out[at:]


def serve_options(binary: str) -> set:
    """The option names `evictd-llama serve --help` lists."""
    text = subprocess.run([binary, "serve", "--help"], capture_output=True,
                          text=True).stdout
    names = set()
    for line in text.splitlines():
        m = re.match(r"\s+(-.*?)(?:\s{2,}|$)", line)
        if m:
            names.update(re.findall(r"(?<![\w-])(--?[A-Za-z][\w-]*)",
                                    m.group(1)))
    return names


def drop_refused(args: list, known: set) -> list:
    out, dropped, i = [], [], 0
    while i < len(args):
        a = args[i]
        takes = a.startswith("-") and a not in NO_VALUE and i + 1 < len(args)
        if a.startswith("-") and a not in known:
            n = 2 if takes else 1
            dropped.append(" ".join(args[i:i + n]))
            i += n
            continue
        out.append(a)
        if takes:
            out.append(args[i + 1])
            i += 1
        i += 1
    if dropped:
        say("dropped (diagnostic mode): " + ", ".join(dropped))
    return out


def main() -> None:
    target = os.environ.get("LLAMA_SUITE_TARGET")
    binary = os.environ.get("LLAMA_SUITE_BIN")
    model = os.environ.get("LLAMA_SUITE_MODEL")
    if target not in ("serve", "llama-server") or not binary or not model:
        say("set LLAMA_SUITE_TARGET (serve or llama-server), "
            "LLAMA_SUITE_BIN and LLAMA_SUITE_MODEL")
        sys.exit(2)
    args = map_model(sys.argv[1:], model)
    if target == "llama-server":
        os.execv(binary, [binary] + args)
    if os.environ.get("LLAMA_SUITE_DROP") == "1":
        args = drop_refused(args, serve_options(binary))
    # The daemon comes from $EVICTD_URL, serve's own default for --evictd.
    os.execv(binary, [binary, "serve"] + args)


if __name__ == "__main__":
    main()

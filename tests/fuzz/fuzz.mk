# The fuzz targets: libFuzzer with ASan and UBSan, built by clang into
# their own directory (never sharing objects with the gcc build): the API,
# the on-disk formats and the C client's answer reader (each below).
# `make fuzz FUZZ_SECONDS=600` fuzzes the API for that long; `make check`
# replays the saved regressions and fuzzes for FUZZ_SMOKE_SECONDS; `make fuzz-stats` shows how
# often each route answered each status over the corpus. Clang and its
# runtime come from `deploy/deps.sh fuzz`.

FUZZ_B        ?= $(B)/fuzz
FUZZ_CC       ?= clang
FUZZ_SECONDS  ?= 600
FUZZ_SMOKE_SECONDS ?= 20
FUZZ_SAN      := -fsanitize=address,undefined -fno-sanitize-recover=all \
                 -fno-omit-frame-pointer
FUZZ_CFLAGS   := -std=c11 -D_GNU_SOURCE -Wall -Wextra -Werror -g -O1 \
                 $(FUZZ_SAN) -Iinclude -iquote server
FUZZ_OBJ      := $(patsubst server/%.c,$(FUZZ_B)/obj/%.o,$(DAEMON_SRC) $(CORE_SRC))
FUZZ_FLAGS    := -max_len=8192 -dict=tests/fuzz/api.dict -print_final_stats=1 \
                 -artifact_prefix=$(FUZZ_B)/artifacts/ -timeout=10
FUZZ_REGRESS  := $(sort $(wildcard tests/fuzz/regress/*))

.PHONY: fuzz fuzz-build fuzz-deps fuzz-corpus fuzz-regress fuzz-smoke fuzz-cov \
        fuzz-stats

fuzz-deps:
	@deploy/deps.sh fuzz

$(FUZZ_B)/obj $(FUZZ_B)/artifacts $(FUZZ_B)/corpus:
	@mkdir -p $@

$(FUZZ_B)/obj/%.o: server/%.c $(HEADERS) | $(FUZZ_B)/obj
	$(FUZZ_CC) $(FUZZ_CFLAGS) -fsanitize=fuzzer-no-link \
	  -DEVD_VERSION='"$(VERSION)"' $(PKG_CFLAGS) -c -o $@ $<

# The differential twin: the same objects with the fast path stubbed out
# (tests/fuzz/nofast.c), linked into one object whose evd_* symbols are
# renamed ref_evd_*, so that both copies live in the harness. Without a
# server/fastpath.c there is nothing to compare and no twin.
ifneq ($(wildcard server/fastpath.c),)
FUZZ_REF_OBJ := $(filter-out $(FUZZ_B)/obj/fastpath.o,$(FUZZ_OBJ)) \
                $(FUZZ_B)/obj/nofast.o
FUZZ_TWIN    := $(FUZZ_B)/ref.o
FUZZ_DIFF    := -DEVD_FUZZ_DIFF

$(FUZZ_B)/obj/nofast.o: tests/fuzz/nofast.c $(HEADERS) | $(FUZZ_B)/obj
	$(FUZZ_CC) $(FUZZ_CFLAGS) -fsanitize=fuzzer-no-link -Iserver \
	  $(PKG_CFLAGS) -c -o $@ $<

$(FUZZ_B)/ref.o: $(FUZZ_REF_OBJ)
	ld -r -o $@.tmp $^
	nm -g --defined-only $@.tmp | \
	  awk '$$3 ~ /^evd_/ { print $$3, "ref_" $$3 }' > $@.syms
	objcopy --redefine-syms=$@.syms $@.tmp $@
	rm -f $@.tmp
endif

# The harness is fuzz_api.c and its parts fuzz_api_*.c (fuzz_api.h).
FUZZ_API_SRC  := $(sort $(wildcard tests/fuzz/fuzz_api*.c))

$(FUZZ_B)/fuzz_api: $(FUZZ_API_SRC) tests/fuzz/fuzz_api.h $(FUZZ_OBJ) \
    $(FUZZ_TWIN) $(HEADERS)
	$(FUZZ_CC) $(FUZZ_CFLAGS) $(FUZZ_DIFF) -fsanitize=fuzzer $(PKG_CFLAGS) \
	  -o $@ $(FUZZ_API_SRC) $(FUZZ_OBJ) $(FUZZ_TWIN) $(PKG_LIBS)

fuzz-build: fuzz-deps
	@$(MAKE) --no-print-directory $(FUZZ_B)/fuzz_api

# Seeds are regenerated every time from the vectors and the error list.
fuzz-corpus: | $(FUZZ_B)/corpus
	@rm -rf $(FUZZ_B)/seeds
	@python3 tests/fuzz/make_corpus.py $(FUZZ_B)/seeds

# Every saved regression input, each in a fresh process (they are
# self-contained: each holds every request it needs). Reports each one that
# still fails, and fails if any does.
fuzz-regress: fuzz-build | $(FUZZ_B)/artifacts
	@echo "== fuzz regressions: $(words $(FUZZ_REGRESS)) inputs"
	@bad=0; for f in $(FUZZ_REGRESS); do \
	  if $(FUZZ_B)/fuzz_api $(FUZZ_FLAGS) $$f \
	    > $(FUZZ_B)/regress.log 2>&1; \
	  then echo "ok   $$f"; \
	  else bad=$$((bad + 1)); echo "FAIL $$f"; \
	    grep -E '^\*\*\* invariant|runtime error|^SUMMARY|ERROR: [A-Z]' $(FUZZ_B)/regress.log | \
	      sed 's/^/     /'; fi; \
	done; [ $$bad -eq 0 ] || { echo "$$bad fuzz regression(s) fail"; exit 1; }

# Runs libFuzzer for $(1) seconds on the corpus (new inputs are kept in
# $(FUZZ_B)/corpus) with the extra flags $(2), prints the figures, and fails
# when a crash, leak or timeout was found (inputs in $(FUZZ_B)/artifacts/).
define fuzz_run
	@rm -f $(FUZZ_B)/artifacts/*
	@echo "== fuzzing for $(1) s (log: $(FUZZ_B)/fuzz.log)"
	@$(FUZZ_B)/fuzz_api $(FUZZ_FLAGS) $(2) -max_total_time=$(1) \
	  $(FUZZ_B)/corpus $(FUZZ_B)/seeds > $(FUZZ_B)/fuzz.log 2>&1; rc=$$?; \
	  grep -E '^#[0-9]+:? .*(INITED|DONE|cov:)|^Done|stat::|INFO: exiting|^==[0-9]+==ERROR|\*\*\* inv|^SUMMARY' \
	    $(FUZZ_B)/fuzz.log | grep -vE '^#[0-9]+ +(NEW|REDUCE|pulse)' | tail -n 12; \
	  echo "corpus: $$(ls $(FUZZ_B)/corpus | wc -l) inputs in $(FUZZ_B)/corpus"; \
	  found=$$(ls $(FUZZ_B)/artifacts | wc -l); \
	  if [ $$rc -ne 0 ] || [ $$found -ne 0 ]; then \
	    grep -E '\*\*\* |^SUMMARY|ERROR: ' $(FUZZ_B)/fuzz.log | sort | uniq -c | head -n 40; \
	    echo "fuzzer failed (exit $$rc, $$found crashing input(s) in $(FUZZ_B)/artifacts/):"; \
	    ls $(FUZZ_B)/artifacts; exit 1; fi

endef

# The long run keeps going past a crash (-fork, one job at a time: each job
# is one process with one long-lived API state) so that one known bug does
# not hide the next; FUZZ_FORK=0 runs a single process instead.
FUZZ_FORK ?= 1
FUZZ_LONG_FLAGS = $(if $(filter 0,$(FUZZ_FORK)),,-fork=1 -ignore_crashes=1)

fuzz: fuzz-build fuzz-corpus | $(FUZZ_B)/artifacts
	$(call fuzz_run,$(FUZZ_SECONDS),$(FUZZ_LONG_FLAGS))
	@$(MAKE) --no-print-directory fuzz-state \
	  FUZZ_STATE_SECONDS=$(FUZZ_STATE_SECONDS)
	@$(MAKE) --no-print-directory fuzz-answer \
	  FUZZ_ANSWER_SECONDS=$(FUZZ_ANSWER_SECONDS)

fuzz-smoke: fuzz-regress fuzz-corpus | $(FUZZ_B)/artifacts
	$(call fuzz_run,$(FUZZ_SMOKE_SECONDS),)
	@$(MAKE) --no-print-directory fuzz-state \
	  FUZZ_STATE_SECONDS=$(FUZZ_STATE_SMOKE_SECONDS)
	@$(MAKE) --no-print-directory fuzz-answer \
	  FUZZ_ANSWER_SECONDS=$(FUZZ_ANSWER_SMOKE_SECONDS)

# Every input of the corpus and the seeds once, in one process, with the
# count of answers per route and status (EVD_FUZZ_STATS) at the end.
fuzz-stats: fuzz-build fuzz-corpus | $(FUZZ_B)/corpus
	@EVD_FUZZ_STATS=1 $(FUZZ_B)/fuzz_api \
	  $(FUZZ_FLAGS) -runs=0 $(FUZZ_B)/seeds $(FUZZ_B)/corpus 2>&1 | \
	  sed -n '/^fuzz_api stats/,$$p; /invariant violated/p; /runtime error/p'

# Line coverage of the server code by the current corpus (clang source
# coverage; the harness's standalone main replays the files).
fuzz-cov: fuzz-deps fuzz-corpus
	@mkdir -p $(FUZZ_B)/cov
	$(FUZZ_CC) -std=c11 -D_GNU_SOURCE -O0 -g -Iinclude -iquote server -DEVD_FUZZ_STANDALONE \
	  -DEVD_VERSION='"$(VERSION)"' -fprofile-instr-generate -fcoverage-mapping \
	  $(PKG_CFLAGS) -o $(FUZZ_B)/cov/fuzz_api_cov $(FUZZ_API_SRC) \
	  $(DAEMON_SRC) $(CORE_SRC) $(PKG_LIBS)
	@rm -f $(FUZZ_B)/cov/*.profraw
	@find $(FUZZ_B)/seeds $(FUZZ_B)/corpus -type f | sort | \
	  LLVM_PROFILE_FILE=$(FUZZ_B)/cov/run-%p.profraw \
	  xargs $(FUZZ_B)/cov/fuzz_api_cov 2>&1 | grep -E '^ran|^\*\*\* (inv|in )' || true
	@llvm-profdata merge -o $(FUZZ_B)/cov/run.profdata $(FUZZ_B)/cov/*.profraw
	@llvm-cov report $(FUZZ_B)/cov/fuzz_api_cov \
	  -instr-profile=$(FUZZ_B)/cov/run.profdata \
	  $(filter server/api.c server/api_adopt.c server/apierr.c server/buf.c \
	    server/fastpath.c server/pages.c server/request.c server/step.c \
	    server/session.c server/window.c server/window_state.c, \
	    $(DAEMON_SRC) $(CORE_SRC))

# ---- the on-disk formats ---------------------------------------------------
# fuzz_journal (a journal segment, recovered as at start-up) and
# fuzz_snapshot (a snapshot, loaded): a refusal with a reason or a
# recovery to exactly the good records' state, windows intact, never a
# crash or a leak (each file's opening comment says more). Seeds are
# written by the targets themselves (EVD_FUZZ_SEEDS): the story of
# tests/unit/state_files.h cut, damaged and reordered, and the v1
# fixture's real files. `make fuzz-state` runs both for FUZZ_STATE_SECONDS
# each; `make fuzz-journal` / `make fuzz-snapshot` one; `make fuzz-smoke`
# runs both for FUZZ_STATE_SMOKE_SECONDS, `make fuzz` for
# FUZZ_STATE_SECONDS after the API.
FUZZ_STATE_SECONDS       ?= 300
FUZZ_STATE_SMOKE_SECONDS ?= 10
FUZZ_STATE_HDR := tests/fuzz/fuzz_state.h tests/unit/state_files.h $(HEADERS)

.PHONY: fuzz-state fuzz-journal fuzz-snapshot

$(FUZZ_B)/fuzz_journal $(FUZZ_B)/fuzz_snapshot: $(FUZZ_B)/fuzz_%: \
    tests/fuzz/fuzz_%.c $(FUZZ_STATE_HDR) $(FUZZ_OBJ)
	$(FUZZ_CC) $(FUZZ_CFLAGS) -fsanitize=fuzzer -Itests/unit $(PKG_CFLAGS) \
	  -o $@ $< $(FUZZ_OBJ) $(PKG_LIBS)

# Runs fuzz_$(1) for $(2) seconds on $(FUZZ_B)/$(1)-corpus (kept) and fresh
# seeds, prints its figures, fails on a crash, leak, timeout or violated
# property (inputs in $(FUZZ_B)/artifacts-$(1)/). The seeds are written by
# the command $(3), given the seed folder as its last argument (default:
# the target itself under EVD_FUZZ_SEEDS); inputs are at most $(4) bytes
# (default 4096).
define fuzz_state_run
	@rm -rf $(FUZZ_B)/$(1)-seeds $(FUZZ_B)/artifacts-$(1)
	@mkdir -p $(FUZZ_B)/$(1)-seeds $(FUZZ_B)/$(1)-corpus $(FUZZ_B)/artifacts-$(1)
	@$(if $(3),$(3) $(FUZZ_B)/$(1)-seeds,EVD_FUZZ_SEEDS=$(FUZZ_B)/$(1)-seeds $(FUZZ_B)/fuzz_$(1))
	@echo "== fuzzing $(1) for $(2) s (log: $(FUZZ_B)/$(1).log)"
	@$(FUZZ_B)/fuzz_$(1) -max_len=$(or $(4),4096) -timeout=10 -print_final_stats=1 \
	  -artifact_prefix=$(FUZZ_B)/artifacts-$(1)/ -max_total_time=$(2) \
	  $(FUZZ_B)/$(1)-corpus $(FUZZ_B)/$(1)-seeds > $(FUZZ_B)/$(1).log 2>&1; \
	  rc=$$?; \
	  grep -E '^#[0-9]+:? .*(INITED|DONE)|^Done|stat::(number_of_executed_units|average_exec_per_sec|peak_rss)|^==[0-9]+==ERROR|\*\*\* inv|^SUMMARY' \
	    $(FUZZ_B)/$(1).log | tail -n 8; \
	  echo "corpus: $$(ls $(FUZZ_B)/$(1)-corpus | wc -l) inputs in $(FUZZ_B)/$(1)-corpus"; \
	  found=$$(ls $(FUZZ_B)/artifacts-$(1) | wc -l); \
	  if [ $$rc -ne 0 ] || [ $$found -ne 0 ]; then \
	    grep -E '\*\*\* |^SUMMARY|ERROR: ' $(FUZZ_B)/$(1).log | sort | uniq -c | head -n 20; \
	    echo "fuzz_$(1) failed (exit $$rc, $$found input(s) in $(FUZZ_B)/artifacts-$(1)/)"; \
	    exit 1; fi

endef

fuzz-journal: fuzz-deps
	@$(MAKE) --no-print-directory $(FUZZ_B)/fuzz_journal
	$(call fuzz_state_run,journal,$(FUZZ_STATE_SECONDS))

fuzz-snapshot: fuzz-deps
	@$(MAKE) --no-print-directory $(FUZZ_B)/fuzz_snapshot
	$(call fuzz_state_run,snapshot,$(FUZZ_STATE_SECONDS))

# One after the other, even under -j: each wants a core, and its figures.
fuzz-state:
	@$(MAKE) --no-print-directory fuzz-journal
	@$(MAKE) --no-print-directory fuzz-snapshot

# ---- the C client's answer reader ------------------------------------------
# fuzz_answer: deploy/clients/c/reader.h alone (answer.c, json.c), with no
# connection: bytes in, structs out; never a crash or a read out of bounds,
# whatever it accepts keeps the contract's invariants and reads back the
# same once written back (tests/client/rewrite.c). Seeds: the real daemon's
# answers to every vector (make_answer_seeds.py, which starts $(B)/evictd).
# `make fuzz-answer` runs it for FUZZ_ANSWER_SECONDS; `make fuzz` runs it
# last, `make fuzz-smoke` for FUZZ_ANSWER_SMOKE_SECONDS.
FUZZ_ANSWER_SECONDS       ?= 300
FUZZ_ANSWER_SMOKE_SECONDS ?= 10
FUZZ_ANSWER_SRC := tests/fuzz/fuzz_answer.c tests/client/rewrite.c \
                   deploy/clients/c/answer.c deploy/clients/c/json.c
FUZZ_ANSWER_HDR := include/evictd/client.h deploy/clients/c/reader.h \
                   deploy/clients/c/json.h tests/client/rewrite.h

.PHONY: fuzz-answer

$(FUZZ_B)/fuzz_answer: $(FUZZ_ANSWER_SRC) $(FUZZ_ANSWER_HDR)
	@mkdir -p $(@D)
	$(FUZZ_CC) $(FUZZ_CFLAGS) -fsanitize=fuzzer -o $@ $(FUZZ_ANSWER_SRC)

fuzz-answer: fuzz-deps
	@$(MAKE) --no-print-directory $(FUZZ_B)/fuzz_answer $(B)/evictd
	$(call fuzz_state_run,answer,$(FUZZ_ANSWER_SECONDS),python3 tests/fuzz/make_answer_seeds.py $(B)/evictd,16384)

test-more:: fuzz-smoke

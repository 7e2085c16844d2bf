# A real transformer decoding through evictd (tests/e2e): the byte-level
# model of deploy/model (its committed weights; nothing is trained here)
# decodes through the real daemon on a loopback port, one batch request per
# decode iteration, KV caches of budget + lookahead slots (and a paged pool),
# and every logit is checked against the same model with a full cache and an
# explicit window mask. Debian's PyTorch comes from deps.sh's "e2e" group;
# the tests run under /usr/bin/python3 (the one that has it). They print,
# per phase, the model's forward time beside evictd's round trip
# (E2E_VERBOSE=1: every iteration). First, test_formulas.py checks the model
# against Llama's formulas written out by hand (RMSNorm, adjacent-pair RoPE,
# SwiGLU, tied head), the function llama.cpp computes from the same weights.
.PHONY: e2e
e2e:
	@deploy/deps.sh build e2e
	@$(MAKE) --no-print-directory $(B)/evictd
	PYTHONDONTWRITEBYTECODE=1 /usr/bin/python3 tests/e2e/test_formulas.py -v
	EVICTD_BIN=$(abspath $(B)/evictd) PYTHONDONTWRITEBYTECODE=1 \
	  /usr/bin/python3 tests/e2e/test_e2e.py -v

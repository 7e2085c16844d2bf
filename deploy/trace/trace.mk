# `make trace` (deploy/trace): the attention of deploy/model's transformer over
# text it did not train on, replayed through evictd-eval for the window and
# streaming-llm (sinks 4). Not part of `make check` or CI: it needs Debian's
# PyTorch and writes ~0.6 GB of traces to $(B)/trace. It rewrites
# deploy/trace/retained-attention.svg, the figure deploy/ATTENTION.md shows.
.PHONY: trace
trace: $(B)/evictd-eval
	@deploy/deps.sh e2e
	deploy/trace/run.sh $(B)/evictd-eval $(B)/trace

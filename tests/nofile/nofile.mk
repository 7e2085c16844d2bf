# A low descriptor limit (issue 32): containers often start with nofile
# 1024:1024, where the daemon warns before it says where it listens, and a
# harness that took its first line for the address could not start it.
# test-low-nofile runs, at 1024:1024 whatever this machine's own limit
# (prlimit, util-linux): tests/nofile/daemon.sh (the daemon's warning, then
# its address; it serves), then harnesses that start the daemon and read
# its address from what it prints, one of each way: the C harness
# (build/test_http, whose idle-connection test meets the limit too), log
# files read by Python (tests/support/listening.py, as the answer fuzzer's
# seed writer, tls_test.py and restart_test.py start the daemon) and by the
# shell (metrics' lint.sh).
NOFILE_LIMIT := 1024
NOFILE_RUN   := prlimit --nofile=$(NOFILE_LIMIT):$(NOFILE_LIMIT)

.PHONY: test-low-nofile
test-low-nofile: $(B)/evictd $(B)/test_http
	@deploy/deps.sh test tls metrics
	tests/nofile/daemon.sh $(B)/evictd
	@rm -rf $(B)/nofile-seeds
	$(NOFILE_RUN) python3 tests/fuzz/make_answer_seeds.py $(B)/evictd $(B)/nofile-seeds
	$(NOFILE_RUN) $(B)/test_http
	$(NOFILE_RUN) tests/tls/tls_test.py $(B)/evictd
	$(NOFILE_RUN) tests/durability/restart_test.py $(abspath $(B)/evictd)
	$(NOFILE_RUN) tests/metrics/lint.sh $(B)/evictd

test-more:: test-low-nofile

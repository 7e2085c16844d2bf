# Journal and snapshot failures under --state-dir, for real
# (tests/faults/fault_test.py, Python 3, standard library only): a full
# disk (a 4 MiB tmpfs on a scratch directory, filled up by a filler file;
# needs root, and without it those cases say they were NOT tested) and
# libfiu's fault points in a FIU=1 build of the daemon (server/fault.h:
# journal write, sync and open, snapshot fork and rename), each under
# concurrent load checked against support's model: changes refused with 503
# or parked, reads, health and metrics answering at once, recovery by
# itself, nothing acknowledged lost across kill -9 and SIGTERM. About 35 s
# (the compaction cases wait out the daemon's 30 s back-off side by side).
# FAULTS_ARGS: e.g. --seed N --only CASE,... --keep.
FAULTS_FIU_B = build/fiu
FAULTS_ARGS ?=

.PHONY: test-faults

test-faults: $(B)/evictd
	@deploy/deps.sh build test faults
	@$(MAKE) --no-print-directory B=$(FAULTS_FIU_B) FIU=1 SAN= OPT=-O2 \
	  $(FAULTS_FIU_B)/evictd
	tests/faults/fault_test.py --fiu-bin $(abspath $(FAULTS_FIU_B)/evictd) \
	  $(FAULTS_ARGS) $(abspath $(B)/evictd)

test-more:: test-faults

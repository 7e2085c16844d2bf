"""What every Python suite and bench of evictd shares: the processes they
start (support.daemon, support.serve, support.llama_server), the one way to
read where those listen (support.listening), requests and metrics, and the
shared checkers and references. tests/README.md says which module holds
what; the suites find this package through PYTHONPATH, which the top
Makefile exports (and which a suite run by hand sets the same way)."""

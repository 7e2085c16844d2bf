# The Python client (deploy/clients/python): its unittest suite starts the
# daemon built here ($(B)/evictd) and talks to it over loopback and a unix
# socket. Standard library only, so nothing to install but python3.
.PHONY: test-python
test-python: $(B)/evictd
	EVICTD_BIN=$(abspath $(B)/evictd) PYTHONDONTWRITEBYTECODE=1 \
	  python3 -m unittest discover -s deploy/clients/python -p 'test_*.py'

test-more:: test-python

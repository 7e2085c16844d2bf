# HTTPS (--tls-cert, --tls-key): the real daemon with a certificate the test
# makes, spoken to by curl, the probe and the Python clients.
.PHONY: test-tls
test-tls: $(B)/evictd
	@deploy/deps.sh test tls
	tests/tls/tls_test.py $(B)/evictd

test-more:: test-tls

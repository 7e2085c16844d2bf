/* The health probe behind `evictd --probe URL`: a container HEALTHCHECK or
 * a supervisor can check a running daemon without curl in the image. */
#ifndef EVICTD_PROBE_H
#define EVICTD_PROBE_H

/* Sends GET to `url` ("http://host[:port][/path]" or "https://...", IPv6
 * hosts in brackets, path /healthz when omitted; or "unix:/socket/path" for
 * GET /healthz over a Unix socket) and waits up to timeout_ms for the status
 * line. Over https the certificate is not verified: the probe asks whether
 * the daemon answers, as Kubernetes' HTTPS probes do. Returns 0 when the
 * answer is 200, else 1, with the reason on stderr. */
int evd_probe(const char *url, int timeout_ms);

#endif

/* A small HTTP/1.1 client over raw sockets for the HTTP tests: it writes
 * requests byte for byte as told (so tests can send broken or partial ones),
 * parses responses framed by Content-Length, chunked encoding or EOF, and
 * reuses one connection until told otherwise. It never reconnects on its
 * own, so a test knows exactly which connection served which request. */
#ifndef EVICTD_TESTS_HTTP_CLIENT_H
#define EVICTD_TESTS_HTTP_CLIENT_H

#include <stddef.h>

/* One connection. `rbuf` holds bytes read past the last response. */
typedef struct {
  int fd;
  char *rbuf;
  size_t rlen, rcap;
  int peer_closed;    /* the server closed its side (EOF seen) */
  unsigned responses; /* responses read over this connection */
} hc_conn_t;

typedef struct {
  char *name, *value;
} hc_header_t;

/* One response. Everything is owned by the response: hc_response_free. */
typedef struct {
  int status;
  hc_header_t *headers;
  size_t nheaders;
  char *body; /* NUL-terminated for convenience; body_len excludes it */
  size_t body_len;
  int chunked;     /* the body came with Transfer-Encoding: chunked */
  int has_length;  /* a Content-Length header was present */
  int conn_close;  /* "Connection: close" was sent */
} hc_response_t;

/* Connects to "host:port", "[v6]:port" or "unix:/path" (numeric hosts
 * only) with send and receive timeouts of `timeout_s` seconds (0 = none).
 * Returns 0, or -1 with errno set; either way *c is reset first, so
 * hc_close is always safe. */
int hc_connect(hc_conn_t *c, const char *addr, int timeout_s);

/* Closes the socket and frees the read buffer. Safe on a failed connect. */
void hc_close(hc_conn_t *c);

/* Writes all of buf[0..n). Returns 0 or -1 (errno set). */
int hc_write_all(hc_conn_t *c, const void *buf, size_t n);

/* Writes a request: request line, Host, any extra header lines (each ending
 * in "\r\n", or NULL) and the body. With chunk > 0 the body goes out in
 * Transfer-Encoding: chunked pieces of at most `chunk` bytes; otherwise a
 * Content-Length header is sent whenever body != NULL. Returns 0 or -1. */
int hc_send(hc_conn_t *c, const char *method, const char *path,
            const char *extra_headers, const char *body, size_t len,
            size_t chunk);

/* Reads one response. `head` says the request was HEAD (no body follows
 * whatever the headers say). Returns 0, or -1 when the connection closed or
 * failed before a whole response arrived, or the response was malformed. */
int hc_read_response(hc_conn_t *c, int head, hc_response_t *r);

/* hc_send then hc_read_response, with the body given as a C string (or
 * NULL for none). Returns 0 or -1. */
int hc_request(hc_conn_t *c, const char *method, const char *path,
               const char *body, hc_response_t *r);

/* The value of the first header called `name` (any case), or NULL. */
const char *hc_header(const hc_response_t *r, const char *name);

/* Number of headers called `name` (any case). */
size_t hc_header_count(const hc_response_t *r, const char *name);

/* Frees what the response owns and zeroes it. */
void hc_response_free(hc_response_t *r);

/* Waits up to timeout_ms for the server to close the connection without
 * sending anything. Returns 1 on EOF (or reset), 0 on timeout, -1 when data
 * arrived instead. */
int hc_wait_closed(hc_conn_t *c, int timeout_ms);

#endif

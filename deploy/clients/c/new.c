/* evictd's C client, made and unmade: the options checked, the address
 * (unix:, http, https) and the token read, the pools and the transport set
 * up (evd_client_new), and everything released (evd_client_free). */
#include "client_int.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define DEFAULT_URL "http://127.0.0.1:8090"
#define DEFAULT_TIMEOUT_MS 10000u

static int new_fail(evd_client_t *c, char *errbuf, size_t errlen, int rc,
                    const char *fmt, ...)
    __attribute__((format(printf, 5, 6)));

static int new_fail(evd_client_t *c, char *errbuf, size_t errlen, int rc,
                    const char *fmt, ...) {
  va_list ap;

  if (errbuf != NULL && errlen > 0) {
    va_start(ap, fmt);
    vsnprintf(errbuf, errlen, fmt, ap);
    va_end(ap);
  }
  evd_client_free(c);
  return rc;
}

/* The return code of a sentence of parse_url or token_header. */
static int rc_of(const char *why) {
  return strcmp(why, "out of memory") == 0 ? EVD_CLIENT_ENOMEM
                                           : EVD_CLIENT_EINVAL;
}

/* Appends a header line to c->headers: 0, or -1 when memory ran out. */
static int add_header(evd_client_t *c, const char *line) {
  struct curl_slist *l = curl_slist_append(c->headers, line);

  if (l == NULL)
    return -1;
  c->headers = l;
  return 0;
}

/* The address: "unix:/path", or an http(s) URL (a bare host:port is
 * http). Sets base, base_len and unix_path; returns 0 or a sentence. */
static const char *parse_url(evd_client_t *c, const char *url, bool *tls) {
  CURLU *u;
  char *part = NULL;
  const char *why = NULL;
  size_t n;

  *tls = false;
  if (strncmp(url, "unix:", 5) == 0) {
    if (url[5] == '\0')
      return "a unix: address needs a path";
    if ((c->unix_path = strdup(url + 5)) == NULL ||
        (c->base = strdup("http://localhost")) == NULL)
      return "out of memory";
    c->base_len = strlen(c->base);
    return NULL;
  }
  if ((u = curl_url()) == NULL)
    return "out of memory";
  if (strstr(url, "://") == NULL) {
    n = strlen(url) + 8;
    if ((c->base = malloc(n)) == NULL) {
      curl_url_cleanup(u);
      return "out of memory";
    }
    snprintf(c->base, n, "http://%s", url);
  } else if ((c->base = strdup(url)) == NULL) {
    curl_url_cleanup(u);
    return "out of memory";
  }
  if (curl_url_set(u, CURLUPART_URL, c->base, 0) != CURLUE_OK)
    why = "not a URL";
  else if (curl_url_get(u, CURLUPART_SCHEME, &part, 0) != CURLUE_OK ||
           (strcmp(part, "http") != 0 && strcmp(part, "https") != 0))
    why = "the scheme is not http, https or unix";
  else
    *tls = strcmp(part, "https") == 0;
  curl_free(part);
  if (why == NULL &&
      (curl_url_get(u, CURLUPART_QUERY, &part, 0) == CURLUE_OK ||
       curl_url_get(u, CURLUPART_FRAGMENT, &part, 0) == CURLUE_OK ||
       curl_url_get(u, CURLUPART_USER, &part, 0) == CURLUE_OK)) {
    curl_free(part);
    why = "a query, fragment or user in the URL";
  }
  curl_url_cleanup(u);
  /* The path, if any, is a prefix (a proxy's): kept, without a final /. */
  c->base_len = strlen(c->base);
  while (c->base_len > 0 && c->base[c->base_len - 1] == '/')
    c->base[--c->base_len] = '\0';
  return why;
}

/* The token's header from opts (token, else token_file's first line):
 * NULL with *why set on failure, NULL with *why NULL when there is none. */
static char *token_header(const evd_client_opts_t *o, const char **why) {
  char line[4096], *h;
  const char *t = o->token;
  size_t n, i;
  FILE *f;

  *why = NULL;
  if (t == NULL && o->token_file != NULL) {
    if ((f = fopen(o->token_file, "r")) == NULL) {
      *why = "cannot read token_file";
      return NULL;
    }
    if (fgets(line, sizeof line, f) == NULL)
      line[0] = '\0';
    fclose(f);
    n = strlen(line);
    while (n > 0 && (line[n - 1] == '\n' || line[n - 1] == '\r' ||
                     line[n - 1] == ' ' || line[n - 1] == '\t'))
      line[--n] = '\0';
    t = line;
  }
  if (t == NULL || t[0] == '\0')
    return NULL;
  for (i = 0; t[i] != '\0'; i++) {
    if ((unsigned char)t[i] < 0x21 || (unsigned char)t[i] > 0x7E) {
      *why = "the token has a blank or a byte that is not printable ASCII";
      return NULL;
    }
  }
  n = strlen(t) + 32;
  if ((h = malloc(n)) == NULL) {
    *why = "out of memory";
    return NULL;
  }
  snprintf(h, n, "Authorization: Bearer %s", t);
  return h;
}

int evd_client_new(evd_client_t **out, const evd_client_opts_t *opts,
                   char *errbuf, size_t errlen) {
  static const evd_client_opts_t none;
  static const char *const fixed[] = {"Content-Type: application/json",
                                      "Accept: application/json",
                                      /* no 100-continue round trip */
                                      "Expect:"};
  const char *url, *why;
  evd_client_t *c;
  char *auth;
  bool tls;
  size_t i;

  if (errbuf != NULL && errlen > 0)
    errbuf[0] = '\0';
  if (out == NULL)
    return EVD_CLIENT_EINVAL;
  *out = NULL;
  if (opts == NULL)
    opts = &none;
  if ((c = calloc(1, sizeof *c)) == NULL)
    return new_fail(NULL, errbuf, errlen, EVD_CLIENT_ENOMEM, "out of memory");
  c->err.code = c->err.message = "";
  c->err.newest = -1;
  url = opts->url;
  if (url == NULL || url[0] == '\0')
    url = getenv("EVICTD_URL");
  if (url == NULL || url[0] == '\0')
    url = DEFAULT_URL;
  if ((why = parse_url(c, url, &tls)) != NULL)
    return new_fail(c, errbuf, errlen, rc_of(why), "evictd URL \"%s\": %s",
                    url, why);
  if (!tls && (opts->cafile != NULL || opts->insecure))
    return new_fail(c, errbuf, errlen, EVD_CLIENT_EINVAL,
                    "cafile and insecure need an https:// URL, not \"%s\"",
                    url);
  if (opts->cafile != NULL && (c->cafile = strdup(opts->cafile)) == NULL)
    return new_fail(c, errbuf, errlen, EVD_CLIENT_ENOMEM, "out of memory");
  c->insecure = opts->insecure;
  c->resend_timeouts = opts->resend_timeouts;
  c->timeout_ms = opts->timeout_ms ? opts->timeout_ms : DEFAULT_TIMEOUT_MS;
  c->connect_timeout_ms =
      opts->connect_timeout_ms ? opts->connect_timeout_ms : c->timeout_ms;
  c->reconnect_ms = opts->reconnect_ms;
  for (i = 0; i < sizeof fixed / sizeof fixed[0]; i++)
    if (add_header(c, fixed[i]) != 0)
      return new_fail(c, errbuf, errlen, EVD_CLIENT_ENOMEM, "out of memory");
  auth = token_header(opts, &why);
  if (why != NULL)
    return new_fail(c, errbuf, errlen, rc_of(why), "%s%s%s", why,
                    opts->token_file ? ": " : "",
                    opts->token_file ? opts->token_file : "");
  if (auth != NULL) {
    int added = add_header(c, auth);
    /* The token is a secret: this copy is wiped before it is freed (the
     * header list keeps its own). */
    memset(auth, 0, strlen(auth));
    free(auth);
    if (added != 0)
      return new_fail(c, errbuf, errlen, EVD_CLIENT_ENOMEM, "out of memory");
  }
  if (evd__client_transport_init(c, errbuf, errlen) != 0) {
    evd_client_free(c);
    return EVD_CLIENT_ENOMEM;
  }
  *out = c;
  return 0;
}

void evd_client_free(evd_client_t *c) {
  if (c == NULL)
    return;
  evd__client_transport_close(c);
  curl_slist_free_all(c->headers);
  free(c->base);
  free(c->unix_path);
  free(c->cafile);
  free(c->url.p);
  free(c->body.p);
  free(c->ans.p);
  evd__arena_free(&c->arena);
  free(c);
}

/* evictd's C client: the request bodies (written by hand into one reusable
 * buffer), and one function per operation that sends its request
 * (transport.c) and reads its answer (answer.c) into the client's memory.
 * Making and freeing a client is in new.c. */
#include "client_int.h"

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- buffers and errors ------------------------------------------------ */

int evd__cbuf_reserve(evd__cbuf_t *b, size_t extra) {
  size_t cap;
  char *p;

  if (b->cap - b->len >= extra)
    return 0;
  cap = b->cap ? b->cap : 256;
  while (cap - b->len < extra) {
    if (cap > SIZE_MAX / 2)
      return -1;
    cap *= 2;
  }
  if ((p = realloc(b->p, cap)) == NULL)
    return -1;
  b->p = p;
  b->cap = cap;
  return 0;
}

int evd__client_fail(evd_client_t *c, int rc, const char *code,
                     const char *fmt, ...) {
  va_list ap;

  va_start(ap, fmt);
  vsnprintf(c->err_msg, sizeof c->err_msg, fmt, ap);
  va_end(ap);
  snprintf(c->err_code, sizeof c->err_code, "%s", code);
  c->err.rc = rc;
  c->err.status = rc == EVD_CLIENT_EPROTO ? (int)c->status : 0;
  c->err.code = c->err_code;
  c->err.message = c->err_msg;
  c->err.newest = -1;
  return rc;
}

static int einval(evd_client_t *c, const char *what) {
  return evd__client_fail(c, EVD_CLIENT_EINVAL, "invalid_argument", "%s",
                          what);
}

static int enomem(evd_client_t *c) {
  return evd__client_fail(c, EVD_CLIENT_ENOMEM, "out_of_memory",
                          "The client could not allocate memory.");
}

const char *evd_client_strerror(int rc) {
  switch (rc) {
  case EVD_CLIENT_OK: return "success";
  case EVD_CLIENT_EAPI: return "the daemon answered with an error";
  case EVD_CLIENT_ECONNECT: return "no connection to the daemon";
  case EVD_CLIENT_ETIMEOUT: return "no answer within the timeout";
  case EVD_CLIENT_EPROTO: return "an answer that is not the contract's";
  case EVD_CLIENT_EINVAL: return "a bad argument";
  case EVD_CLIENT_ENOMEM: return "out of memory";
  default: return "unknown error";
  }
}

const evd_client_err_t *evd_client_error(const evd_client_t *c) {
  return &c->err;
}

void evd_client_stats(const evd_client_t *c, evd_client_stats_t *out) {
  *out = c->stats;
}

int evd__client_pools(evd_client_t *c) {
  /* Every number of a list takes at least two bytes ("7," or "7]"), and
   * a string's decoded bytes plus its NUL at most its quoted ones. */
  size_t u32_need = c->ans.len / 2 + 1, chars_need = c->ans.len + 1;

  if (c->u32_cap < u32_need) {
    uint32_t *p = realloc(c->u32, u32_need * 2 * sizeof *p);
    if (p == NULL)
      return -1;
    c->u32 = p;
    c->u32_cap = u32_need * 2;
  }
  if (c->chars_cap < chars_need) {
    char *p = realloc(c->chars, chars_need * 2);
    if (p == NULL)
      return -1;
    c->chars = p;
    c->chars_cap = chars_need * 2;
  }
  c->u32_len = c->chars_len = 0;
  return 0;
}

/* ---- writing requests --------------------------------------------------- */

/* Writers into room reserved beforehand: each returns the new end. */
#define W_LIT(p, s) (memcpy((p), (s), sizeof(s) - 1), (p) + sizeof(s) - 1)

static char *w_u64(char *p, uint64_t v) {
  char tmp[20];
  size_t n = 0;

  do {
    tmp[n++] = (char)('0' + v % 10);
    v /= 10;
  } while (v > 0);
  while (n > 0)
    *p++ = tmp[--n];
  return p;
}

/* The most bytes w_str writes for s. */
static size_t str_room(const char *s) {
  return strlen(s) * 6 + 2;
}

/* A JSON string: ids need no escapes, anything else is escaped so that the
 * daemon, not the client, says what is wrong with it. */
static char *w_str(char *p, const char *s) {
  static const char hex[] = "0123456789abcdef";

  *p++ = '"';
  for (; *s != '\0'; s++) {
    unsigned char ch = (unsigned char)*s;
    if (ch == '"' || ch == '\\') {
      *p++ = '\\';
      *p++ = (char)ch;
    } else if (ch < 0x20) {
      p = W_LIT(p, "\\u00");
      *p++ = hex[ch >> 4];
      *p++ = hex[ch & 15];
    } else {
      *p++ = (char)ch;
    }
  }
  *p++ = '"';
  return p;
}

/* ,"key":v for each configuration field >= 0. */
static char *w_cfg(char *p, const evd_session_cfg_t *cfg, bool *first) {
  static const char *const keys[] = {"\"budget\":", "\"sinks\":",
                                     "\"lookahead\":", "\"page_size\":"};
  const int64_t v[] = {cfg->budget, cfg->sinks, cfg->lookahead,
                       cfg->page_size};
  size_t i;

  for (i = 0; i < 4; i++) {
    if (v[i] < 0)
      continue;
    if (!*first)
      *p++ = ',';
    *first = false;
    memcpy(p, keys[i], strlen(keys[i]));
    p += strlen(keys[i]);
    p = w_u64(p, (uint64_t)v[i]);
  }
  return p;
}

static int check_step(evd_client_t *c, const evd_step_t *s) {
  if (s == NULL || s->session == NULL)
    return einval(c, "A step needs a session id.");
  if (s->n_positions > 0 && s->positions == NULL)
    return einval(c, "A step's positions are NULL.");
  if (s->n_positions == 0 && !s->has_commit)
    return einval(c, "A step needs positions, or a commit.");
  return 0;
}

/* A step's body, or a batch item with "session" first, appended to the
 * body buffer. */
static int put_step(evd_client_t *c, const evd_step_t *s, bool item) {
  size_t need = 256 + s->n_positions * 11 +
                (item ? str_room(s->session) : 0);
  bool first = true;
  char *p;
  size_t i;

  if (evd__cbuf_reserve(&c->body, need))
    return enomem(c);
  p = c->body.p + c->body.len;
  *p++ = '{';
  if (item) {
    p = W_LIT(p, "\"session\":");
    p = w_str(p, s->session);
    first = false;
  }
  if (s->n_positions == 1) {
    p = first ? W_LIT(p, "\"pos\":") : W_LIT(p, ",\"pos\":");
    p = w_u64(p, s->positions[0]);
    first = false;
  } else if (s->n_positions > 1) {
    p = first ? W_LIT(p, "\"positions\":[") : W_LIT(p, ",\"positions\":[");
    for (i = 0; i < s->n_positions; i++) {
      p = w_u64(p, s->positions[i]);
      *p++ = ',';
    }
    p[-1] = ']';
    first = false;
  }
  if (s->tentative) {
    p = first ? W_LIT(p, "\"tentative\":true")
              : W_LIT(p, ",\"tentative\":true");
    first = false;
  }
  if (s->has_commit) {
    p = first ? W_LIT(p, "\"commit\":") : W_LIT(p, ",\"commit\":");
    p = w_u64(p, s->commit);
    first = false;
  }
  if (s->create != NULL)
    p = w_cfg(p, s->create, &first);
  *p++ = '}';
  c->body.len = (size_t)(p - c->body.p);
  return 0;
}

/* c->url = base + path, with the session id (if any) percent-escaped
 * where it is not an id's byte: the daemon then answers
 * invalid_session_id, where an unescaped '/' or '?' would name another
 * path. */
static int put_url(evd_client_t *c, const char *path, const char *session,
                   const char *suffix) {
  static const char hex[] = "0123456789ABCDEF";
  size_t need = c->base_len + strlen(path) + 1 +
                (session ? strlen(session) * 3 + strlen(suffix) : 0);
  char *p;

  c->url.len = 0;
  if (evd__cbuf_reserve(&c->url, need))
    return enomem(c);
  p = c->url.p;
  memcpy(p, c->base, c->base_len);
  p += c->base_len;
  memcpy(p, path, strlen(path));
  p += strlen(path);
  if (session != NULL) {
    const unsigned char *s;
    for (s = (const unsigned char *)session; *s != '\0'; s++) {
      if ((*s >= 'a' && *s <= 'z') || (*s >= 'A' && *s <= 'Z') ||
          (*s >= '0' && *s <= '9') || *s == '.' || *s == '_' || *s == '~' ||
          *s == '-') {
        *p++ = (char)*s;
      } else {
        *p++ = '%';
        *p++ = hex[*s >> 4];
        *p++ = hex[*s & 15];
      }
    }
    memcpy(p, suffix, strlen(suffix));
    p += strlen(suffix);
  }
  *p = '\0';
  c->url.len = (size_t)(p - c->url.p);
  return 0;
}

static int session_url(evd_client_t *c, const char *session,
                       const char *suffix) {
  if (session == NULL)
    return einval(c, "The session id is NULL.");
  return put_url(c, "/session/", session, suffix);
}

/* The body "{"key":v}" (or "{}" when v < 0). */
static int put_int_body(evd_client_t *c, const char *key, int64_t v) {
  char *p;

  c->body.len = 0;
  if (evd__cbuf_reserve(&c->body, strlen(key) + 32))
    return enomem(c);
  p = c->body.p;
  *p++ = '{';
  if (v >= 0) {
    *p++ = '"';
    memcpy(p, key, strlen(key));
    p += strlen(key);
    p = W_LIT(p, "\":");
    p = w_u64(p, (uint64_t)v);
  }
  *p++ = '}';
  c->body.len = (size_t)(p - c->body.p);
  return 0;
}

/* ---- answers ------------------------------------------------------------ */

const char *evd__method_name(evd__method_t m) {
  static const char *const names[] = {"GET", "POST", "PUT", "DELETE"};
  return names[m];
}

static int eproto(evd_client_t *c, const char *why) {
  return evd__client_fail(c, EVD_CLIENT_EPROTO, "protocol_error",
                          "The answer to %s %s (HTTP %ld) is not the "
                          "contract's: %s",
                          evd__method_name(c->method), c->url.p, c->status, why);
}

/* An answer of status >= 400: EVD_CLIENT_EAPI with the daemon's code,
 * message and newest, or EVD_CLIENT_EPROTO when it is not a JSON error
 * (libmicrohttpd's own pages for 414, 431 and malformed HTTP). */
static int api_error(evd_client_t *c) {
  evd_client_err_t e;

  if (evd__client_pools(c))
    return enomem(c);
  if (evd__parse_error(c, &e))
    return eproto(c, c->parse_msg);
  snprintf(c->err_code, sizeof c->err_code, "%s", e.code);
  snprintf(c->err_msg, sizeof c->err_msg, "%s", e.message);
  c->err.rc = EVD_CLIENT_EAPI;
  c->err.status = (int)c->status;
  c->err.code = c->err_code;
  c->err.message = c->err_msg;
  c->err.newest = e.newest;
  return EVD_CLIENT_EAPI;
}

/* Sends the request prepared in c->url and c->body and checks the status:
 * 0 for a 2xx answer (with the pools ready for parsing it), else the
 * call's error. */
static int exchange(evd_client_t *c, evd__method_t m, bool may_repeat) {
  int rc = evd__client_send(c, m, may_repeat);

  if (rc != 0)
    return rc;
  if (c->status >= 400)
    return api_error(c);
  if (c->status < 200 || c->status > 299)
    return eproto(c, "an unexpected status");
  if (evd__client_pools(c))
    return enomem(c);
  return 0;
}

static int read_answer(evd_client_t *c, unsigned required, evd_answer_t *out) {
  evd_answer_t scratch;

  if (out == NULL)
    out = &scratch;
  if (evd__parse_answer(c, required, out))
    return eproto(c, c->parse_msg);
  if (out->replayed)
    c->stats.replayed++;
  return 0;
}

static int read_view(evd_client_t *c, evd_view_t *out) {
  evd_view_t scratch;

  if (out == NULL)
    out = &scratch;
  if (evd__parse_view(c, out))
    return eproto(c, c->parse_msg);
  out->created = c->status == 201;
  return 0;
}

/* ---- the operations ----------------------------------------------------- */

int evd_client_health(evd_client_t *c) {
  int rc;

  if ((rc = put_url(c, "/healthz", NULL, NULL)) != 0 ||
      (rc = exchange(c, EVD__GET, true)) != 0)
    return rc;
  return c->status == 200 ? 0 : eproto(c, "/healthz did not answer 200");
}

int evd_client_create(evd_client_t *c, const char *session,
                      const evd_session_cfg_t *cfg, evd_view_t *out) {
  static const evd_session_cfg_t defaults = EVD_SESSION_CFG_DEFAULT;
  bool first = true;
  char *p;
  int rc;

  if ((rc = session_url(c, session, "")) != 0)
    return rc;
  c->body.len = 0;
  if (evd__cbuf_reserve(&c->body, 128))
    return enomem(c);
  p = c->body.p;
  *p++ = '{';
  p = w_cfg(p, cfg != NULL ? cfg : &defaults, &first);
  *p++ = '}';
  c->body.len = (size_t)(p - c->body.p);
  if ((rc = exchange(c, EVD__PUT, true)) != 0)
    return rc;
  return read_view(c, out);
}

int evd_client_step(evd_client_t *c, const evd_step_t *step,
                    evd_answer_t *out) {
  int rc;

  if ((rc = check_step(c, step)) != 0 ||
      (rc = session_url(c, step->session, "/step")) != 0)
    return rc;
  c->body.len = 0;
  if ((rc = put_step(c, step, false)) != 0 ||
      (rc = exchange(c, EVD__POST, true)) != 0)
    return rc;
  return read_answer(c, EVD__F_VICTIMS | EVD__F_SLOTS | EVD__F_SIZE |
                            EVD__F_NEWEST, out);
}

int evd_client_commit(evd_client_t *c, const char *session, uint32_t newest,
                      evd_answer_t *out) {
  int rc;

  if ((rc = session_url(c, session, "/commit")) != 0 ||
      (rc = put_int_body(c, "newest", newest)) != 0 ||
      (rc = exchange(c, EVD__POST, true)) != 0)
    return rc;
  return read_answer(c, EVD__F_VICTIMS | EVD__F_DROPPED | EVD__F_SIZE |
                            EVD__F_NEWEST, out);
}

int evd_client_truncate(evd_client_t *c, const char *session, uint32_t from,
                        evd_answer_t *out) {
  int rc;

  if ((rc = session_url(c, session, "/truncate")) != 0 ||
      (rc = put_int_body(c, "from", from)) != 0 ||
      (rc = exchange(c, EVD__POST, true)) != 0)
    return rc;
  return read_answer(c, EVD__F_REMOVED | EVD__F_SIZE | EVD__F_NEWEST, out);
}

int evd_client_fork(evd_client_t *c, const char *session, const char *into,
                    evd_view_t *out) {
  char *p;
  int rc;

  if (into == NULL)
    return einval(c, "A fork needs the new session's id (into).");
  if ((rc = session_url(c, session, "/fork")) != 0)
    return rc;
  c->body.len = 0;
  if (evd__cbuf_reserve(&c->body, str_room(into) + 16))
    return enomem(c);
  p = W_LIT(c->body.p, "{\"into\":");
  p = w_str(p, into);
  *p++ = '}';
  c->body.len = (size_t)(p - c->body.p);
  if ((rc = exchange(c, EVD__POST, true)) != 0)
    return rc;
  return read_view(c, out);
}

int evd_client_evict(evd_client_t *c, const char *session, int64_t budget,
                     evd_answer_t *out) {
  int rc;

  /* Never sent again once it may have been delivered: see transport.c. */
  if ((rc = session_url(c, session, "/evict")) != 0 ||
      (rc = put_int_body(c, "budget", budget)) != 0 ||
      (rc = exchange(c, EVD__POST, false)) != 0)
    return rc;
  return read_answer(c, EVD__F_VICTIMS | EVD__F_SIZE, out);
}

int evd_client_get(evd_client_t *c, const char *session, evd_view_t *out) {
  int rc;

  c->body.len = 0;
  if ((rc = session_url(c, session, "")) != 0 ||
      (rc = exchange(c, EVD__GET, true)) != 0)
    return rc;
  return read_view(c, out);
}

int evd_client_delete(evd_client_t *c, const char *session, bool missing_ok) {
  int rc;

  c->body.len = 0;
  if ((rc = session_url(c, session, "")) != 0)
    return rc;
  rc = exchange(c, EVD__DELETE, true);
  if (rc == EVD_CLIENT_EAPI && missing_ok && c->status == 404 &&
      strcmp(c->err.code, "unknown_session") == 0)
    return 0;
  return rc;
}

/* Whether a batch names a session twice (then it is never sent again:
 * only a session's last step is replayed). Asked only when a batch's
 * connection failed, so the sort's allocation is off the hot path. */
static int cmp_ids(const void *a, const void *b) {
  return strcmp(*(const char *const *)a, *(const char *const *)b);
}

bool evd__batch_repeatable(const evd_step_t *steps, size_t n) {
  const char **ids;
  bool ok = true;
  size_t i;

  if (n < 2)
    return true;
  if ((ids = malloc(n * sizeof *ids)) == NULL)
    return false;
  for (i = 0; i < n; i++)
    ids[i] = steps[i].session;
  qsort(ids, n, sizeof *ids, cmp_ids);
  for (i = 1; i < n && ok; i++)
    ok = strcmp(ids[i - 1], ids[i]) != 0;
  free(ids);
  return ok;
}

int evd_client_batch(evd_client_t *c, const evd_step_t *steps, size_t n,
                     evd_batch_result_t *out) {
  size_t i, replayed = 0;
  int rc;

  if (n > 0 && (steps == NULL || out == NULL))
    return einval(c, "A batch of n > 0 steps needs steps and out.");
  for (i = 0; i < n; i++)
    if ((rc = check_step(c, &steps[i])) != 0)
      return rc;
  if ((rc = put_url(c, "/step", NULL, NULL)) != 0)
    return rc;
  c->body.len = 0;
  if (evd__cbuf_reserve(&c->body, 16))
    return enomem(c);
  memcpy(c->body.p, "{\"steps\":[", 10);
  c->body.len = 10;
  for (i = 0; i < n; i++) {
    if ((rc = put_step(c, &steps[i], true)) != 0)
      return rc;
    c->body.p[c->body.len++] = ','; /* put_step reserved room for it */
  }
  if (n > 0)
    c->body.len--;
  if (evd__cbuf_reserve(&c->body, 2))
    return enomem(c);
  c->body.p[c->body.len++] = ']';
  c->body.p[c->body.len++] = '}';
  c->batch_steps = steps;
  c->batch_n = n;
  rc = exchange(c, EVD__POST, true);
  c->batch_steps = NULL;
  if (rc != 0)
    return rc;
  if (evd__parse_batch(c, out, n))
    return eproto(c, c->parse_msg);
  for (i = 0; i < n; i++)
    replayed += out[i].rc == 0 && out[i].answer.replayed;
  c->stats.replayed += replayed;
  return 0;
}

/* The C client's requests: URLs with the session id escaped, and the JSON
 * bodies written by hand into one reusable buffer (no library, no
 * allocation once the buffer is warm). */
#include "client_int.h"

#include <string.h>

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

int evd__check_step(evd_client_t *c, const evd_step_t *s) {
  if (s == NULL || s->session == NULL)
    return evd__einval(c, "A step needs a session id.");
  if (s->n_positions > 0 && s->positions == NULL)
    return evd__einval(c, "A step's positions are NULL.");
  if (s->n_positions == 0 && !s->has_commit)
    return evd__einval(c, "A step needs positions, or a commit.");
  return 0;
}

/* A step's body, or a batch item with "session" first, appended to the
 * body buffer. */
int evd__put_step(evd_client_t *c, const evd_step_t *s, bool item) {
  size_t need = 256 + s->n_positions * 11 +
                (item ? str_room(s->session) : 0);
  bool first = true;
  char *p;
  size_t i;

  if (evd__cbuf_reserve(&c->body, need))
    return evd__enomem(c);
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
  if (s->has_expect) {
    p = first ? W_LIT(p, "\"expect_newest\":")
              : W_LIT(p, ",\"expect_newest\":");
    p = w_u64(p, s->expect_newest);
  }
  *p++ = '}';
  c->body.len = (size_t)(p - c->body.p);
  return 0;
}

/* c->url = base + path, with the session id (if any) percent-escaped
 * where it is not an id's byte: the daemon then answers
 * invalid_session_id, where an unescaped '/' or '?' would name another
 * path. */
int evd__put_url(evd_client_t *c, const char *path, const char *session,
                 const char *suffix) {
  static const char hex[] = "0123456789ABCDEF";
  size_t need = c->base_len + strlen(path) + 1 +
                (session ? strlen(session) * 3 + strlen(suffix) : 0);
  char *p;

  /* Every operation writes its URL first: a request in flight keeps its
   * URL and body (a resend needs them) and refuses any other. */
  if (c->inflight)
    return evd__einval(c, "A batch sent with evd_client_batch_send is in "
                          "flight: read its answer (evd_client_batch_recv) "
                          "first.");
  c->url.len = 0;
  if (evd__cbuf_reserve(&c->url, need))
    return evd__enomem(c);
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

int evd__session_url(evd_client_t *c, const char *session,
                     const char *suffix) {
  if (session == NULL)
    return evd__einval(c, "The session id is NULL.");
  return evd__put_url(c, "/session/", session, suffix);
}

/* ,"expect_newest":e when e >= 0. */
static char *w_expect(char *p, int64_t expect, bool first) {
  if (expect < 0)
    return p;
  p = first ? W_LIT(p, "\"expect_newest\":") : W_LIT(p, ",\"expect_newest\":");
  return w_u64(p, (uint64_t)expect);
}

/* expect_newest, when given, is a position. */
static int check_expect(evd_client_t *c, int64_t expect) {
  if (expect != EVD_NO_EXPECT && (expect < 0 || expect > UINT32_MAX))
    return evd__einval(c, "expect_newest is a position (0..4294967295) or "
                          "EVD_NO_EXPECT.");
  return 0;
}

int evd__put_int_body(evd_client_t *c, const char *key, int64_t v,
                      int64_t expect) {
  char *p;
  int rc;

  if ((rc = check_expect(c, expect)) != 0)
    return rc;
  c->body.len = 0;
  if (evd__cbuf_reserve(&c->body, strlen(key) + 64))
    return evd__enomem(c);
  p = c->body.p;
  *p++ = '{';
  if (v >= 0) {
    *p++ = '"';
    memcpy(p, key, strlen(key));
    p += strlen(key);
    p = W_LIT(p, "\":");
    p = w_u64(p, (uint64_t)v);
  }
  p = w_expect(p, expect, v < 0);
  *p++ = '}';
  c->body.len = (size_t)(p - c->body.p);
  return 0;
}

int evd__put_create(evd_client_t *c, const evd_session_cfg_t *cfg) {
  static const evd_session_cfg_t defaults = EVD_SESSION_CFG_DEFAULT;
  bool first = true;
  char *p;

  c->body.len = 0;
  if (evd__cbuf_reserve(&c->body, 128))
    return evd__enomem(c);
  p = c->body.p;
  *p++ = '{';
  p = w_cfg(p, cfg != NULL ? cfg : &defaults, &first);
  *p++ = '}';
  c->body.len = (size_t)(p - c->body.p);
  return 0;
}

int evd__put_fork(evd_client_t *c, const char *into, int64_t expect) {
  char *p;
  int rc;

  if (into == NULL)
    return evd__einval(c, "A fork needs the new session's id (into).");
  if ((rc = check_expect(c, expect)) != 0)
    return rc;
  c->body.len = 0;
  if (evd__cbuf_reserve(&c->body, str_room(into) + 48))
    return evd__enomem(c);
  p = W_LIT(c->body.p, "{\"into\":");
  p = w_str(p, into);
  p = w_expect(p, expect, false);
  *p++ = '}';
  c->body.len = (size_t)(p - c->body.p);
  return 0;
}

int evd__put_batch(evd_client_t *c, const evd_step_t *steps, size_t n) {
  size_t i;
  int rc;

  for (i = 0; i < n; i++)
    if ((rc = evd__check_step(c, &steps[i])) != 0)
      return rc;
  c->body.len = 0;
  if (evd__cbuf_reserve(&c->body, 16))
    return evd__enomem(c);
  memcpy(c->body.p, "{\"steps\":[", 10);
  c->body.len = 10;
  for (i = 0; i < n; i++) {
    if ((rc = evd__put_step(c, &steps[i], true)) != 0)
      return rc;
    c->body.p[c->body.len++] = ','; /* put_step reserved room for it */
  }
  if (n > 0)
    c->body.len--;
  if (evd__cbuf_reserve(&c->body, 2))
    return evd__enomem(c);
  c->body.p[c->body.len++] = ']';
  c->body.p[c->body.len++] = '}';
  return 0;
}

/* "key":[v0,v1,...], after a comma unless it is the first field. */
static char *w_list(char *p, const char *key, const uint32_t *v, size_t n,
                    bool *first) {
  size_t i;

  if (!*first)
    *p++ = ',';
  *first = false;
  *p++ = '"';
  memcpy(p, key, strlen(key));
  p += strlen(key);
  p = W_LIT(p, "\":[");
  for (i = 0; i < n; i++) {
    if (i > 0)
      *p++ = ',';
    p = w_u64(p, v[i]);
  }
  *p++ = ']';
  return p;
}

int evd__put_adopt(evd_client_t *c, const evd_adopt_t *st) {
  static const evd_session_cfg_t defaults = EVD_SESSION_CFG_DEFAULT;
  size_t n = st->n_kept + (st->slots ? st->n_kept : 0) +
             (st->pages ? st->n_pages : 0);
  bool first = true;
  char *p;

  if ((st->n_kept > 0 && st->kept == NULL) ||
      (st->n_pages > 0 && st->pages == NULL))
    return evd__einval(c, "An adopted state's kept (or pages) are NULL.");
  c->body.len = 0;
  if (n > (SIZE_MAX - 256) / 11 || evd__cbuf_reserve(&c->body, 256 + n * 11))
    return evd__enomem(c);
  p = c->body.p;
  *p++ = '{';
  p = w_cfg(p, st->cfg != NULL ? st->cfg : &defaults, &first);
  p = w_list(p, "kept", st->kept, st->n_kept, &first);
  p = W_LIT(p, ",\"newest\":");
  p = w_u64(p, st->newest);
  if (st->slots != NULL)
    p = w_list(p, "slots", st->slots, st->n_kept, &first);
  if (st->pages != NULL)
    p = w_list(p, "pages", st->pages, st->n_pages, &first);
  if (st->replace)
    p = W_LIT(p, ",\"replace\":true");
  *p++ = '}';
  c->body.len = (size_t)(p - c->body.p);
  return 0;
}

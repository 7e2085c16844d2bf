/* Answers written back, compared and checked (rewrite.h): plain loops over
 * the structs, written apart from the reader so that a mistake in one is
 * not repeated in the other. */
#include "rewrite.h"

#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

void rw_free(rw_buf_t *b) {
  free(b->p);
  memset(b, 0, sizeof *b);
}

static void put(rw_buf_t *b, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));

static void put(rw_buf_t *b, const char *fmt, ...) {
  va_list ap;
  int n;

  for (;;) {
    size_t room = b->cap - b->len;
    va_start(ap, fmt);
    n = vsnprintf(b->p ? b->p + b->len : NULL, room, fmt, ap);
    va_end(ap);
    if (n < 0) {
      b->failed = true;
      return;
    }
    if ((size_t)n < room) {
      b->len += (size_t)n;
      return;
    }
    {
      size_t cap = (b->cap + (size_t)n + 1) * 2;
      char *p = realloc(b->p, cap);
      if (p == NULL) {
        b->failed = true;
        return;
      }
      b->p = p;
      b->cap = cap;
    }
  }
}

/* A C string as a JSON string: quote, backslash and control bytes
 * escaped, every other byte as it is. */
static void put_str(rw_buf_t *b, const char *s) {
  put(b, "\"");
  for (; *s != '\0'; s++) {
    unsigned char ch = (unsigned char)*s;
    if (ch == '"' || ch == '\\')
      put(b, "\\%c", ch);
    else if (ch < 0x20)
      put(b, "\\u%04x", ch);
    else
      put(b, "%c", ch);
  }
  put(b, "\"");
}

static void put_list(rw_buf_t *b, const char *key, evd_list_t l) {
  size_t i;

  put(b, "\"%s\":[", key);
  for (i = 0; i < l.n; i++)
    put(b, "%s%u", i ? "," : "", l.v[i]);
  put(b, "]");
}

void rw_answer(rw_buf_t *b, const evd_answer_t *a) {
  put(b, "{");
  put_list(b, "victims", a->victims);
  put(b, ",");
  put_list(b, "slots", a->slots);
  put(b, ",\"size\":%u,\"newest\":%u,", a->size, a->newest);
  put_list(b, "dropped", a->dropped);
  put(b, ",");
  put_list(b, "removed", a->removed);
  put(b, ",");
  put_list(b, "pages_new", a->pages_new);
  put(b, ",");
  put_list(b, "pages_freed", a->pages_freed);
  put(b, ",");
  put_list(b, "pages_transient", a->pages_transient);
  if (a->replayed)
    put(b, ",\"replayed\":true");
  put(b, "}");
}

void rw_view(rw_buf_t *b, const evd_view_t *v) {
  put(b, "{\"id\":");
  put_str(b, v->id);
  put(b,
      ",\"budget\":%u,\"sinks\":%u,\"lookahead\":%u,\"page_size\":%u,"
      "\"size\":%u,\"newest\":%u,",
      v->budget, v->sinks, v->lookahead, v->page_size, v->size, v->newest);
  put_list(b, "kept", v->kept);
  put(b, ",");
  put_list(b, "slots", v->slots);
  put(b, ",");
  put_list(b, "tentative", v->tentative);
  put(b, ",");
  put_list(b, "pages", v->pages);
  put(b, "}");
}

void rw_error(rw_buf_t *b, const evd_client_err_t *e) {
  put(b, "{\"error\":{\"code\":");
  put_str(b, e->code);
  put(b, ",\"message\":");
  put_str(b, e->message);
  if (e->newest >= 0)
    put(b, ",\"newest\":%lld", (long long)e->newest);
  if (e->status != 0)
    put(b, ",\"status\":%d", e->status);
  put(b, "}}");
}

void rw_batch(rw_buf_t *b, const evd_batch_result_t *r, size_t n) {
  size_t i;

  put(b, "{\"results\":[");
  for (i = 0; i < n; i++) {
    if (i > 0)
      put(b, ",");
    if (r[i].rc == 0)
      rw_answer(b, &r[i].answer);
    else
      rw_error(b, &r[i].error);
  }
  put(b, "]}");
}

/* ---- comparing ---------------------------------------------------------- */

static bool same_list(evd_list_t x, evd_list_t y) {
  return x.n == y.n && (x.n == 0 || memcmp(x.v, y.v, x.n * sizeof *x.v) == 0);
}

static bool same_str(const char *x, const char *y) {
  return x != NULL && y != NULL && strcmp(x, y) == 0;
}

const char *rw_answer_diff(const evd_answer_t *x, const evd_answer_t *y) {
  if (!same_list(x->victims, y->victims))
    return "victims";
  if (!same_list(x->slots, y->slots))
    return "slots";
  if (!same_list(x->dropped, y->dropped))
    return "dropped";
  if (!same_list(x->removed, y->removed))
    return "removed";
  if (!same_list(x->pages_new, y->pages_new))
    return "pages_new";
  if (!same_list(x->pages_freed, y->pages_freed))
    return "pages_freed";
  if (!same_list(x->pages_transient, y->pages_transient))
    return "pages_transient";
  if (x->size != y->size)
    return "size";
  if (x->newest != y->newest)
    return "newest";
  if (x->replayed != y->replayed)
    return "replayed";
  return NULL;
}

const char *rw_view_diff(const evd_view_t *x, const evd_view_t *y) {
  if (!same_str(x->id, y->id))
    return "id";
  if (x->budget != y->budget || x->sinks != y->sinks ||
      x->lookahead != y->lookahead || x->page_size != y->page_size)
    return "configuration";
  if (x->size != y->size)
    return "size";
  if (x->newest != y->newest)
    return "newest";
  if (!same_list(x->kept, y->kept))
    return "kept";
  if (!same_list(x->slots, y->slots))
    return "slots";
  if (!same_list(x->tentative, y->tentative))
    return "tentative";
  if (!same_list(x->pages, y->pages))
    return "pages";
  return NULL;
}

const char *rw_error_diff(const evd_client_err_t *x,
                          const evd_client_err_t *y) {
  if (x->rc != y->rc)
    return "rc";
  if (x->status != y->status)
    return "status";
  if (!same_str(x->code, y->code))
    return "code";
  if (!same_str(x->message, y->message))
    return "message";
  if (x->newest != y->newest)
    return "newest";
  return NULL;
}

const char *rw_batch_diff(const evd_batch_result_t *x,
                          const evd_batch_result_t *y, size_t n) {
  const char *d;
  size_t i;

  for (i = 0; i < n; i++) {
    if (x[i].rc != y[i].rc)
      return "an item's rc";
    if ((d = rw_answer_diff(&x[i].answer, &y[i].answer)) != NULL)
      return d;
    if ((d = rw_error_diff(&x[i].error, &y[i].error)) != NULL)
      return d;
  }
  return NULL;
}

/* ---- invariants --------------------------------------------------------- */

/* v is NULL exactly when n is 0 (client.h). */
static bool well_formed(evd_list_t l) {
  return (l.n == 0) == (l.v == NULL);
}

static bool ascending(evd_list_t l) {
  size_t i;

  for (i = 1; i < l.n; i++)
    if (l.v[i] <= l.v[i - 1])
      return false;
  return true;
}

static bool contains(evd_list_t l, uint32_t x) {
  size_t i;

  for (i = 0; i < l.n; i++)
    if (l.v[i] == x)
      return true;
  return false;
}

static bool disjoint(evd_list_t x, evd_list_t y) {
  size_t i;

  for (i = 0; i < x.n; i++)
    if (contains(y, x.v[i]))
      return false;
  return true;
}

const char *rw_answer_broken(const evd_answer_t *a) {
  const evd_list_t all[] = {a->victims,   a->slots,     a->dropped,
                            a->removed,   a->pages_new, a->pages_freed,
                            a->pages_transient};
  size_t i;

  for (i = 0; i < sizeof all / sizeof all[0]; i++) {
    if (!well_formed(all[i]))
      return "a list whose v and n disagree";
    if (i != 1 && !ascending(all[i]))
      return "a list that is not strictly ascending";
  }
  if (!disjoint(a->pages_new, a->pages_freed) ||
      !disjoint(a->pages_new, a->pages_transient) ||
      !disjoint(a->pages_freed, a->pages_transient))
    return "pages lists that share a page";
  return NULL;
}

const char *rw_view_broken(const evd_view_t *v) {
  const evd_list_t all[] = {v->kept, v->slots, v->tentative, v->pages};
  size_t i, t = v->tentative.n;

  if (v->id == NULL)
    return "no id";
  for (i = 0; i < sizeof all / sizeof all[0]; i++) {
    if (!well_formed(all[i]))
      return "a list whose v and n disagree";
    if (i != 1 && !ascending(all[i]))
      return "a list that is not strictly ascending";
  }
  if (v->slots.n != v->kept.n || v->size != v->kept.n)
    return "slots or size not the count of kept";
  if (v->kept.n > 0 && v->newest < v->kept.v[v->kept.n - 1])
    return "newest below a kept position";
  if (t > v->kept.n)
    return "more tentative than kept";
  for (i = 0; i < t; i++)
    if (v->tentative.v[i] != v->kept.v[v->kept.n - t + i])
      return "tentative not the newest kept";
  if (v->page_size == 0)
    return v->pages.n == 0 ? NULL : "pages without page_size";
  for (i = 0; i < v->kept.n; i++)
    if (!contains(v->pages, v->kept.v[i] / v->page_size))
      return "a kept position whose page is not in pages";
  for (i = 0; i < v->pages.n; i++) {
    size_t k;
    bool used = false;
    for (k = 0; k < v->kept.n && !used; k++)
      used = v->kept.v[k] / v->page_size == v->pages.v[i];
    if (!used)
      return "a page that holds no kept position";
  }
  return NULL;
}

const char *rw_error_broken(const evd_client_err_t *e, bool item) {
  if (e->rc != EVD_CLIENT_EAPI)
    return "an error whose rc is not EVD_CLIENT_EAPI";
  if (e->code == NULL || e->message == NULL)
    return "an error without code or message";
  if (e->newest < -1 || e->newest > (int64_t)UINT32_MAX)
    return "an error's newest out of range";
  if (e->status < 0 || e->status > 599 || (item && e->status < 400))
    return "an error's status out of range";
  return NULL;
}

const char *rw_batch_broken(const evd_batch_result_t *r, size_t n) {
  static const evd_answer_t empty;
  const char *why;
  size_t i;

  for (i = 0; i < n; i++) {
    if (r[i].rc == 0) {
      if ((why = rw_answer_broken(&r[i].answer)) != NULL)
        return why;
      if (r[i].error.rc != 0 || !same_str(r[i].error.code, "") ||
          !same_str(r[i].error.message, "") || r[i].error.newest != -1)
        return "an answered item with an error";
    } else if (r[i].rc == EVD_CLIENT_EAPI) {
      if ((why = rw_error_broken(&r[i].error, true)) != NULL)
        return why;
      if (rw_answer_diff(&r[i].answer, &empty) != NULL)
        return "a refused item with an answer";
    } else {
      return "an item whose rc is neither 0 nor EVD_CLIENT_EAPI";
    }
  }
  return NULL;
}

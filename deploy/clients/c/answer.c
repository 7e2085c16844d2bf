/* The C client's answer reader (reader.h): the daemon's JSON answers read
 * in one pass straight into the arena it is given, with no tree and no
 * allocation. Exact: anything that is not JSON, not the contract's shape,
 * or breaking the contract's invariants, is refused.
 *
 * Why not jansson, which the daemon uses: parsing one 256-item batch answer
 * (15.8 KB) into a jansson tree took 513 us on the development machine,
 * several times the daemon's own time for the whole batch (~90 us), because
 * jansson allocates every object, key and integer. This parser reads the
 * same answer in a few microseconds; `make bench-client` prints both. */
#include "json.h"

#include <stdio.h>
#include <string.h>

/* An array of integers 0..4294967295 into the arena; strictly ascending
 * when `ascending` (every list but slots). */
static int list(jp_t *j, evd_list_t *out, bool ascending) {
  evd__arena_t *a = j->r->arena;
  uint32_t *v = a->u32 + a->u32_len;
  size_t n = 0, room = a->u32_cap - a->u32_len;
  int r;

  out->v = NULL;
  out->n = 0;
  if (!jp_eat(j, '['))
    return jp_fail(j, "expected an array of integers");
  while ((r = jp_next_elem(j, &n)) > 0) {
    if (n > room)
      return jp_fail(j, "more numbers than the answer holds"); /* cannot */
    if (jp_u32(j, &v[n - 1]))
      return -1;
    if (ascending && n > 1 && v[n - 1] <= v[n - 2])
      return jp_fail(j, "a list that is not strictly ascending");
  }
  if (r < 0)
    return -1;
  a->u32_len += n;
  if (n > 0) {
    out->v = v;
    out->n = n;
  }
  return 0;
}

/* An error object (the value of "error"). Batch items carry a status. */
static int error_obj(jp_t *j, evd_client_err_t *e, bool item) {
  char key[16];
  int r, nk = 0;
  uint64_t x = 0;

  e->rc = EVD_CLIENT_EAPI;
  e->status = 0;
  e->code = e->message = NULL;
  e->newest = -1;
  if (!jp_eat(j, '{'))
    return jp_fail(j, "\"error\" is not an object");
  while ((r = evd__jp_next_key(j, &nk, key, sizeof key)) > 0) {
    if (strcmp(key, "code") == 0)
      r = evd__jp_pool_str(j, &e->code);
    else if (strcmp(key, "message") == 0)
      r = evd__jp_pool_str(j, &e->message);
    else if (strcmp(key, "newest") == 0) {
      r = jp_integer(j, UINT32_MAX, &x);
      e->newest = (int64_t)x;
    } else if (strcmp(key, "status") == 0) {
      r = jp_integer(j, 599, &x);
      e->status = (int)x;
    } else
      r = evd__jp_skip(j);
    if (r)
      return -1;
  }
  if (r < 0)
    return -1;
  if (e->code == NULL)
    return jp_fail(j, "an error without \"code\"");
  if (e->message == NULL)
    return jp_fail(j, "an error without \"message\"");
  if (item && e->status < 400)
    return jp_fail(j, "a batch item's error without a 4xx/5xx \"status\"");
  return 0;
}

/* The bit of a list field of step, commit, truncate and evict answers, and
 * where it goes. The pages lists have no bit: a daemon without pages (or
 * older than pages_transient) leaves them out, and they stay empty. */
static evd_list_t *answer_list(evd_answer_t *a, const char *key,
                               unsigned *bit) {
  *bit = 0;
  switch (key[0]) {
  case 'v':
    if (strcmp(key, "victims") == 0)
      return *bit = EVD__F_VICTIMS, &a->victims;
    break;
  case 's':
    if (strcmp(key, "slots") == 0)
      return *bit = EVD__F_SLOTS, &a->slots;
    break;
  case 'd':
    if (strcmp(key, "dropped") == 0)
      return *bit = EVD__F_DROPPED, &a->dropped;
    break;
  case 'r':
    if (strcmp(key, "removed") == 0)
      return *bit = EVD__F_REMOVED, &a->removed;
    break;
  case 'p':
    if (strcmp(key, "pages_new") == 0)
      return &a->pages_new;
    if (strcmp(key, "pages_freed") == 0)
      return &a->pages_freed;
    if (strcmp(key, "pages_transient") == 0)
      return &a->pages_transient;
    break;
  }
  return NULL;
}

/* The object of a step, commit, truncate or evict answer, or of a batch
 * item (which may be {"error":{...}} instead: *is_err, when err is not
 * NULL). *seen gets the EVD__F_* bits of the fields present. */
static int answer_obj(jp_t *j, evd_answer_t *a, unsigned *seen,
                      evd_client_err_t *err, bool *is_err) {
  char key[24]; /* the longest key read, "pages_transient", is 15 bytes */
  int r, nk = 0;
  unsigned bit;
  evd_list_t *l;

  memset(a, 0, sizeof *a);
  *seen = 0;
  if (!jp_eat(j, '{'))
    return jp_fail(j, "expected an object");
  while ((r = evd__jp_next_key(j, &nk, key, sizeof key)) > 0) {
    if ((l = answer_list(a, key, &bit)) != NULL) {
      r = list(j, l, bit != EVD__F_SLOTS);
      *seen |= bit;
    } else if (strcmp(key, "size") == 0) {
      r = jp_u32(j, &a->size);
      *seen |= EVD__F_SIZE;
    } else if (strcmp(key, "newest") == 0) {
      r = jp_u32(j, &a->newest);
      *seen |= EVD__F_NEWEST;
    } else if (strcmp(key, "replayed") == 0) {
      r = evd__jp_bool(j, &a->replayed);
    } else if (err != NULL && strcmp(key, "error") == 0) {
      r = error_obj(j, err, true);
      *is_err = true;
    } else {
      r = evd__jp_skip(j);
    }
    if (r)
      return -1;
  }
  return r;
}

/* The first field of `required` missing from `seen`, for the message. */
static int missing(jp_t *j, unsigned required, unsigned seen) {
  static const char *const names[] = {
      "an answer without \"victims\"", "an answer without \"slots\"",
      "an answer without \"dropped\"", "an answer without \"removed\"",
      "an answer without \"size\"",    "an answer without \"newest\""};
  unsigned i;

  if ((seen & required) == required)
    return 0;
  for (i = 0; i < sizeof names / sizeof names[0]; i++)
    if ((required & (1u << i)) && !(seen & (1u << i)))
      return jp_fail(j, names[i]);
  return 0;
}

/* Whether two ascending lists share no entry. */
static bool disjoint(evd_list_t x, evd_list_t y) {
  size_t i = 0, k = 0;

  while (i < x.n && k < y.n) {
    if (x.v[i] == y.v[k])
      return false;
    if (x.v[i] < y.v[k])
      i++;
    else
      k++;
  }
  return true;
}

/* An answer's fields, then what ties them: the pages lists disjoint (each
 * list's order is checked as it is read). */
static int answer_checked(jp_t *j, evd_answer_t *a, unsigned required,
                          unsigned seen) {
  if (missing(j, required, seen))
    return -1;
  if (a->pages_new.n + a->pages_freed.n + a->pages_transient.n > 0 &&
      (!disjoint(a->pages_new, a->pages_freed) ||
       !disjoint(a->pages_new, a->pages_transient) ||
       !disjoint(a->pages_freed, a->pages_transient)))
    return jp_fail(j, "a page in two of pages_new, pages_freed and "
                      "pages_transient");
  return 0;
}

static void begin(jp_t *j, evd__reader_t *r) {
  j->r = r;
  j->s = j->p = r->s;
  j->end = r->s + r->len;
  j->why = NULL;
  j->depth = 0;
  r->why[0] = '\0';
}

/* Checks that nothing but whitespace follows, and on failure writes what
 * and where into the reader's why. Returns rc (0 or -1). */
static int end(jp_t *j, int rc) {
  char excerpt[48];
  size_t at, i, n;

  if (rc == 0) {
    jp_ws(j);
    if (j->p == j->end)
      return 0;
    jp_fail(j, "bytes after the answer");
  }
  if (j->why == NULL)
    j->why = "not the contract's answer";
  at = (size_t)(j->p - j->s);
  n = (size_t)(j->end - j->p);
  n = n < sizeof excerpt - 1 ? n : sizeof excerpt - 1;
  for (i = 0; i < n; i++) {
    unsigned char ch = (unsigned char)j->p[i];
    excerpt[i] = ch >= 0x20 && ch < 0x7F ? (char)ch : '.';
  }
  excerpt[n] = '\0';
  snprintf(j->r->why, sizeof j->r->why, "%s at byte %zu of %zu (\"%s\")",
           j->why, at, (size_t)(j->end - j->s), excerpt);
  return -1;
}

int evd__read_answer(evd__reader_t *r, unsigned required, evd_answer_t *out) {
  jp_t j;
  unsigned seen;
  int rc;

  begin(&j, r);
  rc = answer_obj(&j, out, &seen, NULL, NULL);
  if (rc == 0)
    rc = answer_checked(&j, out, required, seen);
  return end(&j, rc);
}

int evd__read_batch(evd__reader_t *rd, evd_batch_result_t *out, size_t n) {
  static const evd_client_err_t none = {0, 0, "", "", -1};
  char key[16];
  int r, nk = 0;
  size_t i = 0;
  bool results = false;
  jp_t j;

  begin(&j, rd);
  if (!jp_eat(&j, '{'))
    return end(&j, jp_fail(&j, "expected an object"));
  while ((r = evd__jp_next_key(&j, &nk, key, sizeof key)) > 0) {
    if (strcmp(key, "results") != 0 || results) {
      if (evd__jp_skip(&j))
        return end(&j, -1);
      continue;
    }
    results = true;
    if (!jp_eat(&j, '['))
      return end(&j, jp_fail(&j, "\"results\" is not an array"));
    while ((r = jp_next_elem(&j, &i)) > 0) {
      evd_batch_result_t *res = &out[i - 1];
      bool is_err = false;
      unsigned seen;

      if (i > n)
        return end(&j, jp_fail(&j, "more results than the batch has items"));
      res->error = none;
      if (answer_obj(&j, &res->answer, &seen, &res->error, &is_err))
        return end(&j, -1);
      if (is_err) {
        memset(&res->answer, 0, sizeof res->answer);
        res->rc = EVD_CLIENT_EAPI;
      } else {
        if (answer_checked(&j, &res->answer,
                           EVD__F_VICTIMS | EVD__F_SLOTS | EVD__F_SIZE |
                               EVD__F_NEWEST,
                           seen))
          return end(&j, -1);
        res->rc = 0;
      }
    }
    if (r < 0)
      return end(&j, -1);
    if (i != n)
      return end(&j, jp_fail(&j, "fewer results than the batch has items"));
  }
  if (r < 0)
    return end(&j, -1);
  if (!results)
    return end(&j, jp_fail(&j, "a batch answer without \"results\""));
  return end(&j, 0);
}

/* What ties a view's fields together (see reader.h). */
static const char *view_broken(const evd_view_t *v) {
  size_t i, k = 0, t = v->tentative.n;

  if (v->slots.n != v->kept.n)
    return "a session view whose slots are not one per kept position";
  if (v->size != v->kept.n)
    return "a session view whose size is not the count of kept positions";
  if (v->kept.n > 0 && v->newest < v->kept.v[v->kept.n - 1])
    return "a session view whose newest is below a kept position";
  if (t > v->kept.n ||
      (t > 0 && memcmp(v->tentative.v, v->kept.v + v->kept.n - t,
                       t * sizeof *v->kept.v) != 0))
    return "a session view whose tentative are not the newest kept";
  if (v->page_size == 0)
    return v->pages.n > 0 ? "a session view with pages but no page_size"
                          : NULL;
  for (i = 0; i < v->kept.n; i++) {
    uint32_t page = v->kept.v[i] / v->page_size;
    if (i > 0 && page == v->kept.v[i - 1] / v->page_size)
      continue;
    if (k >= v->pages.n || v->pages.v[k] != page)
      return "a session view whose pages are not those of its kept";
    k++;
  }
  return k == v->pages.n
             ? NULL
             : "a session view whose pages are not those of its kept";
}

int evd__read_view(evd__reader_t *rd, evd_view_t *out) {
  static const struct {
    const char *key;
    size_t off;
  } nums[] = {{"budget", offsetof(evd_view_t, budget)},
              {"sinks", offsetof(evd_view_t, sinks)},
              {"lookahead", offsetof(evd_view_t, lookahead)},
              {"page_size", offsetof(evd_view_t, page_size)},
              {"size", offsetof(evd_view_t, size)},
              {"newest", offsetof(evd_view_t, newest)}};
  static const struct {
    const char *key;
    size_t off;
  } lists[] = {{"kept", offsetof(evd_view_t, kept)},
               {"slots", offsetof(evd_view_t, slots)},
               {"tentative", offsetof(evd_view_t, tentative)},
               {"pages", offsetof(evd_view_t, pages)}};
  /* The bits of `seen` that must be set: id, budget, sinks, size, newest,
   * kept and slots (lookahead, page_size, tentative and pages may be
   * absent: 1, 0, [], []). */
  const unsigned required = 1u | 2u | 4u | 32u | 64u | 128u | 256u;
  static const char *const names[] = {
      "a session view without \"id\"",        "a session view without \"budget\"",
      "a session view without \"sinks\"",     "",
      "",                                     "a session view without \"size\"",
      "a session view without \"newest\"",    "a session view without \"kept\"",
      "a session view without \"slots\""};
  char key[16], *base = (char *)out;
  unsigned seen = 0, i;
  const char *broken;
  int r, nk = 0;
  jp_t j;

  memset(out, 0, sizeof *out);
  out->lookahead = 1;
  begin(&j, rd);
  if (!jp_eat(&j, '{'))
    return end(&j, jp_fail(&j, "expected an object"));
  while ((r = evd__jp_next_key(&j, &nk, key, sizeof key)) > 0) {
    if (strcmp(key, "id") == 0) {
      r = evd__jp_pool_str(&j, &out->id);
      seen |= 1u;
      goto next;
    }
    for (i = 0; i < sizeof nums / sizeof nums[0]; i++) {
      if (strcmp(key, nums[i].key) == 0) {
        r = jp_u32(&j, (uint32_t *)(void *)(base + nums[i].off));
        seen |= 2u << i;
        goto next;
      }
    }
    for (i = 0; i < sizeof lists / sizeof lists[0]; i++) {
      if (strcmp(key, lists[i].key) == 0) {
        r = list(&j, (evd_list_t *)(void *)(base + lists[i].off),
                 lists[i].off != offsetof(evd_view_t, slots));
        seen |= 128u << i;
        goto next;
      }
    }
    r = evd__jp_skip(&j);
  next:
    if (r)
      return end(&j, -1);
  }
  if (r < 0)
    return end(&j, -1);
  for (i = 0; i < sizeof names / sizeof names[0]; i++)
    if ((required & (1u << i)) && !(seen & (1u << i)))
      return end(&j, jp_fail(&j, names[i]));
  if ((broken = view_broken(out)) != NULL)
    return end(&j, jp_fail(&j, broken));
  return end(&j, 0);
}

int evd__read_error(evd__reader_t *rd, evd_client_err_t *err) {
  char key[16];
  int r, nk = 0;
  bool found = false;
  jp_t j;

  begin(&j, rd);
  if (!jp_eat(&j, '{'))
    return end(&j, jp_fail(&j, "an error answer that is not a JSON object"));
  while ((r = evd__jp_next_key(&j, &nk, key, sizeof key)) > 0) {
    if (strcmp(key, "error") == 0 && !found) {
      found = true;
      r = error_obj(&j, err, false);
    } else {
      r = evd__jp_skip(&j);
    }
    if (r)
      return end(&j, -1);
  }
  if (r < 0)
    return end(&j, -1);
  if (!found)
    return end(&j, jp_fail(&j, "an error answer without \"error\""));
  return end(&j, 0);
}

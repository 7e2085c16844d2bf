/* Rendering a chat from its last messages (rcache.h says how, and when it
 * renders the whole list instead). */
#include "serve/shared/rcache.h"

#include <pthread.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

typedef struct kept_s {
  char *key;         /* the request but its messages, as JSON */
  json_t *messages;  /* its messages (a reference) */
  char *prompt;      /* their whole render */
  size_t len;
  uint64_t used;
} kept_t;

struct rcache_s {
  pthread_mutex_t mu;
  kept_t *kept;
  uint32_t n, cap;
  uint64_t tick;
  rcache_stats_t st;
};

static double now(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

rcache_t *rcache_new(uint32_t entries) {
  rcache_t *rc = calloc(1, sizeof(*rc));
  if (rc == NULL)
    return NULL;
  if (pthread_mutex_init(&rc->mu, NULL) != 0) {
    free(rc);
    return NULL;
  }
  if (entries > 0 &&
      (rc->kept = calloc(entries, sizeof(*rc->kept))) == NULL) {
    pthread_mutex_destroy(&rc->mu);
    free(rc);
    return NULL;
  }
  rc->cap = entries;
  return rc;
}

static void kept_free(kept_t *k) {
  free(k->key);
  json_decref(k->messages);
  free(k->prompt);
}

void rcache_free(rcache_t *rc) {
  if (rc == NULL)
    return;
  for (uint32_t i = 0; i < rc->n; i++)
    kept_free(&rc->kept[i]);
  free(rc->kept);
  pthread_mutex_destroy(&rc->mu);
  free(rc);
}

/* up_chat_apply of request: the applied object, or NULL with err. */
static json_t *apply(const up_chat_t *chat, json_t *request, char *err,
                     size_t errlen) {
  char *req = json_dumps(request, JSON_COMPACT), *ans = NULL;
  json_t *out = NULL;
  if (req == NULL) {
    snprintf(err, errlen, "out of memory");
    return NULL;
  }
  if (up_chat_apply(chat, req, &ans, err, errlen) == 0) {
    json_error_t je;
    if ((out = json_loads(ans, 0, &je)) == NULL)
      snprintf(err, errlen, "out of memory");
  }
  free(req);
  free(ans);
  return out;
}

/* The role of message i, or "". */
static const char *role(json_t *messages, size_t i) {
  const char *r = json_string_value(
      json_object_get(json_array_get(messages, i), "role"));
  return r != NULL ? r : "";
}

/* request with messages[0] (when `head`) and messages[s..] alone. */
static json_t *window(json_t *request, json_t *messages, bool head,
                      size_t s) {
  json_t *w = json_copy(request), *list = json_array();
  if (w == NULL || list == NULL) {
    json_decref(w);
    json_decref(list);
    return NULL;
  }
  int bad = head ? json_array_append(list, json_array_get(messages, 0)) : 0;
  for (size_t i = s; i < json_array_size(messages) && bad == 0; i++)
    bad = json_array_append(list, json_array_get(messages, i));
  if (bad != 0 || json_object_set_new(w, "messages", list) != 0) {
    if (bad != 0)
      json_decref(list);
    json_decref(w);
    return NULL;
  }
  return w;
}

/* The bytes a and b share at their ends. */
static size_t common_end(const char *a, size_t na, const char *b,
                         size_t nb) {
  size_t i = 0;
  while (i < na && i < nb && a[na - 1 - i] == b[nb - 1 - i])
    i++;
  return i;
}

/* The bytes a and b share from their start. */
static size_t common_start(const char *a, size_t na, const char *b,
                           size_t nb) {
  size_t i = 0;
  while (i < na && i < nb && a[i] == b[i])
    i++;
  return i;
}

/* The render of new (its applied object, with "prompt" the splice) from
 * the kept render (whole, wlen) of kept's messages, through the windows
 * of both from message s; NULL when a render fails or the windows' heads
 * differ. */
static json_t *splice(const up_chat_t *chat, json_t *request, json_t *kept,
                      const char *whole, size_t wlen, json_t *messages,
                      bool head, size_t s) {
  char err[256];
  json_t *wk = window(request, kept, head, s);
  json_t *wm = window(request, messages, head, s);
  json_t *a = wk != NULL ? apply(chat, wk, err, sizeof(err)) : NULL;
  json_t *b = a != NULL && wm != NULL ? apply(chat, wm, err, sizeof(err))
                                      : NULL;
  json_decref(wk);
  json_decref(wm);
  json_t *pa = json_object_get(a, "prompt"), *pb = json_object_get(b, "prompt");
  json_t *out = NULL;
  if (json_is_string(pa) && json_is_string(pb)) {
    const char *ta = json_string_value(pa), *tb = json_string_value(pb);
    size_t la = json_string_length(pa), lb = json_string_length(pb);
    size_t t = common_end(whole, wlen, ta, la), e = la - t;
    /* K's window is its whole render's start (the template's opening,
     * the system message: a date in it, a system message moved into the
     * first user message would differ) and its end, nothing else; and
     * M's window opens as K's. */
    bool fits = common_start(whole, wlen, ta, la) + t >= la && e <= lb &&
                memcmp(ta, tb, e) == 0;
    char *text = fits ? malloc(wlen - t + (lb - e) + 1) : NULL;
    if (text != NULL) {
      memcpy(text, whole, wlen - t);
      memcpy(text + wlen - t, tb + e, lb - e);
      if (json_object_set_new(b, "prompt",
                              json_stringn(text, wlen - t + (lb - e))) ==
          0) {
        out = b;
        b = NULL;
      }
      free(text);
    }
  }
  json_decref(a);
  json_decref(b);
  return out;
}

/* The last user message at or before i, from `from` on; -1 if none. */
static long user_before(json_t *messages, long i, long from) {
  for (; i >= from; i--)
    if (strcmp(role(messages, (size_t)i), "user") == 0)
      return i;
  return -1;
}

/* Whether message m holds a role and text alone (a string, null, or
 * text parts): no tool calls or results, images, names or reasoning
 * fields, which templates may count across the whole list (Kimi K2
 * numbers every tool call from the first). */
static bool plain(json_t *m) {
  const char *key;
  json_t *v;
  json_object_foreach(m, key, v) {
    if (strcmp(key, "role") == 0) {
      if (strcmp(json_string_value(v) ? json_string_value(v) : "",
                 "tool") == 0)
        return false;
    } else if (strcmp(key, "content") == 0) {
      size_t i;
      json_t *part;
      if (!json_is_array(v)) {
        if (!json_is_string(v) && !json_is_null(v))
          return false;
        continue;
      }
      json_array_foreach(v, i, part) {
        const char *t = json_string_value(json_object_get(part, "type"));
        if (t == NULL || strcmp(t, "text") != 0)
          return false;
      }
    } else {
      return false;
    }
  }
  return true;
}

/* The render of messages from kept's, through two windows that agree;
 * NULL when they cannot or do not, or when a message a window leaves
 * out is more than text. */
static json_t *windowed(const up_chat_t *chat, json_t *request,
                        const kept_t *k, size_t shared, json_t *messages) {
  bool head = json_array_size(messages) > 1 &&
              (strcmp(role(messages, 0), "system") == 0 ||
               strcmp(role(messages, 0), "developer") == 0);
  long s1 = user_before(messages, (long)shared - 1, head);
  long s2 = s1 > 0 ? user_before(messages, s1 - 1, head) : -1;
  if (s2 < 0)
    return NULL;
  for (long i = 0; i < s1; i++)
    if (!plain(json_array_get(messages, (size_t)i)))
      return NULL;
  json_t *one = splice(chat, request, k->messages, k->prompt, k->len,
                       messages, head, (size_t)s1);
  json_t *two = one != NULL
                    ? splice(chat, request, k->messages, k->prompt, k->len,
                             messages, head, (size_t)s2)
                    : NULL;
  bool same = two != NULL && json_equal(one, two);
  json_decref(two);
  if (!same) {
    json_decref(one);
    return NULL;
  }
  return one;
}

/* The request without its messages, as JSON (NULL: out of memory). */
static char *key_of(json_t *request) {
  json_t *c = json_copy(request);
  if (c == NULL)
    return NULL;
  json_object_del(c, "messages");
  char *k = json_dumps(c, JSON_COMPACT | JSON_SORT_KEYS);
  json_decref(c);
  return k;
}

/* How many messages a and b share from their start. */
static size_t shared_messages(json_t *a, json_t *b) {
  size_t n = json_array_size(a) < json_array_size(b) ? json_array_size(a)
                                                     : json_array_size(b);
  size_t i = 0;
  while (i < n && json_equal(json_array_get(a, i), json_array_get(b, i)))
    i++;
  return i;
}

/* Keeps the render of messages (prompt of out) under key, in the place
 * of the kept list it extends, else of the least recently used. Takes
 * key. */
static void keep(rcache_t *rc, char *key, json_t *messages, json_t *out) {
  json_t *p = json_object_get(out, "prompt");
  char *prompt = NULL;
  size_t len = json_string_length(p);
  if (rc->cap == 0 || !json_is_string(p) ||
      (prompt = malloc(len + 1)) == NULL) {
    free(key);
    return;
  }
  memcpy(prompt, json_string_value(p), len);
  pthread_mutex_lock(&rc->mu);
  uint32_t at = rc->n;
  for (uint32_t i = 0; i < rc->n && at == rc->n; i++)
    if (strcmp(rc->kept[i].key, key) == 0 &&
        shared_messages(rc->kept[i].messages, messages) ==
            json_array_size(rc->kept[i].messages))
      at = i;
  if (at == rc->n && rc->n == rc->cap) {
    at = 0;
    for (uint32_t i = 1; i < rc->n; i++)
      if (rc->kept[i].used < rc->kept[at].used)
        at = i;
  }
  if (at < rc->n)
    kept_free(&rc->kept[at]);
  else
    rc->n++;
  rc->kept[at] = (kept_t){key, json_incref(messages), prompt, len,
                          ++rc->tick};
  pthread_mutex_unlock(&rc->mu);
}

int rcache_apply(rcache_t *rc, const up_chat_t *chat, json_t *request,
                 json_t **out, char *err, size_t errlen) {
  double t0 = now();
  json_t *messages = json_object_get(request, "messages");
  char *key = rc->cap > 0 ? key_of(request) : NULL;
  kept_t k = {0};
  size_t shared = 0;
  if (key != NULL) {
    pthread_mutex_lock(&rc->mu);
    int64_t best = -1;
    for (uint32_t i = 0; i < rc->n; i++) {
      if (strcmp(rc->kept[i].key, key) != 0)
        continue;
      size_t j = shared_messages(rc->kept[i].messages, messages);
      if (j > shared) {
        shared = j;
        best = i;
      }
    }
    if (best >= 0) {
      kept_t *b = &rc->kept[best];
      b->used = ++rc->tick;
      k.messages = json_incref(b->messages);
      k.len = b->len;
      if ((k.prompt = malloc(b->len + 1)) != NULL)
        memcpy(k.prompt, b->prompt, b->len);
    }
    pthread_mutex_unlock(&rc->mu);
  }
  *out = k.prompt != NULL ? windowed(chat, request, &k, shared, messages)
                          : NULL;
  bool tried = k.prompt != NULL;
  json_decref(k.messages);
  free(k.prompt);
  bool win = *out != NULL;
  if (!win)
    *out = apply(chat, request, err, errlen);
  if (*out != NULL && key != NULL)
    keep(rc, key, messages, *out);
  else
    free(key);
  double dt = now() - t0;
  pthread_mutex_lock(&rc->mu);
  rc->st.seconds += dt;
  if (win)
    rc->st.windows++;
  else
    rc->st.whole++;
  if (!win && tried)
    rc->st.refused++;
  pthread_mutex_unlock(&rc->mu);
  return *out != NULL ? 0 : -1;
}

void rcache_scrape(rcache_t *rc, rcache_stats_t *s) {
  pthread_mutex_lock(&rc->mu);
  *s = rc->st;
  pthread_mutex_unlock(&rc->mu);
}

/* A pool of daemons routed as nginx's `hash ... consistent` routes them
 * (include/evictd/client.h): the ring, and batches split per instance and
 * sent at once (the caller sends one part, a worker thread per instance
 * each other one). */
#include "client_int.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define POINTS_PER_WEIGHT 160 /* nginx's points per unit of weight */

typedef struct {
  uint32_t hash;
  uint32_t order; /* when it was made: ties keep the first, as glibc's
                     stable qsort leaves nginx's */
  uint32_t inst;
} point_t;

typedef struct {
  evd_client_pool_t *pool;
  size_t inst;
  const evd_step_t *steps; /* this part's items, contiguous */
  size_t n;
  evd_batch_result_t *out;
  int rc;
  /* What a failure of the whole part gives each of its items. */
  char fail_code[48];
  char fail_msg[1200];
  /* Its worker: started on the first batch with a part here besides the
   * caller's, then woken per batch (pending), under the pool's mutex. */
  pthread_t thread;
  pthread_cond_t go;
  bool has_thread, pending;
} part_t;

struct evd_client_pool_s {
  size_t n;
  evd_client_t **clients;
  char **names, **urls;
  point_t *points;
  size_t npoints;
  /* Per batch, in one block grown as needed (see grow): the items sorted
   * by instance (stable), their outcomes, where each came from, and each
   * item's instance; and per instance its part. */
  size_t cap;
  evd_step_t *sorted;
  evd_batch_result_t *results;
  size_t *order;
  int *inst_of;
  part_t *parts;
  pthread_mutex_t mu;
  pthread_cond_t done; /* outstanding reached 0 */
  size_t outstanding;
  bool stopping, sync_ready;
};

static uint32_t crc_table[256];
static pthread_once_t crc_once = PTHREAD_ONCE_INIT;

static void crc_init(void) {
  for (uint32_t i = 0; i < 256; i++) {
    uint32_t c = i;
    for (int k = 0; k < 8; k++)
      c = (c & 1) ? 0xEDB88320u ^ (c >> 1) : c >> 1;
    crc_table[i] = c;
  }
}

/* zlib's crc32 (reflected, ~ in and out): crc of the bytes, continuing a
 * finished crc. */
static uint32_t crc32_update(uint32_t crc, const void *data, size_t len) {
  const unsigned char *p = data;
  crc = ~crc;
  while (len--)
    crc = crc_table[(crc ^ *p++) & 0xff] ^ (crc >> 8);
  return ~crc;
}

static int cmp_points(const void *a, const void *b) {
  const point_t *x = a, *y = b;
  if (x->hash != y->hash)
    return x->hash < y->hash ? -1 : 1;
  return x->order < y->order ? -1 : x->order > y->order;
}

/* nginx's split of a server name: "unix:" and the rest; else the digits
 * after the last ':' are the port, none when anything else follows it.
 * The base crc covers HOST, a 0 byte, PORT. */
static uint32_t base_crc(const char *name) {
  size_t len = strlen(name), host_len = len, j;
  const char *port = NULL;
  size_t port_len = 0;
  if (len >= 5 && strncasecmp(name, "unix:", 5) == 0) {
    uint32_t c = crc32_update(0, name + 5, len - 5);
    return crc32_update(c, "", 1);
  }
  for (j = 0; j < len; j++) {
    char ch = name[len - j - 1];
    if (ch == ':') {
      host_len = len - j - 1;
      port = name + len - j;
      port_len = j;
      break;
    }
    if (ch < '0' || ch > '9')
      break;
  }
  uint32_t c = crc32_update(0, name, host_len);
  c = crc32_update(c, "", 1);
  return port ? crc32_update(c, port, port_len) : c;
}

static int build_ring(evd_client_pool_t *p) {
  p->points = calloc(p->n * POINTS_PER_WEIGHT, sizeof *p->points);
  if (!p->points)
    return -1;
  size_t k = 0;
  for (size_t i = 0; i < p->n; i++) {
    uint32_t base = base_crc(p->names[i]), prev = 0;
    for (int j = 0; j < POINTS_PER_WEIGHT; j++, k++) {
      unsigned char le[4] = {prev & 0xff, (prev >> 8) & 0xff,
                             (prev >> 16) & 0xff, prev >> 24};
      prev = crc32_update(base, le, 4);
      p->points[k] = (point_t){prev, (uint32_t)k, (uint32_t)i};
    }
  }
  qsort(p->points, k, sizeof *p->points, cmp_points);
  size_t u = 0;
  for (size_t j = 1; j < k; j++)
    if (p->points[j].hash != p->points[u].hash)
      p->points[++u] = p->points[j];
  p->npoints = u + 1;
  return 0;
}

int evd_client_pool_instance(const evd_client_pool_t *p, const char *session) {
  if (!p || !session)
    return -1;
  if (p->n == 1)
    return 0; /* nginx: a single peer takes every request */
  size_t keylen = strcspn(session, "~");
  if (keylen == 0)
    return -1;
  uint32_t h = crc32_update(0, session, keylen);
  size_t lo = 0, hi = p->npoints;
  while (lo < hi) { /* the first point >= h, wrapping to the first */
    size_t mid = (lo + hi) / 2;
    if (p->points[mid].hash < h)
      lo = mid + 1;
    else
      hi = mid;
  }
  return (int)p->points[lo % p->npoints].inst;
}

/* "host:port" of a URL as written ("unix:/path" stays whole). */
static char *name_of(const char *url) {
  if (strncmp(url, "unix:", 5) == 0)
    return strdup(url);
  const char *s = strstr(url, "://");
  s = s ? s + 3 : url;
  size_t len = strcspn(s, "/?#");
  char *out = malloc(len + 1);
  if (out) {
    memcpy(out, s, len);
    out[len] = '\0';
  }
  return out;
}

void evd_client_pool_free(evd_client_pool_t *p) {
  if (!p)
    return;
  if (p->sync_ready) {
    pthread_mutex_lock(&p->mu);
    p->stopping = true;
    for (size_t k = 0; k < p->n; k++)
      pthread_cond_signal(&p->parts[k].go);
    pthread_mutex_unlock(&p->mu);
    for (size_t k = 0; k < p->n; k++) {
      if (p->parts[k].has_thread)
        pthread_join(p->parts[k].thread, NULL);
      pthread_cond_destroy(&p->parts[k].go);
    }
    pthread_cond_destroy(&p->done);
    pthread_mutex_destroy(&p->mu);
  }
  for (size_t i = 0; i < p->n; i++) {
    if (p->clients)
      evd_client_free(p->clients[i]);
    if (p->names)
      free(p->names[i]);
    if (p->urls)
      free(p->urls[i]);
  }
  free(p->clients);
  free(p->names);
  free(p->urls);
  free(p->points);
  free(p->sorted); /* the per-batch block */
  free(p->parts);
  free(p);
}

int evd_client_pool_new(evd_client_pool_t **out, const char *const *urls,
                        const char *const *names, size_t n,
                        const evd_client_opts_t *opts, char *errbuf,
                        size_t errlen) {
  pthread_once(&crc_once, crc_init);
  if (errbuf && errlen)
    errbuf[0] = '\0';
  if (!out || !urls || n == 0) {
    if (errbuf)
      snprintf(errbuf, errlen, "a pool needs at least one instance URL");
    return EVD_CLIENT_EINVAL;
  }
  evd_client_pool_t *p = calloc(1, sizeof *p);
  if (!p)
    goto nomem;
  p->n = n;
  p->clients = calloc(n, sizeof *p->clients);
  p->names = calloc(n, sizeof *p->names);
  p->urls = calloc(n, sizeof *p->urls);
  p->parts = calloc(n, sizeof *p->parts);
  if (!p->clients || !p->names || !p->urls || !p->parts)
    goto nomem;
  for (size_t i = 0; i < n; i++) {
    p->urls[i] = strdup(urls[i] ? urls[i] : "");
    p->names[i] = names ? strdup(names[i] ? names[i] : "") : name_of(p->urls[i]);
    if (!p->urls[i] || !p->names[i])
      goto nomem;
    for (size_t j = 0; j < i; j++)
      if (strcmp(p->names[i], p->names[j]) == 0) {
        if (errbuf)
          snprintf(errbuf, errlen, "instance name %s given twice", p->names[i]);
        evd_client_pool_free(p);
        return EVD_CLIENT_EINVAL;
      }
    evd_client_opts_t o = opts ? *opts : (evd_client_opts_t){0};
    o.url = p->urls[i];
    int rc = evd_client_new(&p->clients[i], &o, errbuf, errlen);
    if (rc != 0) {
      evd_client_pool_free(p);
      return rc;
    }
  }
  if (build_ring(p) != 0)
    goto nomem;
  pthread_mutex_init(&p->mu, NULL);
  pthread_cond_init(&p->done, NULL);
  for (size_t k = 0; k < n; k++) {
    p->parts[k].pool = p;
    p->parts[k].inst = k;
    pthread_cond_init(&p->parts[k].go, NULL);
  }
  p->sync_ready = true;
  *out = p;
  return 0;
nomem:
  evd_client_pool_free(p);
  if (errbuf)
    snprintf(errbuf, errlen, "out of memory making a pool of %zu", n);
  return EVD_CLIENT_ENOMEM;
}

evd_client_t *evd_client_pool_client(evd_client_pool_t *p, size_t i) {
  return p && i < p->n ? p->clients[i] : NULL;
}

const char *evd_client_pool_name(const evd_client_pool_t *p, size_t i) {
  return p && i < p->n ? p->names[i] : NULL;
}

/* Room for a batch of n items. The four per-batch arrays share one block,
 * laid out from the widest alignment down (each array's size is a
 * multiple of its own alignment, so the next one starts aligned); their
 * contents do not outlive a batch, so a larger block replaces the old one
 * without copying. */
static int grow(evd_client_pool_t *p, size_t n) {
  const size_t each = sizeof *p->sorted + sizeof *p->results +
                      sizeof *p->order + sizeof *p->inst_of;
  size_t cap;
  char *block;

  _Static_assert(_Alignof(evd_step_t) >= _Alignof(evd_batch_result_t) &&
                     _Alignof(evd_batch_result_t) >= _Alignof(size_t) &&
                     _Alignof(size_t) >= _Alignof(int),
                 "the block's arrays go from the widest alignment down");
  if (n <= p->cap)
    return 0;
  cap = n < 64 ? 64 : n;
  if (cap > SIZE_MAX / each || (block = malloc(cap * each)) == NULL)
    return -1;
  free(p->sorted);
  p->sorted = (evd_step_t *)(void *)block;
  p->results = (evd_batch_result_t *)(void *)(p->sorted + cap);
  p->order = (size_t *)(void *)(p->results + cap);
  p->inst_of = (int *)(void *)(p->order + cap);
  p->cap = cap;
  return 0;
}

static void send_part(part_t *t) {
  t->rc = evd_client_batch(t->pool->clients[t->inst], t->steps, t->n, t->out);
}

static void *worker(void *arg) {
  part_t *t = arg;
  evd_client_pool_t *p = t->pool;
  pthread_mutex_lock(&p->mu);
  for (;;) {
    while (!t->pending && !p->stopping)
      pthread_cond_wait(&t->go, &p->mu);
    if (p->stopping)
      break;
    pthread_mutex_unlock(&p->mu);
    send_part(t);
    pthread_mutex_lock(&p->mu);
    t->pending = false;
    if (--p->outstanding == 0)
      pthread_cond_signal(&p->done);
  }
  pthread_mutex_unlock(&p->mu);
  return NULL;
}

int evd_client_pool_batch(evd_client_pool_t *p, const evd_step_t *steps,
                          size_t n, evd_batch_result_t *out) {
  if (!p || (n && (!steps || !out)))
    return EVD_CLIENT_EINVAL;
  if (grow(p, n) != 0)
    return EVD_CLIENT_ENOMEM;
  /* Count each instance's items, then place them stably by instance. */
  size_t *count = calloc(p->n + 1, sizeof *count);
  if (!count)
    return EVD_CLIENT_ENOMEM;
  for (size_t i = 0; i < n; i++) {
    p->inst_of[i] = evd_client_pool_instance(p, steps[i].session);
    if (p->inst_of[i] >= 0)
      count[p->inst_of[i] + 1]++;
  }
  for (size_t k = 1; k <= p->n; k++)
    count[k] += count[k - 1]; /* count[k]: where instance k's items start */
  for (size_t k = 0; k < p->n; k++) {
    part_t *t = &p->parts[k];
    t->steps = p->sorted + count[k];
    t->out = p->results + count[k];
    t->n = 0;
    t->rc = 0;
  }
  for (size_t i = 0; i < n; i++) {
    int k = p->inst_of[i];
    if (k < 0)
      continue;
    part_t *t = &p->parts[k];
    p->order[count[k] + t->n] = i;
    p->sorted[count[k] + t->n] = steps[i];
    t->n++;
  }
  free(count);
  /* Every part but the first to its instance's worker; the first here. A
   * worker that cannot be started leaves its part to this thread. */
  size_t first = p->n;
  bool *mine = calloc(p->n, sizeof *mine);
  if (!mine)
    return EVD_CLIENT_ENOMEM;
  pthread_mutex_lock(&p->mu);
  for (size_t k = 0; k < p->n; k++) {
    part_t *t = &p->parts[k];
    if (t->n == 0)
      continue;
    if (first == p->n) {
      first = k;
      continue;
    }
    if (!t->has_thread)
      t->has_thread = pthread_create(&t->thread, NULL, worker, t) == 0;
    if (!t->has_thread) {
      mine[k] = true;
      continue;
    }
    t->pending = true;
    p->outstanding++;
    pthread_cond_signal(&t->go);
  }
  pthread_mutex_unlock(&p->mu);
  for (size_t k = 0; k < p->n; k++)
    if (k == first || mine[k])
      send_part(&p->parts[k]);
  free(mine);
  pthread_mutex_lock(&p->mu);
  while (p->outstanding > 0)
    pthread_cond_wait(&p->done, &p->mu);
  pthread_mutex_unlock(&p->mu);
  /* Back in request order; a failed part fails each of its items. */
  for (size_t k = 0; k < p->n; k++) {
    part_t *t = &p->parts[k];
    if (t->n == 0 || t->rc == 0)
      continue;
    const evd_client_err_t *e = evd_client_error(p->clients[k]);
    snprintf(t->fail_code, sizeof t->fail_code, "%s", e->code);
    snprintf(t->fail_msg, sizeof t->fail_msg, "instance %s (%s) failed: %s",
             p->names[k], p->urls[k], e->message);
    for (size_t j = 0; j < t->n; j++)
      t->out[j] = (evd_batch_result_t){
          .rc = t->rc,
          .error = {t->rc, e->status, t->fail_code, t->fail_msg, -1}};
  }
  size_t placed = 0;
  for (size_t k = 0; k < p->n; k++)
    for (size_t j = 0; j < p->parts[k].n; j++, placed++)
      out[p->order[placed]] = p->results[placed];
  for (size_t i = 0; i < n; i++)
    if (p->inst_of[i] < 0)
      out[i] = (evd_batch_result_t){
          .rc = EVD_CLIENT_EINVAL,
          .error = {EVD_CLIENT_EINVAL, 0, "unroutable_session",
                    "the session's shard key (the id before its first '~') "
                    "is empty: nginx routes it round-robin",
                    -1}};
  return 0;
}

int evd_client_pool_adopt(evd_client_pool_t *p, const char *session,
                          const evd_adopt_t *state, evd_view_t *out) {
  int k = evd_client_pool_instance(p, session);

  if (k < 0)
    return EVD_CLIENT_EINVAL;
  return evd_client_adopt(p->clients[k], session, state, out);
}

/* The session table: chained hashing with a keyed hash (SipHash-1-3,
 * siphash.c) and
 * incremental rehashing, so that no single request pays for resizing a table
 * of millions; an intrusive last-use list, so that idle sessions are reaped
 * oldest first at a cost proportional to the sessions reaped; and the replay
 * record of each session's last step, commit or truncate request. */
#include "session.h"

#include <assert.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/random.h>
#include <time.h>
#include <unistd.h>
#if defined(__GLIBC__)
#include <malloc.h>
#endif

#include "session_int.h"
#include "siphash.h"

/* Every byte of a session's header is paid once per session (millions):
 * the last-use list's node is the two pointers it always was. */
_Static_assert(sizeof(void *) != 8 || offsetof(evd_session_t, id) == 32,
               "a session's header is 32 bytes on LP64");

/* Buckets never shrink below this, and a table starts at it. */
#define MIN_BUCKETS 1024u
/* Buckets moved per table operation while a rehash is under way. */
#define REHASH_STEP 4u

struct evd_table_s {
  evd_session_t **bucket[2]; /* [1] is the new table during a rehash */
  size_t mask[2];            /* buckets - 1 */
  size_t rehash_at;          /* next bucket of [0] to move, when rehashing */
  int rehashing;
  uint32_t count, max;
  uint64_t key[2];
  /* The last-use list's head: a session header with no id (idlen 0, which
   * no session has), so that evd_table_younger can tell the end without
   * the table. */
  evd_session_t *lru;
  evd_rpool_t pool;
};

static uint32_t hash_id(const evd_table_t *t, const char *id, size_t len) {
  uint64_t h = evd__siphash13(t->key, id, len);
  return (uint32_t)(h ^ (h >> 32));
}

uint32_t evd_table_hash(const evd_table_t *t, const char *id, size_t len) {
  return hash_id(t, id, len);
}

evd_rpool_t *evd_table_pool(evd_table_t *t) {
  return &t->pool;
}

/* A session's hash is computed again when needed rather than stored: four
 * bytes a session against one hash per removal and per rehashed session. */
static uint32_t hash_of(const evd_table_t *t, const evd_session_t *s) {
  return hash_id(t, s->id, s->idlen);
}

/* ---- ids and blocks ----------------------------------------------------- */

int evd_session_id_valid(const char *id, size_t len) {
  size_t i;

  if (len < 1 || len > EVD_SESSION_ID_MAX)
    return 0;
  for (i = 0; i < len; i++) {
    unsigned char c = (unsigned char)id[i];
    if (!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') ||
          (c >= '0' && c <= '9') || c == '.' || c == '_' || c == '~' ||
          c == '-'))
      return 0;
  }
  return 1;
}

/* Where a session's window begins in its block: after the header, the id
 * (aligned for the uint32s that follow) and the replay area. */
static size_t window_offset(size_t idlen, uint32_t page_size) {
  size_t off = (offsetof(evd_session_t, id) + idlen + 3) & ~(size_t)3;
  return off + 4 * (page_size != 0 ? EVD__RP_WORDS_PAGED : EVD__RP_WORDS);
}

size_t evd_session_footprint(size_t idlen, const evd_session_config_t *cfg) {
  return window_offset(idlen, cfg->page_size) +
         evd_window_footprint(cfg->budget, cfg->lookahead);
}

/* Frees a session block, and its replay record when that is pooled. */
static void session_free(evd_table_t *t, evd_session_t *s) {
  evd_rpool_release(&t->pool, evd__session_rp(s));
  free(s);
}

/* ---- the hash table ----------------------------------------------------- */

int evd_table_new(evd_table_t **out, uint32_t max_sessions,
                  size_t pool_bytes) {
  evd_table_t *t = calloc(1, sizeof *t);

  if (t == NULL)
    return EVD_ENOMEM;
  t->bucket[0] = calloc(MIN_BUCKETS, sizeof(evd_session_t *));
  if (t->bucket[0] == NULL) {
    free(t);
    return EVD_ENOMEM;
  }
  t->lru = calloc(1, sizeof *t->lru);
  if (t->lru == NULL) {
    free(t->bucket[0]);
    free(t);
    return EVD_ENOMEM;
  }
  evd_queue_init(&t->lru->lru);
  evd_rpool_init(&t->pool, pool_bytes);
  t->mask[0] = MIN_BUCKETS - 1;
  t->max = max_sessions;
  if (getrandom(t->key, sizeof t->key, 0) != (ssize_t)sizeof t->key) {
    /* No entropy source: a clock-derived key is weaker but still keyed. */
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    t->key[0] = (uint64_t)ts.tv_nsec * 0x9e3779b97f4a7c15ull;
    t->key[1] = (uint64_t)ts.tv_sec ^ (uint64_t)(uintptr_t)t;
  }
  *out = t;
  return 0;
}

void evd_table_free(evd_table_t *t) {
  evd_session_t *s;

  if (t == NULL)
    return;
  while ((s = evd_table_oldest(t)) != NULL) {
    evd_queue_remove(&s->lru);
    session_free(t, s);
  }
  free(t->lru);
  free(t->bucket[0]);
  free(t->bucket[1]);
  free(t);
}

/* Makes `bytes` of heap ready for the sessions about to be loaded, its
 * pages in place before they are written: otherwise loading a million
 * sessions takes half a million page faults, half the time of a restart
 * (measured). glibc and Linux 5.14 or later only: one block of `bytes` is
 * taken from the heap (not mmap) with trimming off, freed back into it and
 * populated with MADV_POPULATE_WRITE, one system call; the sessions are
 * then carved from it by malloc as usual. (Huge pages were tried: faster
 * when the kernel has them free, three times slower when it must compact
 * memory for them first, as after the previous daemon's exit.) */
static int heap_prepared;

static void heap_prepare(size_t bytes) {
#if defined(__GLIBC__) && defined(MADV_POPULATE_WRITE)
  size_t page = (size_t)sysconf(_SC_PAGESIZE);
  uintptr_t lo, hi;
  char *p;

  if (bytes < ((size_t)64 << 20) || page == 0 || (page & (page - 1)) != 0)
    return;
  mallopt(M_MMAP_MAX, 0);
  mallopt(M_TRIM_THRESHOLD, -1); /* never */
  heap_prepared = 1;
  p = malloc(bytes);
  mallopt(M_MMAP_MAX, 65536); /* glibc's defaults back */
  if (p == NULL)
    return;
  lo = ((uintptr_t)p + page - 1) & ~(uintptr_t)(page - 1);
  hi = ((uintptr_t)p + bytes) & ~(uintptr_t)(page - 1);
  free(p);
  if (hi > lo)
    (void)madvise((void *)lo, hi - lo, MADV_POPULATE_WRITE);
  /* The trim threshold stays up until the load is done: see
   * evd_table_reserve_done. */
#else
  (void)bytes;
#endif
}

void evd_table_reserve(evd_table_t *t, size_t n, size_t bytes) {
  size_t buckets = MIN_BUCKETS;
  evd_session_t **b;

  if (t->count != 0 || t->rehashing)
    return;
  heap_prepare(bytes);
  while (buckets < n && buckets < ((size_t)1 << 40))
    buckets *= 2;
  if (buckets <= t->mask[0] + 1 || (b = calloc(buckets, sizeof *b)) == NULL)
    return; /* growing as it goes is fine too */
  free(t->bucket[0]);
  t->bucket[0] = b;
  t->mask[0] = buckets - 1;
}

void evd_table_reserve_done(void) {
#if defined(__GLIBC__) && defined(MADV_POPULATE_WRITE)
  if (heap_prepared)
    mallopt(M_TRIM_THRESHOLD, 128 * 1024); /* glibc's default */
  heap_prepared = 0;
#endif
}

size_t evd__table_buckets(const evd_table_t *t) {
  return (t->rehashing ? t->mask[1] : t->mask[0]) + 1;
}

uint32_t evd_table_set_max(evd_table_t *t, uint32_t max) {
  uint32_t old = t->max;
  t->max = max;
  return old;
}

uint32_t evd_table_count(const evd_table_t *t) {
  return t->count;
}

/* Moves up to REHASH_STEP buckets of the old table to the new one, and
 * retires the old table when it is empty. */
static void rehash_step(evd_table_t *t) {
  unsigned moved = 0;

  while (moved < REHASH_STEP && t->rehash_at <= t->mask[0]) {
    evd_session_t *s = t->bucket[0][t->rehash_at], *next;
    for (; s != NULL; s = next) {
      size_t i = hash_of(t, s) & t->mask[1];
      next = s->hnext;
      s->hnext = t->bucket[1][i];
      t->bucket[1][i] = s;
    }
    t->bucket[0][t->rehash_at++] = NULL;
    moved++;
  }
  if (t->rehash_at > t->mask[0]) {
    free(t->bucket[0]);
    t->bucket[0] = t->bucket[1];
    t->mask[0] = t->mask[1];
    t->bucket[1] = NULL;
    t->rehashing = 0;
  }
}

/* Starts moving to a table of `buckets` (a power of two). On allocation
 * failure the table simply stays as it is: chains get longer, nothing
 * breaks. */
static void rehash_start(evd_table_t *t, size_t buckets) {
  evd_session_t **b = calloc(buckets, sizeof *b);

  if (b == NULL)
    return;
  t->bucket[1] = b;
  t->mask[1] = buckets - 1;
  t->rehash_at = 0;
  t->rehashing = 1;
}

/* Grows at load factor 1 (on an insert) and shrinks below 1/8 (on a
 * removal, so that a table sized ahead by evd_table_reserve is not shrunk
 * by its first insert), so that memory follows the live session count both
 * ways. */
static void maybe_resize(evd_table_t *t, int removed) {
  size_t buckets = t->mask[0] + 1;

  if (t->rehashing) {
    rehash_step(t);
    return;
  }
  if (!removed && t->count > buckets)
    rehash_start(t, buckets * 2);
  else if (removed && buckets > MIN_BUCKETS && t->count < buckets / 8)
    rehash_start(t, buckets / 4 < MIN_BUCKETS ? MIN_BUCKETS : buckets / 4);
}

static evd_session_t **chain_of(evd_table_t *t, uint32_t hash) {
  /* Buckets of [0] below rehash_at have moved to [1]. */
  size_t i = hash & t->mask[0];
  if (t->rehashing && i < t->rehash_at)
    return &t->bucket[1][hash & t->mask[1]];
  return &t->bucket[0][i];
}

void evd_table_prefetch(evd_table_t *t, const char *id, size_t len,
                        int deep) {
  evd_session_t **chain = chain_of(t, hash_id(t, id, len)), *s;

  if (!deep) {
    __builtin_prefetch(chain);
  } else if ((s = *chain) != NULL) {
    __builtin_prefetch(s);
    __builtin_prefetch(s->id);
  }
}

evd_session_t *evd_table_find(evd_table_t *t, const char *id, size_t len) {
  uint32_t h = hash_id(t, id, len);
  evd_session_t *s;

  if (t->rehashing)
    rehash_step(t);
  for (s = *chain_of(t, h); s != NULL; s = s->hnext)
    if (s->idlen == len && memcmp(s->id, id, len) == 0)
      return s;
  return NULL;
}

/* Allocates a session block for `id` with room for a window of `budget` +
 * `lookahead` slots, linked nowhere yet. Returns NULL without memory. */
static evd_session_t *block_new(const char *id, size_t len, uint32_t budget,
                                uint32_t lookahead, uint32_t page_size,
                                uint32_t now) {
  evd_session_t *s;

  assert(page_size <= EVD_MAX_PAGE_SIZE);
  s = malloc(window_offset(len, page_size) +
             evd_window_footprint(budget, lookahead));
  if (s == NULL)
    return NULL;
  s->used = now;
  s->bits = page_size != 0 ? EVD__PAGED : 0;
  s->page_m1 = (uint16_t)(page_size != 0 ? page_size - 1 : 0);
  s->idlen = (uint8_t)len;
  memcpy(s->id, id, len);
  evd__session_rp(s)[0] = 0; /* no replay record */
  return s;
}

/* Links a new block into its hash chain and at the young end of the
 * last-use list. */
static void link_block(evd_table_t *t, evd_session_t *s) {
  evd_session_t **chain = chain_of(t, hash_of(t, s));

  s->hnext = *chain;
  *chain = s;
  evd_queue_insert_tail(&t->lru->lru, &s->lru);
}

/* Unlinks a block from its hash chain and the last-use list. */
static void unlink_block(evd_table_t *t, evd_session_t *s) {
  evd_session_t **pp = chain_of(t, hash_of(t, s));

  while (*pp != s) {
    assert(*pp != NULL);
    pp = &(*pp)->hnext;
  }
  *pp = s->hnext;
  evd_queue_remove(&s->lru);
}

/* Allocates a session block for `id` with room for a window of `budget` +
 * `lookahead` slots, and links it in. The caller fills the window. */
static int link_new(evd_table_t *t, const char *id, size_t len,
                    uint32_t budget, uint32_t lookahead, uint32_t page_size,
                    uint32_t now, evd_session_t **out) {
  evd_session_t *s;

  if (t->count >= t->max)
    return EVD_ELIMIT;
  s = block_new(id, len, budget, lookahead, page_size, now);
  if (s == NULL)
    return EVD_ENOMEM;
  link_block(t, s);
  t->count++;
  maybe_resize(t, 0);
  *out = s;
  return 0;
}

/* evd_table_add and evd_table_add_prepared: the window starts cleared, or
 * only prepared for the caller to fill. */
static int add(evd_table_t *t, const char *id, size_t len,
               const evd_session_config_t *cfg, uint32_t now, int clear,
               evd_session_t **out) {
  evd_window_t *w;
  int err;

  assert(evd_session_id_valid(id, len));
  if (!evd_window_config_valid(cfg->budget, cfg->sinks, cfg->lookahead))
    return EVD_EINVAL;
  err = link_new(t, id, len, cfg->budget, cfg->lookahead, cfg->page_size,
                 now, out);
  if (err != 0)
    return err;
  w = evd_session_window(*out);
  if (clear)
    evd_window_init(w, cfg->budget, cfg->sinks, cfg->lookahead, NULL);
  else
    evd_window_prepare(w, cfg->budget, cfg->sinks, cfg->lookahead);
  return 0;
}

int evd_table_add(evd_table_t *t, const char *id, size_t len,
                  const evd_session_config_t *cfg, uint32_t now,
                  evd_session_t **out) {
  return add(t, id, len, cfg, now, 1, out);
}

int evd_table_add_prepared(evd_table_t *t, const char *id, size_t len,
                           const evd_session_config_t *cfg, uint32_t now,
                           evd_session_t **out) {
  return add(t, id, len, cfg, now, 0, out);
}

int evd_table_replace(evd_table_t *t, evd_session_t *old,
                      const evd_session_config_t *cfg, uint32_t now,
                      evd_session_t **out) {
  evd_session_t *s;

  if (!evd_window_config_valid(cfg->budget, cfg->sinks, cfg->lookahead))
    return EVD_EINVAL;
  /* The new block first, so that a failure leaves the old session. */
  s = block_new(old->id, old->idlen, cfg->budget, cfg->lookahead,
                cfg->page_size, now);
  if (s == NULL)
    return EVD_ENOMEM;
  evd_window_prepare(evd_session_window(s), cfg->budget, cfg->sinks,
                     cfg->lookahead);
  unlink_block(t, old);
  session_free(t, old);
  link_block(t, s);
  *out = s;
  return 0;
}

int evd_table_fork(evd_table_t *t, const evd_session_t *parent,
                   const char *id, size_t len, uint32_t now,
                   evd_session_t **out) {
  const evd_window_t *w = evd_session_window(parent);
  uint32_t lookahead = evd_window_lookahead(w);
  int err;

  assert(evd_session_id_valid(id, len));
  err = link_new(t, id, len, w->budget, lookahead,
                 evd_session_page_size(parent), now, out);
  if (err == 0)
    memcpy(evd_session_window(*out), w,
           evd_window_footprint(w->budget, lookahead));
  return err;
}

void evd_session_config(const evd_session_t *s, evd_session_config_t *out) {
  const evd_window_t *w = evd_session_window(s);

  out->budget = w->budget;
  out->sinks = w->sinks;
  out->lookahead = evd_window_lookahead(w);
  out->page_size = evd_session_page_size(s);
}

int evd_session_same_state(const evd_session_t *a, const evd_session_t *b) {
  return evd_session_page_size(a) == evd_session_page_size(b) &&
         evd_window_same_state(evd_session_window(a), evd_session_window(b));
}

void evd_table_remove(evd_table_t *t, evd_session_t *s) {
  unlink_block(t, s);
  t->count--;
  session_free(t, s);
  maybe_resize(t, 1);
}

void evd_table_touch(evd_table_t *t, evd_session_t *s, uint32_t now) {
  s->used = now;
  if (evd_queue_tail(&t->lru->lru) == &s->lru)
    return;
  evd_queue_remove(&s->lru);
  evd_queue_insert_tail(&t->lru->lru, &s->lru);
}

evd_session_t *evd_table_oldest(const evd_table_t *t) {
  const evd_queue_t *h = &t->lru->lru;

  return evd_queue_empty(h)
             ? NULL
             : EVD_QUEUE_DATA(evd_queue_head(h), evd_session_t, lru);
}

evd_session_t *evd_table_younger(const evd_session_t *s) {
  evd_session_t *n = EVD_QUEUE_DATA(s->lru.next, evd_session_t, lru);

  return n->idlen != 0 ? n : NULL; /* the head has no id */
}

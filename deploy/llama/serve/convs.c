/* Conversations (engine_int.h): a request's sequence stays parked in its
 * slot when the request ends (its cells in llama.cpp, its evictd session,
 * the tokens it computed), and a request whose prompt extends it, or
 * shares all of it but a few last tokens, continues it: the window goes
 * back to where they part (evictd's truncate, the cells removed) and only
 * the prompt's new tokens are decoded. A parked conversation whose slot
 * another request needs is saved to host memory (its cells through
 * llama_state_seq_get_data, its session kept) up to --cache-ram, least
 * recently used first out, and with --cache-dir written to disk too, where
 * a restarted serve finds it again; one dropped has its session deleted.
 *
 * What a continued conversation's cache holds: exactly what decoding its
 * tokens in the order they came holds, each prompt chunk as it was
 * stepped and each generated token one at a time, then the new prompt's
 * chunks; going back k tokens removes them, and the positions the window
 * evicted while they were decoded do not come back (it holds fewer than
 * its budget until k more are decoded). A fresh decode of the same history
 * steps all of it as prompt chunks. Where the window never evicted, the
 * two are the same (full attention); past it they differ by the chunks'
 * slack and the positions lost going back. A conversation goes back at
 * most max_back positions, and only while the position before the parting
 * is still held; else the prompt is decoded afresh. */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "common/clock.h"
#include "common/grow.h"
#include "serve/engine_int.h"

#define say(...) fprintf(stderr, "evictd-llama serve: " __VA_ARGS__)

/* A saved conversation: what its slot held, in host memory. */
typedef struct saved_s {
  struct saved_s *prev, *next; /* most recently used first */
  char session[SEQ_ID_MAX + 1];
  evd_session_cfg_t cfg;
  uint32_t held, newest, committed;
  uint32_t n;               /* positions computed */
  uint32_t hbase;           /* hist holds the tokens of hbase..n-1 */
  uint64_t hdig;            /* the digest of those below (hist_fold) */
  uint64_t gen;             /* its generation (choice_t's) */
  llama_token *hist;
  uint32_t *map;            /* the positions the cells hold, ascending */
  uint32_t n_map;
  uint8_t *state;           /* llama_state_seq_get_data's */
  size_t n_state;
  size_t bytes;             /* all of it */
  double used_at;
  char file[256];           /* its name in --cache-dir ("" without) */
} saved_t;

typedef struct convs_s {
  saved_t *head, *tail;
  size_t bytes, limit;      /* limit SIZE_MAX: none */
  uint32_t count;
  const char *dir;
  uint64_t next_file;
  char model[160];          /* what a saved conversation fits: the model
                               and the cache's types */
} convs_t;

/* ---- matching ---------------------------------------------------------- */

/* A prompt's digests: dig[k] of its first k blocks (hist_fold's chain),
 * made on first need for the blocks a conversation folded. */
typedef struct digests_s {
  uint64_t *dig;
  uint32_t n;               /* blocks done: dig[0..n] */
} digests_t;

/* The digest of t's first k blocks (0 when the prompt is shorter, or out
 * of memory: then no conversation folded that far matches). */
static uint64_t prompt_digest(const engine_t *e, const task_t *t,
                              digests_t *d, uint32_t k, bool *ok) {
  *ok = false;
  if ((uint64_t)k * HIST_BLOCK > t->n_prompt || t->base != 0)
    return 0;
  if (d->dig == NULL) {
    d->dig = malloc((t->n_prompt / HIST_BLOCK + 1) * sizeof(*d->dig));
    if (d->dig == NULL)
      return 0;
    d->dig[0] = 0;
  }
  for (; d->n < k; d->n++)
    d->dig[d->n + 1] = hist_fold(e->key, d->dig[d->n],
                                 t->prompt + (size_t)d->n * HIST_BLOCK);
  *ok = true;
  return d->dig[k];
}

/* The number of held[0..n) (ascending) below m. */
static uint32_t below(const uint32_t *held, uint32_t n, uint32_t m) {
  uint32_t lo = 0, hi = n;
  while (lo < hi) {
    uint32_t mid = lo + (hi - lo) / 2;
    if (held[mid] < m)
      lo = mid + 1;
    else
      hi = mid;
  }
  return lo;
}

/* How many of task t's first prompt tokens a conversation that computed n
 * positions (the tokens from hbase on in hist, those below digested in
 * hdig), its cells holding positions held[0..n_held), can keep (0: it
 * cannot be continued, or would keep too little to be worth it). It
 * keeps the tokens both have, short of the prompt's last (decoded again
 * for its logits), and goes back to there:
 *  - exactly, when the window then holds what it held once position m - 1
 *    was computed (min(m, budget) positions: the steps from m on evicted
 *    nothing), however far back that is;
 *  - else losing what those steps evicted, only when the prompt goes on
 *    past the conversation (a new turn: a stop string's tokens the client
 *    never saw, the last answer tokenized otherwise) and at most
 *    e->max_back positions back. A prompt that ends within it (the same
 *    request again, an edit) is never answered from a window that lost
 *    positions: it is decoded afresh, so the same request gets the same
 *    answer.
 * Either way position m - 1 must be held (llama.cpp continues a sequence
 * from its newest position only), it keeps at least half of what the
 * conversation computed, and the tokens folded into the digest must be
 * the prompt's very first ones. */
static uint32_t usable(const engine_t *e, const llama_token *hist,
                       uint32_t hbase, uint64_t hdig, uint32_t n,
                       const uint32_t *held, uint32_t n_held,
                       const task_t *t, digests_t *d) {
  bool ok;
  if (hbase > 0 && (prompt_digest(e, t, d, hbase / HIST_BLOCK, &ok) != hdig ||
                    !ok))
    return 0;
  uint32_t lim = n < t->n_prompt ? n : t->n_prompt, m = hbase;
  while (m < lim && hist[m - hbase] == t->prompt[m])
    m++;
  if (m >= t->n_prompt)
    m = t->n_prompt - 1;
  /* Going back keeps at least half of it: a prompt that shares a few
   * first tokens with a long conversation would cut it down for a small
   * gain, and its own client could not continue it any more. */
  if (m < 2 || m < hbase || (m < n && (uint64_t)m * 2 < n))
    return 0;
  uint32_t k = below(held, n_held, m);
  if (k == 0 || held[k - 1] != m - 1)
    return 0;
  if (k == (m < e->budget ? m : e->budget))
    return m;
  return t->n_prompt > n && n - m <= e->max_back ? m : 0;
}

/* ---- the store ----------------------------------------------------------- */

static void unlink_saved(convs_t *cv, saved_t *s) {
  if (s->prev != NULL)
    s->prev->next = s->next;
  else
    cv->head = s->next;
  if (s->next != NULL)
    s->next->prev = s->prev;
  else
    cv->tail = s->prev;
  s->prev = s->next = NULL;
  cv->bytes -= s->bytes;
  cv->count--;
}

static void push_front(convs_t *cv, saved_t *s) {
  s->prev = NULL;
  s->next = cv->head;
  if (cv->head != NULL)
    cv->head->prev = s;
  cv->head = s;
  if (cv->tail == NULL)
    cv->tail = s;
  cv->bytes += s->bytes;
  cv->count++;
}

static void free_saved(saved_t *s) {
  free(s->hist);
  free(s->map);
  free(s->state);
  free(s);
}

/* The path of s's file in the store's folder. */
static void path_of(const convs_t *cv, const saved_t *s, char *out,
                    size_t len) {
  snprintf(out, len, "%s/%s", cv->dir, s->file);
}

/* Drops s for good: its file, its session (through its lane). */
static void drop_saved(engine_t *e, saved_t *s) {
  convs_t *cv = e->store;
  char path[4096];
  unlink_saved(cv, s);
  if (cv->dir != NULL && s->file[0] != '\0') {
    path_of(cv, s, path, sizeof(path));
    unlink(path);
  }
  lanes_delete(e->lanes, s->session, 0);
  e->cc.dropped++;
  free_saved(s);
}

/* Makes room for `need` bytes, dropping the least recently used; false
 * when it cannot fit at all. */
static bool room_for(engine_t *e, size_t need) {
  convs_t *cv = e->store;
  if (need > cv->limit)
    return false;
  while (cv->tail != NULL && cv->bytes + need > cv->limit)
    drop_saved(e, cv->tail);
  return true;
}

/* ---- files (--cache-dir) ------------------------------------------------- */

#define MAGIC "evictd-llama conversation 2\n"

/* A file: this head, then the tokens of positions hbase..n-1, the cells'
 * positions, llama.cpp's state of the sequence. Host byte order: a cache
 * folder is the machine's own. */
typedef struct file_head_s {
  char magic[32];
  char model[160];
  char session[SEQ_ID_MAX + 1];
  int64_t cfg[4];
  uint32_t held, newest, committed, n, n_map, hbase;
  uint64_t hdig;
  uint64_t n_state;
} file_head_t;

/* Writes s to its file (written whole under a temporary name, then
 * renamed: a crash leaves the old one or none). 0, or -1 (told). */
static int write_saved(convs_t *cv, saved_t *s) {
  char path[4096], tmp[4200];
  if (s->file[0] == '\0')
    snprintf(s->file, sizeof(s->file), "conv-%llu.bin",
             (unsigned long long)++cv->next_file);
  path_of(cv, s, path, sizeof(path));
  snprintf(tmp, sizeof(tmp), "%s.tmp", path);
  file_head_t h;
  memset(&h, 0, sizeof(h));
  memcpy(h.magic, MAGIC, sizeof(MAGIC) - 1);
  snprintf(h.model, sizeof(h.model), "%s", cv->model);
  snprintf(h.session, sizeof(h.session), "%s", s->session);
  int64_t cfg[4] = {s->cfg.budget, s->cfg.sinks, s->cfg.lookahead,
                    s->cfg.page_size};
  memcpy(h.cfg, cfg, sizeof(cfg));
  h.held = s->held;
  h.newest = s->newest;
  h.committed = s->committed;
  h.n = s->n;
  h.n_map = s->n_map;
  h.hbase = s->hbase;
  h.hdig = s->hdig;
  h.n_state = s->n_state;
  FILE *f = fopen(tmp, "wb");
  bool ok = f != NULL && fwrite(&h, sizeof(h), 1, f) == 1 &&
            fwrite(s->hist, sizeof(*s->hist), s->n - s->hbase, f) ==
                s->n - s->hbase &&
            fwrite(s->map, sizeof(*s->map), s->n_map, f) == s->n_map &&
            fwrite(s->state, 1, s->n_state, f) == s->n_state;
  if (f != NULL && fclose(f) != 0)
    ok = false;
  if (!ok || rename(tmp, path) != 0) {
    say("cannot write %s: %s (the conversation is kept in memory only)\n",
        path, strerror(errno));
    unlink(tmp);
    return -1;
  }
  return 0;
}

/* Reads one file of the folder into a saved conversation, or NULL (a file
 * of another model or cache type, or damaged: removed). */
static saved_t *read_saved(convs_t *cv, const char *name) {
  char path[4096];
  snprintf(path, sizeof(path), "%s/%s", cv->dir, name);
  FILE *f = fopen(path, "rb");
  file_head_t h;
  saved_t *s = calloc(1, sizeof(*s));
  bool ok = f != NULL && s != NULL && fread(&h, sizeof(h), 1, f) == 1 &&
            memcmp(h.magic, MAGIC, sizeof(MAGIC) - 1) == 0 &&
            strncmp(h.model, cv->model, sizeof(h.model)) == 0 &&
            h.n_map <= h.n && h.hbase <= h.n &&
            h.hbase % HIST_BLOCK == 0 && h.n_state < ((uint64_t)1 << 40);
  if (ok) {
    s->hist = malloc((h.n - h.hbase + 1) * sizeof(*s->hist));
    s->map = malloc((h.n_map + 1) * sizeof(*s->map));
    s->state = malloc(h.n_state + 1);
    ok = s->hist && s->map && s->state &&
         fread(s->hist, sizeof(*s->hist), h.n - h.hbase, f) ==
             h.n - h.hbase &&
         fread(s->map, sizeof(*s->map), h.n_map, f) == h.n_map &&
         fread(s->state, 1, h.n_state, f) == h.n_state;
  }
  if (f != NULL)
    fclose(f);
  if (!ok) {
    if (s != NULL)
      free_saved(s);
    say("%s is not a conversation of this model and cache: removed\n",
        path);
    unlink(path);
    return NULL;
  }
  h.session[SEQ_ID_MAX] = '\0';
  snprintf(s->session, sizeof(s->session), "%s", h.session);
  s->cfg = (evd_session_cfg_t){h.cfg[0], h.cfg[1], h.cfg[2], h.cfg[3]};
  s->held = h.held;
  s->newest = h.newest;
  s->committed = h.committed;
  s->n = h.n;
  s->n_map = h.n_map;
  s->hbase = h.hbase;
  s->hdig = h.hdig;
  s->n_state = h.n_state;
  s->bytes = sizeof(*s) + (h.n - h.hbase) * sizeof(*s->hist) +
             h.n_map * sizeof(*s->map) + h.n_state;
  snprintf(s->file, sizeof(s->file), "%s", name);
  struct stat st;
  s->used_at = stat(path, &st) == 0 ? (double)st.st_mtime : 0;
  return s;
}

/* Loads the folder's conversations, most recently used first, as many as
 * --cache-ram holds (the rest are removed, their sessions deleted). */
static void load_dir(engine_t *e) {
  convs_t *cv = e->store;
  DIR *d = opendir(cv->dir);
  if (d == NULL)
    return;
  saved_t **all = NULL;
  size_t n = 0, cap = 0;
  struct dirent *de;
  while ((de = readdir(d)) != NULL) {
    unsigned long long k;
    if (sscanf(de->d_name, "conv-%llu.bin", &k) != 1 ||
        strstr(de->d_name, ".tmp") != NULL)
      continue;
    if (k > cv->next_file)
      cv->next_file = k;
    saved_t *s = read_saved(cv, de->d_name);
    if (s != NULL && grow(&all, &cap, n + 1, sizeof(*all)) == 0)
      all[n++] = s;
    else if (s != NULL)
      free_saved(s);
  }
  closedir(d);
  /* Oldest first, each pushed to the front: the newest ends first. */
  for (size_t i = 0; i < n; i++)
    for (size_t j = i + 1; j < n; j++)
      if (all[j]->used_at < all[i]->used_at) {
        saved_t *x = all[i];
        all[i] = all[j];
        all[j] = x;
      }
  for (size_t i = 0; i < n; i++) {
    if (room_for(e, all[i]->bytes)) {
      push_front(cv, all[i]);
    } else {
      char path[4096];
      path_of(cv, all[i], path, sizeof(path));
      unlink(path);
      lanes_delete(e->lanes, all[i]->session, 0);
      free_saved(all[i]);
    }
  }
  free(all);
  if (cv->count > 0)
    say("%u conversations found in %s (%zu bytes)\n", cv->count, cv->dir,
        cv->bytes);
}

/* ---- saving and restoring ------------------------------------------------ */

/* Saves the conversation parked in slot c into the store (its slot is
 * then free, its session kept); false when it does not fit (the caller
 * drops it). */
static bool save(engine_t *e, choice_t *c) {
  convs_t *cv = e->store;
  if (cv == NULL || cv->limit == 0)
    return false;
  size_t n_state = llama_state_seq_get_size(e->lm->ctx, c->s.id);
  size_t bytes = sizeof(saved_t) + (c->n - c->hbase) * sizeof(llama_token) +
                 c->s.map.n * sizeof(uint32_t) + n_state;
  if (n_state == 0 || !room_for(e, bytes))
    return false;
  saved_t *s = calloc(1, sizeof(*s));
  if (s == NULL)
    return false;
  s->hist = malloc((c->n - c->hbase + 1) * sizeof(*s->hist));
  s->map = malloc((c->s.map.n + 1) * sizeof(*s->map));
  s->state = malloc(n_state);
  if (s->hist == NULL || s->map == NULL || s->state == NULL ||
      llama_state_seq_get_data(e->lm->ctx, s->state, n_state, c->s.id) !=
          n_state) {
    free_saved(s);
    return false;
  }
  memcpy(s->hist, c->hist, (c->n - c->hbase) * sizeof(*s->hist));
  s->hbase = c->hbase;
  s->hdig = c->hdig;
  s->gen = c->gen;
  memcpy(s->map, c->s.map.held, c->s.map.n * sizeof(*s->map));
  snprintf(s->session, sizeof(s->session), "%s", c->s.session);
  s->cfg = c->s.cfg;
  s->held = c->s.held;
  s->newest = c->s.newest;
  s->committed = c->s.committed;
  s->n = c->n;
  s->n_map = c->s.map.n;
  s->n_state = n_state;
  s->bytes = bytes;
  s->used_at = c->used_at;
  if (cv->dir != NULL)
    write_saved(cv, s);
  push_front(cv, s);
  e->cc.saved++;
  return true;
}

/* Puts saved conversation s into free slot c (the cells through
 * llama_state_seq_set_data; the session as it was). 0, or -1 (s is then
 * dropped). */
static int restore(engine_t *e, choice_t *c, saved_t *s) {
  convs_t *cv = e->store;
  if (seq_init(&c->s, (int32_t)(c - e->slot), s->session,
               POS_ORIGINAL) != 0 ||
      grow(&c->hist, &c->cap, s->n - s->hbase + 2, sizeof(*c->hist)) != 0)
    goto fail;
  llama_memory_seq_rm(e->lm->mem, c->s.id, -1, -1);
  if (llama_state_seq_set_data(e->lm->ctx, s->state, s->n_state,
                               c->s.id) == 0) {
    say("llama.cpp could not restore the cells of session %s: it is "
        "dropped\n", s->session);
    goto fail;
  }
  for (uint32_t i = 0; i < s->n_map; i++)
    if (posmap_add(&c->s.map, s->map[i]) < 0)
      goto fail;
  memcpy(c->hist, s->hist, (s->n - s->hbase) * sizeof(*c->hist));
  c->n = s->n;
  c->peak = 0; /* put back from cell 0 */
  c->hbase = s->hbase;
  c->hdig = s->hdig;
  c->gen = s->gen;
  c->s.cfg = s->cfg;
  c->s.held = s->held;
  c->s.newest = s->newest;
  c->s.committed = s->committed;
  c->s.created = true;
  c->used_at = s->used_at;
  if (cv->dir != NULL && s->file[0] != '\0') {
    char path[4096];
    path_of(cv, s, path, sizeof(path));
    unlink(path); /* it lives in a slot again */
  }
  dump_restore(e->dump, c->s.id, c->s.session);
  free_saved(s);
  e->cc.restored++;
  return 0;
fail:
  llama_memory_seq_rm(e->lm->mem, c->s.id, -1, -1);
  seq_free(&c->s);
  push_front(cv, s);
  drop_saved(e, s);
  return -1;
}

static choice_t *free_slot(engine_t *e);

/* Takes s out of the store into a free slot (freed for it, a parked one
 * saved or dropped: s is out of the store first, so that making room
 * cannot drop it), restored there. The slot, or NULL (s kept, or dropped
 * when llama.cpp could not take its cells back). */
static choice_t *take_saved(engine_t *e, saved_t *s) {
  unlink_saved(e->store, s);
  choice_t *c = free_slot(e);
  if (c == NULL) {
    push_front(e->store, s);
    return NULL;
  }
  return restore(e, c, s) == 0 ? c : NULL;
}

/* ---- slots --------------------------------------------------------------- */

void conv_park(engine_t *e, choice_t *c) {
  c->parked = true;
  c->orphan = c->keep = false;
  c->sent = c->ready = NULL;
  c->used_at = clock_now();
  text_clear(&c->text);
  tq_sequences(e->q, --e->used);
}

/* Frees parked slot c for another conversation: saved if it fits, else
 * dropped (its cells and session go). */
static void evict(engine_t *e, choice_t *c) {
  bool kept = save(e, c);
  c->parked = false;
  if (kept) {
    dump_save(e->dump, c->s.id, c->s.session);
    llama_memory_seq_rm(e->lm->mem, c->s.id, -1, -1);
    seq_free(&c->s);
  } else {
    e->cc.dropped++;
    engine_give_back(e, c);
  }
}

/* The slot to use for a new sequence: a free one, else the least recently
 * used parked one (evicted), else NULL. */
static choice_t *free_slot(engine_t *e) {
  choice_t *lru = NULL;
  for (uint32_t i = 0; i < e->n_slot; i++) {
    choice_t *c = &e->slot[i];
    if (c->task != NULL || c->orphan)
      continue;
    if (!c->parked)
      return c;
    if (lru == NULL || c->used_at < lru->used_at)
      lru = c;
  }
  if (lru != NULL)
    evict(e, lru);
  return lru;
}

choice_t *conv_take(engine_t *e, task_t *t, uint32_t index, uint32_t *m) {
  *m = 0;
  bool may = index == 0 && t->want.cache_prompt && !e->o->no_cache_prompt;
  choice_t *best = NULL;
  saved_t *from = NULL;
  uint32_t bm = 0;
  digests_t dg = {NULL, 0};
  for (uint32_t i = 0; may && i < e->n_slot; i++) {
    choice_t *c = &e->slot[i];
    if (!c->parked)
      continue;
    uint32_t k = usable(e, c->hist, c->hbase, c->hdig, c->n, c->s.map.held,
                        c->s.map.n, t, &dg);
    if (k > bm || (k == bm && k > 0 && c->used_at > best->used_at)) {
      best = c;
      bm = k;
    }
  }
  for (saved_t *s = e->store ? e->store->head : NULL; may && s != NULL;
       s = s->next) {
    uint32_t k = usable(e, s->hist, s->hbase, s->hdig, s->n, s->map,
                        s->n_map, t, &dg);
    if (k > bm) {
      from = s;
      bm = k;
      best = NULL;
    }
  }
  free(dg.dig);
  if (may)
    bm > 0 ? e->cc.hits++ : e->cc.misses++;
  if (best != NULL) {
    best->parked = false;
    *m = bm;
    return best;
  }
  if (from != NULL) {
    choice_t *c = take_saved(e, from);
    if (c != NULL) {
      *m = bm;
      return c;
    }
  }
  return free_slot(e);
}

choice_t *conv_find(engine_t *e, task_t *t, fault_t *f) {
  for (uint32_t i = 0; i < e->n_slot; i++) {
    choice_t *c = &e->slot[i];
    if ((c->parked || c->task != NULL || c->orphan) &&
        strcmp(c->s.session, t->cont) == 0) {
      if (!c->parked) {
        fault_set(f, 409, "conversation_busy", "the conversation of "
                  "previous_response_id is being continued by another "
                  "request: wait for it, or send the whole history");
        return NULL;
      }
      if (c->gen != t->cont_gen || c->n != t->base) {
        fault_set(f, 409, "conversation_moved_on", "the conversation of "
                  "previous_response_id has moved on since (another "
                  "request continued it): continue the newest response, "
                  "or send the whole history");
        return NULL;
      }
      c->parked = false;
      e->cc.hits++;
      return c;
    }
  }
  for (saved_t *s = e->store ? e->store->head : NULL; s != NULL;
       s = s->next) {
    if (strcmp(s->session, t->cont) != 0)
      continue;
    if (s->gen != t->cont_gen || s->n != t->base) {
      fault_set(f, 409, "conversation_moved_on", "the conversation of "
                "previous_response_id has moved on since (another request "
                "continued it): continue the newest response, or send the "
                "whole history");
      return NULL;
    }
    choice_t *c = take_saved(e, s);
    if (c == NULL) {
      fault_set(f, 500, "restore_failed", "the conversation of "
                "previous_response_id could not be put back in a slot");
      return NULL;
    }
    e->cc.hits++;
    return c;
  }
  fault_set(f, 404, "previous_response_not_found", "the conversation of "
            "previous_response_id is no longer kept (dropped from "
            "--cache-ram, or serve restarted without --cache-dir): send "
            "the whole history");
  return NULL;
}

/* The digests' key of the folder (its file "key"), so that the
 * conversations kept there match their prompts after a restart: read, or
 * made (the engine's random one) and written. 0, or -1 with err set. */
static int folder_key(engine_t *e, char *err, size_t errlen) {
  char path[4096];
  snprintf(path, sizeof(path), "%s/key", e->store->dir);
  FILE *f = fopen(path, "rb");
  if (f != NULL) {
    uint64_t k[2];
    bool ok = fread(k, sizeof(k), 1, f) == 1;
    fclose(f);
    if (ok) {
      memcpy(e->key, k, sizeof(k));
      return 0;
    }
  }
  char tmp[4200];
  snprintf(tmp, sizeof(tmp), "%s.tmp", path);
  int fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC, 0600);
  bool ok = fd >= 0 && write(fd, e->key, sizeof(e->key)) ==
                           (ssize_t)sizeof(e->key);
  if (fd >= 0 && close(fd) != 0)
    ok = false;
  if (!ok || rename(tmp, path) != 0)
    return snprintf(err, errlen, "cannot write %s: %s", path,
                    strerror(errno)), -1;
  return 0;
}

int conv_store_open(engine_t *e, char *err, size_t errlen) {
  const serve_opts_t *o = e->o;
  convs_t *cv = calloc(1, sizeof(*cv));
  if (cv == NULL)
    return snprintf(err, errlen, "out of memory"), -1;
  e->store = cv;
  cv->limit = o->cache_ram < 0 ? SIZE_MAX : (size_t)o->cache_ram << 20;
  cv->dir = o->cache_dir;
  char desc[96];
  llama_model_desc(e->lm->model, desc, sizeof(desc));
  snprintf(cv->model, sizeof(cv->model), "%s %llu %s/%s", desc,
           (unsigned long long)llama_model_n_params(e->lm->model),
           lm_type_names[o->lm.exact ? LM_F32 : o->lm.type_k],
           lm_type_names[o->lm.exact ? LM_F32 : o->lm.type_v]);
  if (cv->dir != NULL) {
    if (mkdir(cv->dir, 0700) != 0 && errno != EEXIST)
      return snprintf(err, errlen, "cannot make --cache-dir %s: %s",
                      cv->dir, strerror(errno)), -1;
    if (access(cv->dir, W_OK | X_OK) != 0)
      return snprintf(err, errlen, "cannot write in --cache-dir %s: %s",
                      cv->dir, strerror(errno)), -1;
    if (folder_key(e, err, errlen) != 0)
      return -1;
    load_dir(e);
  }
  return 0;
}

void conv_store_close(engine_t *e) {
  convs_t *cv = e->store;
  for (uint32_t i = 0; i < e->n_slot && e->slot != NULL; i++) {
    choice_t *c = &e->slot[i];
    if (!c->parked)
      continue;
    /* Kept for the next start with --cache-dir; else its session goes. */
    if (cv == NULL || cv->dir == NULL || !save(e, c))
      engine_give_back(e, c);
    else
      seq_free(&c->s);
    c->parked = false;
  }
  if (cv == NULL)
    return;
  for (saved_t *s = cv->head, *next; s != NULL; s = next) {
    next = s->next;
    /* Without --cache-dir nothing outlives the process: the sessions go. */
    if (cv->dir == NULL)
      lanes_delete(e->lanes, s->session, 0);
    free_saved(s);
  }
  free(cv);
  e->store = NULL;
}

void conv_counts(engine_t *e, conv_counts_t *out) {
  *out = e->cc;
  out->parked = 0;
  for (uint32_t i = 0; i < e->n_slot; i++)
    out->parked += e->slot[i].parked;
  out->stored = e->store ? e->store->count : 0;
  out->stored_bytes = e->store ? e->store->bytes : 0;
}

/* Conversations in the engine's slots (engine_int.h): a request's
 * sequence stays parked in its slot when the request ends (its cells in
 * llama.cpp, its evictd session, the tokens it computed), and a request
 * whose prompt extends it, or shares all of it but a few last tokens,
 * continues it: the window goes back to where they part (evictd's
 * truncate, the cells removed) and only the prompt's new tokens are
 * decoded. A parked conversation whose slot another request needs is
 * saved (store.h: its cells through llama_state_seq_get_data, its session
 * kept) up to --cache-ram, least recently used first out; one dropped has
 * its session deleted.
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
 * is still held (hist_usable); else the prompt is decoded afresh. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/clock.h"
#include "common/grow.h"
#include "serve/engine/engine_int.h"

#define say(...) fprintf(stderr, "evictd-llama serve: " __VA_ARGS__)

void engine_give_back(engine_t *e, choice_t *c) {
  store_unlink(e->store, c->file);
  c->file[0] = '\0';
  c->dirty = false;
  llama_memory_seq_rm(e->lm->mem, c->s.id, -1, -1);
  if (c->s.created)
    lanes_delete(e->lanes, c->s.session, (uint32_t)c->s.id);
  seq_free(&c->s);
  c->orphan = c->keep = c->parked = false;
  c->sent = c->ready = NULL;
}

/* ---- saving and restoring ------------------------------------------------ */

/* A copy of what slot c holds now (its cells, its tokens below c->n, its
 * window as the map says), the session's state as given; NULL when it
 * does not fit or memory runs out. room: the room made for it first in
 * the store, 0 none (a copy for the writer), 1 a conversation's
 * (store_room), 2 a checkpoint's (store_room_ckpt). */
static saved_t *snapshot(engine_t *e, choice_t *c, uint32_t held,
                         uint32_t newest, uint32_t committed, int room) {
  if (!store_enabled(e->store))
    return NULL;
  size_t n_state = llama_state_seq_get_size(e->lm->ctx, c->s.id);
  size_t bytes = sizeof(saved_t) + (c->n - c->hbase) * sizeof(llama_token) +
                 c->s.map.n * sizeof(uint32_t) + n_state;
  if (n_state == 0 || (room == 1 && !store_room(e->store, bytes)) ||
      (room == 2 && !store_room_ckpt(e->store, bytes)))
    return NULL;
  saved_t *s = calloc(1, sizeof(*s));
  if (s == NULL)
    return NULL;
  s->hist = malloc((c->n - c->hbase + 1) * sizeof(*s->hist));
  s->map = malloc((c->s.map.n + 1) * sizeof(*s->map));
  s->state = malloc(n_state);
  if (s->hist == NULL || s->map == NULL || s->state == NULL ||
      llama_state_seq_get_data(e->lm->ctx, s->state, n_state, c->s.id) !=
          n_state) {
    saved_free(s);
    return NULL;
  }
  memcpy(s->hist, c->hist, (c->n - c->hbase) * sizeof(*s->hist));
  s->hbase = c->hbase;
  s->hdig = c->hdig;
  s->gen = c->gen;
  memcpy(s->map, c->s.map.held, c->s.map.n * sizeof(*s->map));
  snprintf(s->session, sizeof(s->session), "%s", c->s.session);
  s->cfg = c->s.cfg;
  s->held = held;
  s->newest = newest;
  s->committed = committed;
  s->n = c->n;
  s->n_map = c->s.map.n;
  s->n_state = n_state;
  s->bytes = bytes;
  s->used_at = c->used_at;
  return s;
}

/* Saves the conversation parked in slot c into the store (its slot is
 * then free, its session kept); false when it does not fit (the caller
 * drops it). */
static bool save(engine_t *e, choice_t *c) {
  saved_t *s = snapshot(e, c, c->s.held, c->s.newest, c->s.committed, 1);
  if (s == NULL)
    return false;
  /* Its file, if it has one, is the store's now. */
  snprintf(s->file, sizeof(s->file), "%s", c->file);
  c->file[0] = '\0';
  c->dirty = false;
  store_put(e->store, s);
  e->cc.saved++;
  return true;
}

bool conv_ckpt_wanted(const engine_t *e, const choice_t *c) {
  const task_t *t = c->task;
  /* A cache that cannot go back needs them even where the window keeps
   * everything: a regenerated answer, an edit. */
  return e->ck_max > 0 && c->index == 0 && t->want.cache_prompt &&
         !e->o->no_cache_prompt && store_enabled(e->store) &&
         (!e->lm->rewind ||
          (uint64_t)t->n_prompt + t->want.n_predict > e->budget);
}

void conv_checkpoint(engine_t *e, choice_t *c) {
  if (c->n == 0 || c->n == c->ck_at)
    return;
  /* The window as the steps below c->n left it: their answers are
   * followed, this pass's is not yet. */
  saved_t *s = snapshot(e, c, c->s.map.n, c->n - 1, c->n - 1, 2);
  if (s == NULL)
    return;
  c->ck_at = c->n;
  s->ckpt = true;
  s->used_at = clock_now();
  snprintf(s->session, sizeof(s->session), "ckpt-%llu",
           (unsigned long long)++e->ck_names);
  snprintf(c->ck_key, sizeof(c->ck_key), "%s", s->session);
  dump_keep(e->dump, c->s.id, s->session);
  store_put(e->store, s);
  store_trim_ckpt(e->store, e->ck_max);
  e->cc.ck_made++;
}

/* Puts saved conversation s into free slot c (the cells through
 * llama_state_seq_set_data; the session as it was). 0, or -1 (s is then
 * dropped). */
static int restore(engine_t *e, choice_t *c, saved_t *s, const char *id) {
  if (seq_init(&c->s, (int32_t)(c - e->slot), s->ckpt ? id : s->session,
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
  dump_restore(e->dump, c->s.id, s->session);
  /* A checkpoint's window goes to evictd under the new session when it
   * first steps: evictd does not hold it, and adopts it as the map says
   * (re-homing, common/change.c). The checkpoint stays, for the next
   * request that continues from there; this one does not keep it again. */
  c->ck_at = s->ckpt ? s->n : 0;
  snprintf(c->ck_key, sizeof(c->ck_key), "%s", s->ckpt ? s->session : "");
  /* The file of a saved one is the slot's now (still the crash copy). */
  snprintf(c->file, sizeof(c->file), "%s", s->ckpt ? "" : s->file);
  c->dirty = false;
  c->from = s->ckpt ? CACHE_CKPT : s->loaded ? CACHE_DISK : CACHE_SAVED;
  if (s->loaded && !s->ckpt)
    e->cc.disk_hits++;
  if (s->ckpt) {
    e->cc.ck_hits++;
    store_untake(e->store, s);
  } else {
    e->cc.restored++;
    store_restored(e->store, s); /* it lives in a slot again */
  }
  return 0;
fail:
  llama_memory_seq_rm(e->lm->mem, c->s.id, -1, -1);
  seq_free(&c->s);
  store_untake(e->store, s);
  store_drop(e->store, s);
  return -1;
}

static choice_t *free_slot(engine_t *e);

/* Takes s out of the store into a free slot (freed for it, a parked one
 * saved or dropped: s is out of the store first, so that making room
 * cannot drop it), restored there (a checkpoint under session id). The
 * slot, or NULL (s kept, or dropped when llama.cpp could not take its
 * cells back). */
static choice_t *take_saved(engine_t *e, saved_t *s, const char *id) {
  store_take(e->store, s);
  choice_t *c = free_slot(e);
  if (c == NULL) {
    store_untake(e->store, s);
    return NULL;
  }
  return restore(e, c, s, id) == 0 ? c : NULL;
}

/* ---- slots --------------------------------------------------------------- */

/* Writes parked c to its file (a copy of it, taken now: the writer
 * thread does the rest). */
static bool write_parked(engine_t *e, choice_t *c, double now) {
  c->dirty = false;
  c->synced = now;
  saved_t *s = snapshot(e, c, c->s.held, c->s.newest, c->s.committed, 0);
  if (s == NULL)
    return false;
  if (c->file[0] == '\0')
    store_name(e->store, c->file, sizeof(c->file));
  snprintf(s->file, sizeof(s->file), "%s", c->file);
  store_write(e->store, s);
  e->cc.written++;
  /* With it, its newest checkpoint: a regenerated answer after a crash. */
  if (c->ck_key[0] != '\0')
    store_write_ckpt(e->store, c->ck_key, c->file);
  return true;
}

double conv_sync(engine_t *e, double now, bool all) {
  double next = 0;
  for (uint32_t i = 0; i < e->n_slot; i++) {
    choice_t *c = &e->slot[i];
    if (!c->parked || !c->dirty)
      continue;
    double due = c->synced + e->sync_s;
    if (all || due <= now)
      write_parked(e, c, now);
    else if (next == 0 || due < next)
      next = due;
  }
  return next;
}

void conv_park(engine_t *e, choice_t *c) {
  c->parked = true;
  c->orphan = c->keep = false;
  c->sent = c->ready = NULL;
  c->used_at = clock_now();
  text_clear(&c->text);
  board_sequences(e->board, --e->used);
  /* With --cache-dir, on disk within --cache-write-ms (conv_sync). */
  if (store_durable(e->store)) {
    c->dirty = true;
    if (c->used_at >= c->synced + e->sync_s)
      write_parked(e, c, c->used_at);
  }
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

choice_t *conv_take(engine_t *e, task_t *t, uint32_t index, uint32_t *m,
                    const char *id) {
  *m = 0;
  bool may = index == 0 && t->want.cache_prompt && !e->o->no_cache_prompt;
  choice_t *best = NULL;
  saved_t *from = NULL;
  uint32_t bm = 0;
  hist_prompt_t hp = {.key = e->key, .tok = t->prompt, .n = t->n_prompt,
                      .by_id = t->base != 0, .budget = e->budget,
                      .max_back = e->max_back, .rewind = e->lm->rewind};
  for (uint32_t i = 0; may && i < e->n_slot; i++) {
    choice_t *c = &e->slot[i];
    if (!c->parked)
      continue;
    uint32_t k = hist_usable(&hp, c->hist, c->hbase, c->hdig, c->n,
                             c->s.map.held, c->s.map.n);
    if (k > bm || (k == bm && k > 0 && c->used_at > best->used_at)) {
      best = c;
      bm = k;
    }
  }
  for (saved_t *s = store_head(e->store); may && s != NULL; s = s->next) {
    uint32_t k = hist_usable(&hp, s->hist, s->hbase, s->hdig, s->n, s->map,
                             s->n_map);
    /* A checkpoint is a turn's boundary: a prompt goes on from it whole
     * (a regenerated answer, an edited message), never back from it. */
    if (s->ckpt && k != s->n)
      continue;
    if (k > bm) {
      from = s;
      bm = k;
      best = NULL;
    }
  }
  hist_prompt_free(&hp);
  if (may)
    bm > 0 ? e->cc.hits++ : e->cc.misses++;
  if (may && bm == 0 && hp.no_back)
    e->cc.no_back++;
  if (best != NULL) {
    best->parked = false;
    best->ck_at = 0;
    best->from = CACHE_CONV;
    *m = bm;
    return best;
  }
  if (from != NULL) {
    choice_t *c = take_saved(e, from, id);
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
      c->ck_at = 0;
      c->from = CACHE_CONV;
      e->cc.hits++;
      return c;
    }
  }
  for (saved_t *s = store_head(e->store); s != NULL; s = s->next) {
    if (s->ckpt || strcmp(s->session, t->cont) != 0)
      continue;
    if (s->gen != t->cont_gen || s->n != t->base) {
      fault_set(f, 409, "conversation_moved_on", "the conversation of "
                "previous_response_id has moved on since (another request "
                "continued it): continue the newest response, or send the "
                "whole history");
      return NULL;
    }
    choice_t *c = take_saved(e, s, NULL);
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

int conv_store_open(engine_t *e, char *err, size_t errlen) {
  const serve_opts_t *o = e->o;
  char desc[96], model[160];
  llama_model_desc(e->lm->model, desc, sizeof(desc));
  snprintf(model, sizeof(model), "%s %llu %s/%s", desc,
           (unsigned long long)llama_model_n_params(e->lm->model),
           lm_type_names[o->lm.exact ? LM_F32 : o->lm.type_k],
           lm_type_names[o->lm.exact ? LM_F32 : o->lm.type_v]);
  store_cfg_t cfg = {.cache_ram = o->cache_ram, .dir = o->cache_dir,
                     .model = model, .lanes = e->lanes};
  return store_open(&e->store, &cfg, e->key, err, errlen);
}

void conv_store_close(engine_t *e) {
  for (uint32_t i = 0; i < e->n_slot && e->slot != NULL; i++) {
    choice_t *c = &e->slot[i];
    if (!c->parked)
      continue;
    /* Kept for the next start with --cache-dir (its file written now, as
     * it is); else its session goes. */
    if (!store_durable(e->store) || !write_parked(e, c, clock_now()))
      engine_give_back(e, c);
    else
      seq_free(&c->s);
    c->parked = false;
  }
  store_close(e->store);
  e->store = NULL;
}

void conv_counts(engine_t *e, conv_counts_t *out) {
  *out = e->cc;
  out->parked = 0;
  for (uint32_t i = 0; i < e->n_slot; i++)
    out->parked += e->slot[i].parked;
  out->stored = store_count(e->store);
  out->stored_bytes = store_bytes(e->store);
  out->dropped += store_dropped(e->store);
  size_t ck_bytes;
  store_ckpt(e->store, &out->ck_held, &ck_bytes, &out->ck_dropped);
  out->ck_bytes = ck_bytes;
  store_disk(e->store, &out->disk_writes, &out->disk_bytes,
             &out->disk_errors, &out->disk_pending);
}

/* Saved conversations (store.c): what a parked conversation's slot held,
 * kept in host memory when the slot is needed for another (its cells as
 * llama_state_seq_get_data gives them, its tokens, its session's state),
 * least recently used first out within --cache-ram, and with --cache-dir
 * written to disk too, where a restarted serve finds them again. One
 * dropped has its session deleted (through the lanes). The store knows
 * nothing of the engine: the engine's slots put conversations in and take
 * them out (park.c). One thread's (the engine's). */
#ifndef EVICTD_LLAMA_SERVE_STORE_H
#define EVICTD_LLAMA_SERVE_STORE_H

#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "common/lanes.h"
#include "common/seq.h"
#include "evictd/client.h"
#include "llama.h"

/* A saved conversation, or a checkpoint: a conversation's state at one
 * of its turns' boundaries (park.c), kept while the conversation goes on.
 * A checkpoint has no session in evictd (session is its name in --dump's
 * record): the request that continues from it takes a session of its own,
 * which evictd adopts as the window was. Checkpoints stay in memory, out
 * of --cache-dir. */
typedef struct saved_s {
  struct saved_s *prev, *next; /* most recently used first */
  bool ckpt;                /* a checkpoint */
  atomic_int refs;          /* holders besides its owner (the writer) */
  bool loaded;              /* read from --cache-dir at start */
  char session[SEQ_ID_MAX + 1];
  evd_session_cfg_t cfg;
  uint32_t held, newest, committed;
  uint32_t n;               /* positions computed */
  uint32_t hbase;           /* hist holds the tokens of hbase..n-1 */
  uint64_t hdig;            /* the digest of those below (hist.h) */
  uint64_t gen;             /* its generation (choice_t's) */
  llama_token *hist;
  uint32_t *map;            /* the positions the cells hold, ascending */
  uint32_t n_map;
  uint8_t *state;           /* llama_state_seq_get_data's */
  size_t n_state;
  size_t bytes;             /* all of it */
  double used_at;
  char file[32];            /* its name in --cache-dir ("" without) */
} saved_t;

typedef struct store_s store_t;

typedef struct store_cfg_s {
  int64_t cache_ram;        /* MiB (-1: no limit, 0: none saved) */
  const char *dir;          /* --cache-dir, or NULL */
  const char *model;        /* what a saved conversation fits: the model
                               and the cache's types (files of another
                               are removed) */
  lanes_t *lanes;           /* where a dropped one's session is deleted */
} store_cfg_t;

/* Opens the store: with a folder, made if need be, its digests' key read
 * into key (or key, the caller's random one, written there, so that the
 * conversations kept there match their prompts after a restart), and the
 * conversations found there loaded, most recently used first, as many as
 * the limit holds (the rest removed, their sessions deleted). 0 and *out,
 * or -1 with a sentence in err. */
int store_open(store_t **out, const store_cfg_t *cfg, uint64_t key[2],
               char *err, size_t errlen);

/* Frees the store: without a folder the saved conversations' sessions are
 * deleted (nothing outlives the process); with one their files stay. */
void store_close(store_t *st);

/* Whether saving is on (a limit above 0). */
bool store_enabled(const store_t *st);

/* The most recently used saved conversation (then ->next), or NULL. */
saved_t *store_head(store_t *st);

/* Makes room for `need` bytes, dropping the least recently used
 * checkpoints, then conversations; false when it cannot fit at all. */
bool store_room(store_t *st, size_t need);

/* The same for a checkpoint, which drops only checkpoints: false when
 * the conversations leave no room. */
bool store_room_ckpt(store_t *st, size_t need);

/* Keeps s (taken) as the most recently used, written to its file with a
 * folder (a failure is told and leaves it in memory only). */
void store_put(store_t *st, saved_t *s);

/* Takes s out of the store's list, to be put in a slot: then
 * store_restored (it lives in the slot), or store_untake (back, as the
 * most recently used) and perhaps store_drop. */
void store_take(store_t *st, saved_t *s);
void store_untake(store_t *st, saved_t *s);

/* s, taken, is in a slot again: s freed, its file left (the slot's now:
 * the caller keeps its name, and writes it again or removes it). */
void store_restored(store_t *st, saved_t *s);

/* Whether conversations are written to a folder (--cache-dir). */
bool store_durable(const store_t *st);

/* A new file name for a conversation. */
void store_name(store_t *st, char *file, size_t len);

/* Writes s (a conversation in a slot, copied: not in the store) to its
 * file, s->file, through the folder's writer, and frees it. */
void store_write(store_t *st, saved_t *s);

/* Writes the checkpoint named key (if the store holds it) beside the
 * conversation file `file` (conv-N.bin: ckpt-N.bin, a newer one of the
 * conversation replacing it). It is removed when the checkpoint is
 * dropped, and read back at start as a checkpoint. */
void store_write_ckpt(store_t *st, const char *key, const char *file);

/* Removes a conversation's file (after the writes before it). */
void store_unlink(store_t *st, const char *file);

/* The folder's writes so far, their bytes, the failed ones, and those
 * waiting (all 0 without a folder). */
void store_disk(store_t *st, uint64_t *writes, uint64_t *bytes,
                uint64_t *errors, uint32_t *pending);

/* Drops s (in the store) for good: its file, its session. */
void store_drop(store_t *st, saved_t *s);

/* Frees a saved conversation the store does not hold. */
void saved_free(saved_t *s);

/* Drops the least recently used checkpoints while more than max are
 * held. */
void store_trim_ckpt(store_t *st, uint32_t max);

/* Saved conversations held now, their bytes, and those dropped so far
 * (checkpoints apart). */
uint32_t store_count(const store_t *st);
size_t store_bytes(const store_t *st);
uint64_t store_dropped(const store_t *st);

/* Checkpoints held now, their bytes, and those dropped so far. */
void store_ckpt(const store_t *st, uint32_t *count, size_t *bytes,
                uint64_t *dropped);

#endif

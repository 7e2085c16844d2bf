/* State directories for the tests and fuzz targets of the on-disk formats
 * (record.h, journal.h, snapshot.h): journal segments built record by
 * record, state recovered through evd_journal_open into a fresh API, tables
 * compared and windows checked. Only the public headers. */
#ifndef EVICTD_TESTS_STATE_FILES_H
#define EVICTD_TESTS_STATE_FILES_H

#include <fcntl.h>
#include <ftw.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "api.h"
#include "buf.h"
#include "crc.h"
#include "error.h"
#include "journal.h"
#include "log.h"
#include "record.h"
#include "session.h"
#include "snapshot.h"
#include "window.h"

/* Record header: u32 len + u64 lsn; a u32 CRC follows the payload. */
#define SF_REC_HDR 12u

/* ---- building segments ---------------------------------------------------- */

/* Starts a segment of `version` (1 or 2) in b. */
static inline void sf_segment(evd_buf_t *b, int version) {
  evd_buf_add(b, version == 1 ? EVD_SEG_MAGIC_V1 : EVD_SEG_MAGIC_V2,
              EVD_SEG_MAGIC_LEN);
}

/* Appends a record framed around payload[0..len): length, LSN, CRC. */
static inline void sf_frame(evd_buf_t *b, uint64_t lsn, const void *payload,
                            size_t len) {
  unsigned char h[SF_REC_HDR], c[4];

  evd_le32_set(h, (uint32_t)len);
  evd_le32_set(h + 4, (uint32_t)lsn);
  evd_le32_set(h + 8, (uint32_t)(lsn >> 32));
  evd_le32_set(c, evd_crc32c(evd_crc32c(0, h + 4, 8), payload, len));
  evd_buf_add(b, h, sizeof h);
  if (len > 0)
    evd_buf_add(b, payload, len);
  evd_buf_add(b, c, sizeof c);
}

/* Appends a record of ops[0..n). */
static inline void sf_record(evd_buf_t *b, uint64_t lsn, const evd_op_t *ops,
                             size_t n) {
  evd_buf_t p;
  size_t i;

  evd_buf_init(&p);
  for (i = 0; i < n; i++)
    evd_record_put_op(&p, &ops[i]);
  sf_frame(b, lsn, p.data, p.len);
  evd_buf_free(&p);
}

/* Op constructors (ids are NUL-terminated literals). */
static inline evd_op_t sf_create(const char *id, uint32_t budget,
                                 uint32_t sinks, uint32_t lookahead,
                                 uint32_t page_size) {
  evd_op_t op = {.type = EVD_OP_CREATE2, .id = id, .idlen = strlen(id)};
  op.cfg = (evd_session_config_t){budget, sinks, lookahead, page_size};
  return op;
}

static inline evd_op_t sf_step(const char *id, uint32_t flags, uint32_t arg,
                               const uint32_t *pos, uint32_t n) {
  return (evd_op_t){.type = EVD_OP_STEP2, .id = id, .idlen = strlen(id),
                    .flags = flags, .arg = arg, .positions = pos, .n = n};
}

static inline evd_op_t sf_op(evd_op_type_t type, const char *id,
                             uint32_t arg) {
  return (evd_op_t){.type = type, .id = id, .idlen = strlen(id), .arg = arg,
                    .budget = arg};
}

static inline evd_op_t sf_fork(const char *id, const char *child) {
  return (evd_op_t){.type = EVD_OP_FORK, .id = id, .idlen = strlen(id),
                    .child = child, .childlen = strlen(child)};
}

/* An adoption of kept[0..n) in slots[0..n) with that newest (flags:
 * EVD_OP_REPLACED when it replaces the session). */
static inline evd_op_t sf_adopt(const char *id, uint32_t flags,
                                evd_session_config_t cfg,
                                const uint32_t *kept, const uint32_t *slots,
                                uint32_t n, uint32_t newest) {
  return (evd_op_t){.type = EVD_OP_ADOPT, .id = id, .idlen = strlen(id),
                    .flags = flags, .cfg = cfg, .arg = newest,
                    .positions = kept, .slots = slots, .n = n};
}

/* A story of every op type over four sessions, one record per entry of
 * SF_STORY (its ops from sf_story_ops); each record applies after the
 * ones before it. */
static const uint32_t sf_p123[] = {1, 2, 3}, sf_p45[] = {4, 5},
                      sf_p67[] = {6, 7}, sf_p1to9[] = {1, 2, 3, 4, 5, 6, 7,
                                                       8, 9};
/* The adoptions' states: d (budget 4, sinks 1) holds 0, 5, 9 in the
 * canonical slots; b is replaced by a paged session (budget 6) holding 3,
 * 4, 7 in slots a ring turned by 3 gives them. */
static const uint32_t sf_d_kept[] = {0, 5, 9}, sf_d_slots[] = {0, 1, 2},
                      sf_b_kept[] = {3, 4, 7}, sf_b_slots[] = {3, 4, 5};
#define SF_STORY 14

/* The ops of record k (0-based) of the story into ops[]; returns how many. */
static inline size_t sf_story_ops(int k, evd_op_t *ops) {
  switch (k) {
  case 0: ops[0] = sf_create("a", 4, 1, 2, 0); return 1;
  case 1: ops[0] = sf_step("a", 0, 0, sf_p123, 3); return 1;
  case 2: ops[0] = sf_step("a", EVD_RP_TENTATIVE, 0, sf_p45, 2); return 1;
  case 3: ops[0] = sf_op(EVD_OP_COMMIT, "a", 4); return 1;
  case 4: ops[0] = sf_fork("a", "b"); return 1;
  case 5: /* a batch: two sessions in one record */
    ops[0] = sf_step("b", 0, 0, sf_p67, 2);
    ops[1] = sf_create("c.page", 8, 0, 1, 2);
    return 2;
  case 6: ops[0] = sf_step("c.page", 0, 0, sf_p1to9, 9); return 1;
  case 7: ops[0] = sf_op(EVD_OP_EVICT, "c.page", 5); return 1;
  case 8: ops[0] = sf_op(EVD_OP_TRUNCATE, "b", 7); return 1;
  case 9: ops[0] = sf_step("a", EVD_RP_COMMIT_ARG, 4, NULL, 0); return 1;
  case 10: ops[0] = sf_create("gone", 2, 0, 1, 0); return 1;
  case 11: ops[0] = sf_op(EVD_OP_DELETE, "gone", 0); return 1;
  case 12:
    ops[0] = sf_adopt("d", 0, (evd_session_config_t){4, 1, 1, 0}, sf_d_kept,
                      sf_d_slots, 3, 11);
    return 1;
  default:
    ops[0] = sf_adopt("b", EVD_OP_REPLACED,
                      (evd_session_config_t){6, 0, 1, 2}, sf_b_kept,
                      sf_b_slots, 3, 8);
    return 1;
  }
}

/* Appends records from..to-1 of the story, LSN = index + 1. */
static inline void sf_story(evd_buf_t *b, int from, int to) {
  evd_op_t ops[2];
  int k;

  for (k = from; k < to; k++)
    sf_record(b, (uint64_t)k + 1, ops, sf_story_ops(k, ops));
}

/* ---- directories ---------------------------------------------------------- */

/* Makes a fresh directory (under /dev/shm when there is one: the journal
 * syncs, and tmpfs makes that free) into dir[0..len). Returns 0 or -1. */
static inline int sf_mkdtemp(char *dir, size_t len) {
  const char *tmp = access("/dev/shm", W_OK) == 0 ? "/dev/shm" : getenv("TMPDIR");

  snprintf(dir, len, "%s/evictd-state.XXXXXX",
           tmp != NULL && tmp[0] != '\0' ? tmp : "/tmp");
  return mkdtemp(dir) == NULL ? -1 : 0;
}

static inline int sf_rm_entry(const char *p, const struct stat *st, int flag,
                              struct FTW *ftw) {
  (void)st, (void)flag, (void)ftw;
  return remove(p);
}

/* Removes dir and everything in it. */
static inline void sf_rmtree(const char *dir) {
  nftw(dir, sf_rm_entry, 8, FTW_DEPTH | FTW_PHYS);
}

/* Writes dir/name with data[0..n). Returns 0 or -1. */
static inline int sf_put(const char *dir, const char *name, const void *data,
                         size_t n) {
  char path[600];
  FILE *f;
  size_t w;

  snprintf(path, sizeof path, "%s/%s", dir, name);
  f = fopen(path, "wb");
  if (f == NULL)
    return -1;
  w = n > 0 ? fwrite(data, 1, n, f) : 0;
  return fclose(f) == 0 && w == n ? 0 : -1;
}

/* Reads dir/name into b (reset first). Returns 0 or -1. */
static inline int sf_get(const char *dir, const char *name, evd_buf_t *b) {
  char path[600], chunk[4096];
  FILE *f;
  size_t n;

  snprintf(path, sizeof path, "%s/%s", dir, name);
  f = fopen(path, "rb");
  if (f == NULL)
    return -1;
  evd_buf_reset(b, 0);
  while ((n = fread(chunk, 1, sizeof chunk, f)) > 0)
    evd_buf_add(b, chunk, n);
  fclose(f);
  return 0;
}

/* ---- recovery --------------------------------------------------------------- */

/* A fresh API with room for everything the tests make. Recovery's info and
 * warning lines (a torn record dropped) are expected here: errors only. */
static inline evd_api_t *sf_api(void) {
  evd_config_t cfg;
  evd_api_t *api = NULL;

  evd_log_setup(EVD_LOG_ERROR, EVD_LOG_TEXT);
  evd_config_defaults(&cfg);
  cfg.max_sessions = 1000;
  if (evd_api_new(&api, &cfg) != 0)
    return NULL;
  return api;
}

/* The --max-budget recovery keeps to: sessions above it are left out. */
#define SF_MAX_BUDGET 4096u

/* Opens the journal in dir into api (its table), as the daemon's start-up
 * does with --max-budget SF_MAX_BUDGET. Returns what evd_journal_open did;
 * *j is set on success. */
static inline int sf_open(const char *dir, evd_api_t *api, evd_journal_t **j,
                          char *why, size_t len) {
  why[0] = '\0';
  return evd_journal_open(j, dir, EVD_FSYNC_NO, UINT64_MAX, SF_MAX_BUDGET,
                          evd_api_table(api), evd_api_apply, api, why, len);
}

/* Decodes one payload of a `version` segment, handing each op to fn. */
static inline int sf_decode(const void *p, size_t len, int version,
                            evd_apply_fn fn, void *ctx) {
  uint32_t *scratch = NULL;
  size_t cap = 0;
  int err = evd_record_apply(p, len, version, fn, ctx, &scratch, &cap);
  free(scratch);
  return err;
}

/* Applies one payload of a `version` segment to api, as recovery does. */
static inline int sf_apply_payload(evd_api_t *api, const void *p, size_t len,
                                   int version) {
  return sf_decode(p, len, version, evd_api_apply, api);
}

/* Applies the story's records [0, k) to api, as recovery would. Returns 0
 * or the first error. */
static inline int sf_story_apply(evd_api_t *api, int k) {
  evd_op_t ops[2];
  evd_buf_t p;
  size_t n, o;
  int i, err = 0;

  evd_buf_init(&p);
  for (i = 0; i < k && err == 0; i++) {
    n = sf_story_ops(i, ops);
    evd_buf_reset(&p, 0);
    for (o = 0; o < n; o++)
      evd_record_put_op(&p, &ops[o]);
    err = sf_apply_payload(api, p.data, p.len, 2);
  }
  evd_buf_free(&p);
  return err;
}

/* Snapshot of table at lsn into dirfd, and back into a fresh table. */
static inline int sf_snapshot_write(int dirfd, const evd_table_t *t,
                                    uint64_t lsn) {
  return evd_snapshot_write(dirfd, t, lsn, NULL);
}

static inline int sf_snapshot_load(int dirfd, evd_table_t *t, uint64_t *lsn,
                                   char *why, size_t len) {
  uint64_t bytes = 0;
  why[0] = '\0';
  return evd_snapshot_load(dirfd, t, NULL, lsn, &bytes, why, len);
}

/* ---- checks ----------------------------------------------------------------- */

/* NULL when the window keeps its invariants, else which one it breaks: at
 * most budget + lookahead held, positions strictly increasing up to the
 * newest, each in its own slot, drafts among the held ones, committed <=
 * newest. */
static inline const char *sf_window_bad(const evd_window_t *w,
                                        uint32_t cap) {
  uint32_t n = evd_window_size(w);
  uint32_t i, slot, prev = 0, p;
  unsigned char seen[1024];

  if (n > cap)
    return "holds more than budget + lookahead";
  if (evd_window_tentative(w) > n)
    return "more drafts than positions";
  if (evd_window_committed(w) > evd_window_newest(w))
    return "committed beyond the newest";
  if (cap <= sizeof seen)
    memset(seen, 0, cap);
  for (i = 0; i < n; i++) {
    p = evd_window_at(w, i, &slot);
    if (i > 0 && p <= prev)
      return "positions not increasing";
    if (p > evd_window_newest(w))
      return "a position beyond the newest";
    if (slot >= cap)
      return "a slot out of range";
    if (cap <= sizeof seen) {
      if (seen[slot])
        return "two positions in one slot";
      seen[slot] = 1;
    }
    prev = p;
  }
  return NULL;
}

/* NULL when every session of t keeps its window's invariants. */
static inline const char *sf_table_bad(const evd_table_t *t) {
  const evd_session_t *s;
  const char *bad;

  evd_session_config_t cfg;

  for (s = evd_table_oldest(t); s != NULL; s = evd_table_younger(s)) {
    evd_session_config(s, &cfg);
    bad = sf_window_bad(evd_session_window(s), cfg.budget + cfg.lookahead);
    if (bad != NULL)
      return bad;
  }
  return NULL;
}

/* 1 when a and b hold the same sessions in the same states. */
static inline int sf_same_tables(evd_table_t *a, evd_table_t *b) {
  const evd_session_t *s, *o;

  if (evd_table_count(a) != evd_table_count(b))
    return 0;
  for (s = evd_table_oldest(a); s != NULL; s = evd_table_younger(s)) {
    o = evd_table_find(b, s->id, s->idlen);
    if (o == NULL || !evd_session_same_state(s, o))
      return 0;
  }
  return 1;
}

#endif

/* Writing the run record of --dump (see dump.h), every event a JSON
 * object made with jansson. */
#include "common/dump.h"

#include <errno.h>
#include <jansson.h>
#include <stdlib.h>
#include <string.h>

int dump_open(dump_t *d, const char *prefix) {
  memset(d, 0, sizeof(*d));
  size_t n = strlen(prefix) + 8;
  char *path = malloc(n);
  if (path == NULL)
    return -1;
  snprintf(path, n, "%s.jsonl", prefix);
  d->events = fopen(path, "w");
  snprintf(path, n, "%s.f32", prefix);
  d->logits = d->events != NULL ? fopen(path, "wb") : NULL;
  int saved = errno;
  free(path);
  if (d->logits == NULL) {
    if (d->events != NULL)
      fclose(d->events);
    errno = saved;
    return -1;
  }
  return 0;
}

int dump_close(dump_t *d) {
  int rc = d->failed ? -1 : 0;
  FILE *f[2] = {d->events, d->logits};
  for (int i = 0; i < 2; i++)
    if (f[i] != NULL && (ferror(f[i]) | fclose(f[i])) != 0)
      rc = -1;
  memset(d, 0, sizeof(*d));
  return rc;
}

/* One event, one line: jansson writes it (every string escaped as JSON
 * wants, a model path with control characters included). Takes the
 * reference of ev. */
static void put(dump_t *d, json_t *ev) {
  if (ev == NULL || json_dumpf(ev, d->events, JSON_COMPACT) != 0)
    d->failed = true;
  else
    fputc('\n', d->events);
  json_decref(ev);
}

static json_t *list(const uint32_t *v, size_t n) {
  json_t *a = json_array();
  for (size_t i = 0; a != NULL && i < n; i++)
    json_array_append_new(a, json_integer(v[i]));
  return a;
}

void dump_start(dump_t *d, const char *model, int n_vocab, uint32_t budget,
                uint32_t sinks, uint32_t lookahead, uint32_t sequences,
                uint32_t draft_n, const char *positions) {
  if (d != NULL)
    put(d, json_pack("{s:s,s:s,s:i,s:I,s:I,s:I,s:I,s:I,s:s}", "op", "start",
                     "model", model, "n_vocab", n_vocab, "budget",
                     (json_int_t)budget, "sinks", (json_int_t)sinks,
                     "lookahead", (json_int_t)lookahead, "sequences",
                     (json_int_t)sequences, "draft_n", (json_int_t)draft_n,
                     "positions", positions));
}

void dump_step(dump_t *d, int seq, const uint32_t *pos, size_t n,
               bool tentative, int64_t commit) {
  if (d == NULL)
    return;
  json_t *ev = json_pack("{s:s,s:i,s:o,s:b}", "op", "step", "seq", seq,
                         "positions", list(pos, n), "tentative", tentative);
  if (ev != NULL && commit >= 0)
    json_object_set_new(ev, "commit", json_integer(commit));
  put(d, ev);
}

void dump_remove(dump_t *d, const char *model, int seq, const char *why,
                 const uint32_t *pos, size_t n) {
  if (d != NULL && n > 0)
    put(d, json_pack("{s:s,s:s,s:i,s:s,s:o}", "op", "remove", "model", model,
                     "seq", seq, "why", why, "positions", list(pos, n)));
}

void dump_fork(dump_t *d, int seq, int into) {
  if (d != NULL)
    put(d, json_pack("{s:s,s:i,s:i}", "op", "fork", "seq", seq, "into",
                     into));
}

void dump_truncate(dump_t *d, int seq, uint32_t from) {
  if (d != NULL)
    put(d, json_pack("{s:s,s:i,s:I}", "op", "truncate", "seq", seq, "from",
                     (json_int_t)from));
}

void dump_commit(dump_t *d, int seq, uint32_t newest) {
  if (d != NULL)
    put(d, json_pack("{s:s,s:i,s:I}", "op", "commit", "seq", seq, "newest",
                     (json_int_t)newest));
}

void dump_open_seq(dump_t *d, int seq) {
  if (d != NULL)
    put(d, json_pack("{s:s,s:i}", "op", "open", "seq", seq));
}

void dump_save(dump_t *d, int seq, const char *key) {
  if (d != NULL)
    put(d, json_pack("{s:s,s:i,s:s}", "op", "save", "seq", seq, "key", key));
}

void dump_keep(dump_t *d, int seq, const char *key) {
  if (d != NULL)
    put(d, json_pack("{s:s,s:i,s:s}", "op", "keep", "seq", seq, "key", key));
}

void dump_restore(dump_t *d, int seq, const char *key) {
  if (d != NULL)
    put(d, json_pack("{s:s,s:i,s:s}", "op", "restore", "seq", seq, "key",
                     key));
}

void dump_cache(dump_t *d, const char *model, int seq, int32_t pos_min,
                int32_t pos_max) {
  if (d != NULL)
    put(d, json_pack("{s:s,s:s,s:i,s:i,s:i}", "op", "cache", "model", model,
                     "seq", seq, "min", pos_min, "max", pos_max));
}

void dump_pass(dump_t *d, lm_t *lm) { dump_pass_at(d, lm, NULL); }

void dump_pass_at(dump_t *d, lm_t *lm, const uint32_t *abs) {
  if (d == NULL)
    return;
  const struct llama_batch *b = &lm->batch;
  json_t *toks = json_array();
  for (int32_t i = 0; toks != NULL && i < b->n_tokens; i++)
    json_array_append_new(toks, abs != NULL
        ? json_pack("[i,I,i,i]", b->seq_id[i][0], (json_int_t)abs[i],
                    b->token[i], b->pos[i])
        : json_pack("[i,i,i]", b->seq_id[i][0], b->pos[i], b->token[i]));
  put(d, json_pack("{s:s,s:s,s:I,s:o}", "op", "pass", "model", lm->label,
                   "row", (json_int_t)d->rows, "tokens", toks));
  for (int32_t i = 0; i < b->n_tokens; i++) {
    fwrite(lm_logits(lm, i), sizeof(float), (size_t)lm->n_vocab, d->logits);
    d->rows++;
  }
}

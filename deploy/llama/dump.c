/* Writing the run record of --dump (see dump.h). */
#include "dump.h"

#include <errno.h>
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
  int rc = 0;
  if (d->events != NULL && (ferror(d->events) || fclose(d->events) != 0))
    rc = -1;
  if (d->logits != NULL && (ferror(d->logits) || fclose(d->logits) != 0))
    rc = -1;
  memset(d, 0, sizeof(*d));
  return rc;
}

static void list(FILE *f, const uint32_t *v, size_t n) {
  fputc('[', f);
  for (size_t i = 0; i < n; i++)
    fprintf(f, i ? ",%u" : "%u", v[i]);
  fputc(']', f);
}

void dump_start(dump_t *d, const char *model, int n_vocab, uint32_t budget,
                uint32_t sinks, uint32_t lookahead, uint32_t sequences,
                uint32_t draft_n, const char *positions) {
  if (d == NULL)
    return;
  fprintf(d->events, "{\"op\":\"start\",\"model\":\"");
  for (const char *p = model; *p; p++) /* a path: escape what JSON needs */
    fprintf(d->events, (*p == '"' || *p == '\\') ? "\\%c" : "%c", *p);
  fprintf(d->events, "\",\"n_vocab\":%d,\"budget\":%u,\"sinks\":%u,"
          "\"lookahead\":%u,\"sequences\":%u,\"draft_n\":%u,"
          "\"positions\":\"%s\"}\n", n_vocab, budget, sinks, lookahead,
          sequences, draft_n, positions);
}

void dump_step(dump_t *d, int seq, const uint32_t *pos, size_t n,
               bool tentative, int64_t commit) {
  if (d == NULL)
    return;
  fprintf(d->events, "{\"op\":\"step\",\"seq\":%d,\"positions\":", seq);
  list(d->events, pos, n);
  fprintf(d->events, ",\"tentative\":%s", tentative ? "true" : "false");
  if (commit >= 0)
    fprintf(d->events, ",\"commit\":%lld", (long long)commit);
  fputs("}\n", d->events);
}

void dump_remove(dump_t *d, const char *model, int seq, const char *why,
                 const uint32_t *pos, size_t n) {
  if (d == NULL || n == 0)
    return;
  fprintf(d->events, "{\"op\":\"remove\",\"model\":\"%s\",\"seq\":%d,"
          "\"why\":\"%s\",\"positions\":", model, seq, why);
  list(d->events, pos, n);
  fputs("}\n", d->events);
}

void dump_fork(dump_t *d, int seq, int into) {
  if (d != NULL)
    fprintf(d->events, "{\"op\":\"fork\",\"seq\":%d,\"into\":%d}\n", seq,
            into);
}

void dump_truncate(dump_t *d, int seq, uint32_t from) {
  if (d != NULL)
    fprintf(d->events, "{\"op\":\"truncate\",\"seq\":%d,\"from\":%u}\n", seq,
            from);
}

void dump_commit(dump_t *d, int seq, uint32_t newest) {
  if (d != NULL)
    fprintf(d->events, "{\"op\":\"commit\",\"seq\":%d,\"newest\":%u}\n", seq,
            newest);
}

void dump_cache(dump_t *d, const char *model, int seq, int32_t pos_min,
                int32_t pos_max) {
  if (d != NULL)
    fprintf(d->events, "{\"op\":\"cache\",\"model\":\"%s\",\"seq\":%d,"
            "\"min\":%d,\"max\":%d}\n", model, seq, pos_min, pos_max);
}

void dump_pass(dump_t *d, lm_t *lm) { dump_pass_at(d, lm, NULL); }

void dump_pass_at(dump_t *d, lm_t *lm, const uint32_t *abs) {
  if (d == NULL)
    return;
  const struct llama_batch *b = &lm->batch;
  fprintf(d->events, "{\"op\":\"pass\",\"model\":\"%s\",\"row\":%llu,"
          "\"tokens\":[", lm->label, (unsigned long long)d->rows);
  for (int32_t i = 0; i < b->n_tokens; i++) {
    if (abs != NULL)
      fprintf(d->events, "%s[%d,%u,%d,%d]", i ? "," : "", b->seq_id[i][0],
              abs[i], b->token[i], b->pos[i]);
    else
      fprintf(d->events, "%s[%d,%d,%d]", i ? "," : "", b->seq_id[i][0],
              b->pos[i], b->token[i]);
  }
  fputs("]}\n", d->events);
  for (int32_t i = 0; i < b->n_tokens; i++) {
    fwrite(lm_logits(lm, i), sizeof(float), (size_t)lm->n_vocab, d->logits);
    d->rows++;
  }
}

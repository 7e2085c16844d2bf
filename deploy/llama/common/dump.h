/* evictd-llama's record of a run (--dump PREFIX), for the end-to-end check:
 * PREFIX.jsonl holds one JSON object per event (evictd requests, what the
 * engine removed from a cache, each llama.cpp pass with its tokens), and
 * PREFIX.f32 the logits of every token of every pass, float32, n_vocab per
 * row, in pass order. The format is described in deploy/llama/README.md. */
/* Used by generate and serve (serve's sequences come and go: open,
 * save, restore). */
#ifndef EVICTD_LLAMA_DUMP_H
#define EVICTD_LLAMA_DUMP_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "common/lm.h"

typedef struct dump_s {
  FILE *events;
  FILE *logits;
  uint64_t rows; /* rows written to the .f32 file */
  bool failed;   /* an event could not be made */
} dump_t;

/* Opens PREFIX.jsonl and PREFIX.f32 (truncating). 0, or -1 with errno. */
int dump_open(dump_t *d, const char *prefix);

/* Flushes and closes; returns -1 if a write failed anywhere. */
int dump_close(dump_t *d);

/* The events. `d` NULL (no --dump) makes each a no-op. */
void dump_start(dump_t *d, const char *model, int n_vocab, uint32_t budget,
                uint32_t sinks, uint32_t lookahead, uint32_t sequences,
                uint32_t draft_n, const char *positions);
void dump_step(dump_t *d, int seq, const uint32_t *pos, size_t n,
               bool tentative, int64_t commit);
void dump_remove(dump_t *d, const char *model, int seq, const char *why,
                 const uint32_t *pos, size_t n);
void dump_fork(dump_t *d, int seq, int into);
void dump_truncate(dump_t *d, int seq, uint32_t from);
void dump_commit(dump_t *d, int seq, uint32_t newest);
/* serve: a fresh session starts in sequence seq (its cells emptied: the
 * window holds position 0 again); the conversation of sequence seq is
 * saved under key (its cells then emptied), or a copy of it kept under key
 * (a checkpoint: seq goes on as it was); the one saved or kept under key
 * is put in sequence seq. */
void dump_open_seq(dump_t *d, int seq);
void dump_save(dump_t *d, int seq, const char *key);
void dump_keep(dump_t *d, int seq, const char *key);
void dump_restore(dump_t *d, int seq, const char *key);
/* What llama.cpp's cache holds for a sequence just before a pass: its
 * smallest and largest positions (-1 when none). */
void dump_cache(dump_t *d, const char *model, int seq, int32_t pos_min,
                int32_t pos_max);
/* A pass of lm's last batch: every token must have had its output set. */
void dump_pass(dump_t *d, lm_t *lm);
/* The same, each token's absolute position abs[i] recorded with the
 * position llama.cpp was given ([seq, abs, token, pos]; --positions
 * cache); abs NULL is dump_pass. */
void dump_pass_at(dump_t *d, lm_t *lm, const uint32_t *abs);

#endif

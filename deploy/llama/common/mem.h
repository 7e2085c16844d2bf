/* What llama.cpp made a context's memory of, and removing positions from
 * the part of it that holds them by position (common/mem.cpp: llama.cpp's
 * memory classes, which its C API does not name, behind a C interface).
 *
 * A model's layers keep one of three kinds of state: full attention (a
 * cell per position, any of which can go), sliding-window or chunked
 * attention (llama.cpp's own window: a cell per position within it, the
 * cells of positions it leaves behind reused), and recurrent (a state of
 * fixed size per sequence that has read every position and loses none).
 * Hybrids have attention layers and recurrent ones. */
#ifndef EVICTD_LLAMA_MEM_H
#define EVICTD_LLAMA_MEM_H

#include <stdbool.h>
#include <stdint.h>

#include "llama.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef enum {
  LM_MEM_FULL,      /* attention layers alone, every one full */
  LM_MEM_WINDOWED,  /* attention layers, some (or all) of them windowed */
  LM_MEM_RECURRENT, /* recurrent layers alone */
  LM_MEM_HYBRID,    /* recurrent layers and attention layers */
  LM_MEM_OTHER      /* a cache of its own (sparse attention's) */
} lm_mem_kind_t;

/* The kind of mem, the context's memory (n_swa: the model's
 * llama_model_n_swa, which a plain cache of windowed layers has). */
lm_mem_kind_t lm_mem_kind(llama_memory_t mem, int32_t n_swa);

/* "full attention", "sliding-window attention", ... for messages. */
const char *lm_mem_name(lm_mem_kind_t k);

/* "full", "windowed", "recurrent", "hybrid", "other": a label. */
const char *lm_mem_label(lm_mem_kind_t k);

/* Removes positions [p0, p1) of sequence seq from the attention layers'
 * cells alone: a recurrent state has read them and keeps what it read.
 * (llama_memory_seq_rm of a hybrid hands the range to its recurrent part
 * too, which leaves older positions alone but rolls back, or refuses, a
 * range that reaches the newest position it read: what a budget of 1
 * evicts.) A position the windowed layers' cache no longer holds is gone
 * from it already. false when llama.cpp refuses. */
bool lm_mem_rm(llama_memory_t mem, int32_t seq, int32_t p0, int32_t p1);

/* The smallest (max false) or largest position of sequence seq in the
 * cells of the attention layers that keep every position they are not
 * told to remove (a windowed model's full layers; a recurrent model's
 * state, its newest); -1 when none. */
int32_t lm_mem_pos(llama_memory_t mem, int32_t seq, bool max);

#ifdef __cplusplus
}
#endif

#endif

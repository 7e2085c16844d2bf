/* posmap_remove bound to llama.cpp's memory API: llama_memory_seq_rm and
 * llama_memory_seq_add on lm's cache. */
#include "lm.h"
#include "posmap.h"

static int rm(void *ud, int32_t seq, int32_t p0, int32_t p1) {
  lm_t *lm = ud;
  return llama_memory_seq_rm(lm->mem, seq, p0, p1) ? 0 : -1;
}

static void shift(void *ud, int32_t seq, int32_t p0, int32_t p1,
                  int32_t delta) {
  lm_t *lm = ud;
  llama_memory_seq_add(lm->mem, seq, p0, p1, delta);
}

int posmap_remove(posmap_t *m, lm_t *lm, int32_t seq, const uint32_t *v,
                  size_t n) {
  static const posmap_ops_t ops = {rm, shift};
  return posmap_remove_with(m, &ops, lm, seq, v, n);
}

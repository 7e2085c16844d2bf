/* llama.cpp's memory classes behind common/mem.h. The library exports
 * them (and their type information) though its C API does not name them;
 * their headers come from the tree's src/ (config.mk). */
#include "common/mem.h"

#include "llama-kv-cache-iswa.h"
#include "llama-kv-cache.h"
#include "llama-memory-hybrid-idx.h"
#include "llama-memory-hybrid-iswa.h"
#include "llama-memory-hybrid.h"
#include "llama-memory-recurrent.h"

#include <typeinfo>

lm_mem_kind_t lm_mem_kind(llama_memory_t mem, int32_t n_swa) {
  if (dynamic_cast<llama_memory_hybrid *>(mem) != nullptr ||
      dynamic_cast<llama_memory_hybrid_iswa *>(mem) != nullptr)
    return LM_MEM_HYBRID;
  if (dynamic_cast<llama_memory_recurrent *>(mem) != nullptr)
    return LM_MEM_RECURRENT;
  if (typeid(*mem) == typeid(llama_kv_cache_iswa))
    return LM_MEM_WINDOWED;
  if (typeid(*mem) == typeid(llama_kv_cache))
    return n_swa > 0 ? LM_MEM_WINDOWED : LM_MEM_FULL;
  return LM_MEM_OTHER;
}

const char *lm_mem_name(lm_mem_kind_t k) {
  switch (k) {
  case LM_MEM_FULL: return "full attention";
  case LM_MEM_WINDOWED: return "sliding-window or chunked attention";
  case LM_MEM_RECURRENT: return "recurrent";
  case LM_MEM_HYBRID: return "recurrent and attention (hybrid)";
  case LM_MEM_OTHER: break;
  }
  return "attention with a cache of its own";
}

const char *lm_mem_label(lm_mem_kind_t k) {
  static const char *const label[] = {"full", "windowed", "recurrent",
                                      "hybrid", "other"};
  return (unsigned)k < 5 ? label[k] : "other";
}

bool lm_mem_rm(llama_memory_t mem, int32_t seq, int32_t p0,
                          int32_t p1) {
  if (auto *x = dynamic_cast<llama_memory_hybrid_idx *>(mem)) {
    if (x->get_mem_idx() != nullptr && !x->get_mem_idx()->seq_rm(seq, p0, p1))
      return false;
    return x->get_mem_attn()->seq_rm(seq, p0, p1);
  }
  if (auto *h = dynamic_cast<llama_memory_hybrid *>(mem))
    return h->get_mem_attn()->seq_rm(seq, p0, p1);
  if (auto *h = dynamic_cast<llama_memory_hybrid_iswa *>(mem))
    return h->get_mem_attn()->seq_rm(seq, p0, p1);
  if (dynamic_cast<llama_memory_recurrent *>(mem) != nullptr)
    return true; /* no attention cells */
  return mem->seq_rm(seq, p0, p1);
}

/* The memory of mem that keeps every position it was not told to
 * remove: a hybrid's attention part, a windowed cache's full layers. */
static const llama_memory_i *full_part(const llama_memory_i *mem) {
  if (auto *h = dynamic_cast<const llama_memory_hybrid *>(mem))
    mem = h->get_mem_attn();
  else if (auto *h = dynamic_cast<const llama_memory_hybrid_iswa *>(mem))
    mem = h->get_mem_attn();
  if (auto *w = dynamic_cast<const llama_kv_cache_iswa *>(mem))
    mem = w->get_base();
  return mem;
}

int32_t lm_mem_pos(llama_memory_t mem, int32_t seq, bool max) {
  const llama_memory_i *m = full_part(mem);
  return max ? m->seq_pos_max(seq) : m->seq_pos_min(seq);
}

/* llama-server's own fields of an answer (timings.h). As llama-server's,
 * the generation's rates are over its decode steps, one fewer than its
 * tokens: the first is drawn from the prompt's last logits. */
#include "serve/shared/timings.h"

#include <string.h>

#include "common/clock.h"
#include "serve/shared/pieces.h"

/* The timings object of pn prompt positions decoded in pms ms (cached
 * held already, taken from `from`: serve's own cache_kind, a number as
 * every field of llama-server's timings is) and gn tokens generated in
 * gms ms. */
static json_t *timings_of(uint32_t cached, uint8_t from, uint32_t pn,
                          double pms, uint32_t gn, double gms) {
  uint32_t steps = gn > 0 ? gn - 1 : 0;
  return json_pack("{s:I,s:I,s:I,s:f,s:f,s:f,s:I,s:f,s:f,s:f}", "cache_n",
                   (json_int_t)cached, "cache_kind", (json_int_t)from,
                   "prompt_n", (json_int_t)pn,
                   "prompt_ms", pms, "prompt_per_token_ms",
                   pn ? pms / pn : 0.0, "prompt_per_second",
                   pms > 0 ? pn * 1e3 / pms : 0.0, "predicted_n",
                   (json_int_t)gn, "predicted_ms", gms,
                   "predicted_per_token_ms", steps ? gms / steps : 0.0,
                   "predicted_per_second",
                   gms > 0 ? 1e3 / gms * steps : 0.0);
}

json_t *timings_json(const task_t *t, uint32_t predicted) {
  double pms = (t->t_prompt - t->t_start) * 1e3,
         gms = (t->t_end - t->t_prompt) * 1e3;
  if (t->t_prompt == 0)
    pms = gms = 0;
  return timings_of(t->cached, t->cache_from, t->n_prompt - t->cached, pms,
                    predicted, gms);
}

json_t *timings_now(const task_t *t, const event_t *e) {
  double now = clock_now();
  uint32_t cached = t->cached, pn, gn = 0;
  double pms, gms = 0;
  if (e->kind == EV_PROGRESS) {
    pn = e->tokens > cached ? e->tokens - cached : 0;
    pms = pn > 0 ? (now - t->t_start) * 1e3 : 0;
  } else {
    pn = t->n_prompt - cached;
    pms = (t->t_prompt - t->t_start) * 1e3;
    gn = e->tokens;
    gms = (now - t->t_prompt) * 1e3;
  }
  return timings_of(cached, t->cache_from, pn, pms, gn, gms);
}

json_t *timings_progress(const task_t *t, const event_t *e) {
  return json_pack("{s:I,s:I,s:I,s:I}", "total", (json_int_t)t->n_prompt,
                   "cache", (json_int_t)t->cached, "processed",
                   (json_int_t)e->tokens, "time_ms",
                   (json_int_t)((clock_now() - t->t_start) * 1e3));
}

const char *timings_stop_type(finish_t f) {
  return f == FIN_EOS ? "eos" : f == FIN_STOP ? "word" : "limit";
}

const char *timings_stopping_word(const task_t *t, finish_t f,
                                  uint32_t stop) {
  return f == FIN_STOP && stop < t->want.n_stop ? t->want.stop[stop] : "";
}

json_t *timings_prompt(const site_t *site, const task_t *t) {
  return pieces_json(site, t->prompt, t->n_prompt - t->base);
}

json_t *timings_verbose(const site_t *site, const task_t *t, uint32_t i,
                        const char *text, size_t len, finish_t fin,
                        uint32_t tokens, uint32_t stop) {
  json_t *prompt = timings_prompt(site, t);
  if (prompt == NULL)
    return NULL;
  return json_pack(
      "{s:i,s:s%,s:[],s:i,s:b,s:s,s:i,s:I,s:o,s:b,s:b,s:s,s:s,s:I,s:o}",
      "index", (int)i, "content", text, len, "tokens", "id_slot", -1, "stop",
      1, "model", site->model, "tokens_predicted", (int)tokens,
      "tokens_evaluated", (json_int_t)t->n_prompt, "prompt", prompt,
      "has_new_line", memchr(text, '\n', len) != NULL, "truncated", 0,
      "stop_type", timings_stop_type(fin), "stopping_word",
      timings_stopping_word(t, fin, stop), "tokens_cached",
      (json_int_t)t->cached, "timings", timings_json(t, tokens));
}

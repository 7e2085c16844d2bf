/* A drawn token and its candidates (an EV_TOKEN event) as the APIs show
 * them: OpenAI's chat logprobs entries, the legacy completions' parallel
 * lists, llama-server's completion_probabilities. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "serve/shared/probs.h"

#include "serve/shared/pieces.h"

token_ev_t *probs_read(const char *bytes, size_t len) {
  if (len < sizeof(token_ev_t))
    return NULL;
  token_ev_t *t = malloc(len);
  if (t != NULL)
    memcpy(t, bytes, len); /* the news' bytes need not be aligned */
  return t;
}

/* A token's text (its piece, control tokens' text included) into buf. */
static size_t piece(const site_t *site, int32_t id, char *buf, size_t cap) {
  int n = lm_piece_special(site->lm, id, buf, cap);
  return n > 0 ? (size_t)n : 0;
}

/* The bytes of s[0..n) as a list of numbers (OpenAI's "bytes"). */
static json_t *bytes_of(const char *s, size_t n) {
  json_t *a = json_array();
  for (size_t i = 0; a != NULL && i < n; i++)
    json_array_append_new(a, json_integer((unsigned char)s[i]));
  return a;
}

static double logp(float p) { return p > 0 ? log(p) : -9999.0; }

json_t *probs_openai(const site_t *site, const token_ev_t *t, uint32_t top) {
  char buf[256];
  size_t n = piece(site, t->id, buf, sizeof(buf));
  json_t *alts = json_array();
  for (uint32_t i = 0; i < t->n && i < top; i++) {
    char b[256];
    size_t m = piece(site, t->top[i].id, b, sizeof(b));
    json_array_append_new(alts, json_pack("{s:o,s:f,s:o}", "token",
                                          pieces_string(b, m), "logprob",
                                          logp(t->top[i].p), "bytes",
                                          bytes_of(b, m)));
  }
  return json_pack("{s:o,s:f,s:o,s:o}", "token", pieces_string(buf, n),
                   "logprob", logp(t->p), "bytes", bytes_of(buf, n),
                   "top_logprobs", alts);
}

json_t *probs_native(const site_t *site, const token_ev_t *t, bool post) {
  /* With post_sampling_probs, llama-server gives the probabilities the
   * chain drew from as they are (prob, top_probs); else their logs. */
  const char *key = post ? "prob" : "logprob";
  char buf[256];
  size_t n = piece(site, t->id, buf, sizeof(buf));
  json_t *alts = json_array();
  for (uint32_t i = 0; i < t->n; i++) {
    char b[256];
    size_t m = piece(site, t->top[i].id, b, sizeof(b));
    json_array_append_new(alts, json_pack(
        "{s:i,s:o,s:f,s:o}", "id", t->top[i].id, "token", pieces_string(b, m),
        key, post ? (double)t->top[i].p : logp(t->top[i].p), "bytes",
        bytes_of(b, m)));
  }
  return json_pack("{s:i,s:o,s:f,s:o,s:o}", "id", t->id, "token",
                   pieces_string(buf, n), key, post ? (double)t->p : logp(t->p),
                   "bytes", bytes_of(buf, n),
                   post ? "top_probs" : "top_logprobs", alts);
}

void probs_legacy(const site_t *site, const token_ev_t *t, json_t *lp,
                  size_t *offset) {
  char buf[256];
  size_t n = piece(site, t->id, buf, sizeof(buf));
  json_t *tops = json_object();
  for (uint32_t i = 0; i < t->n; i++) {
    char b[256];
    size_t m = piece(site, t->top[i].id, b, sizeof(b));
    json_t *k = pieces_string(b, m);
    json_object_set_new(tops, json_string_value(k), json_real(
        logp(t->top[i].p)));
    json_decref(k);
  }
  json_array_append_new(json_object_get(lp, "tokens"), pieces_string(buf, n));
  json_array_append_new(json_object_get(lp, "token_logprobs"),
                        json_real(logp(t->p)));
  json_array_append_new(json_object_get(lp, "top_logprobs"), tops);
  json_array_append_new(json_object_get(lp, "text_offset"),
                        json_integer((json_int_t)*offset));
  *offset += n;
}

json_t *probs_legacy_new(void) {
  return json_pack("{s:[],s:[],s:[],s:[]}", "tokens", "token_logprobs",
                   "top_logprobs", "text_offset");
}

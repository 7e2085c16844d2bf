/* llama-server's sampler chain (common_sampler) and the probabilities it
 * reports (upstream.h says what the bridge's functions share: JSON text in
 * and out, errors, threads). */
#ifndef EVICTD_LLAMA_UPSTREAM_SAMPLER_H
#define EVICTD_LLAMA_UPSTREAM_SAMPLER_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "llama.h"

#ifdef __cplusplus
extern "C" {
#endif

/* ---- Sampling ---------------------------------------------------------- */

typedef struct up_sampler_s up_sampler_t;

/* llama-server's sampler chain for one choice (common_sampler_init), from
 * params_json: a JSON object of llama-server's fields, each optional,
 * llama-server's default when absent or null (up_sampler_settings(NULL)
 * lists them): temperature, dynatemp_range, dynatemp_exponent, top_k,
 * top_p, min_p, typical_p, top_n_sigma, xtc_probability, xtc_threshold,
 * repeat_last_n, repeat_penalty, presence_penalty, frequency_penalty,
 * dry_multiplier, dry_base, dry_allowed_length, dry_penalty_last_n,
 * dry_sequence_breakers, mirostat, mirostat_tau, mirostat_eta, seed (any
 * integer, taken modulo 2^32; -1 or absent: a random one), n_probs (or
 * "logprobs" when a number), post_sampling_probs, min_keep, samplers
 * (names, or a string of llama.cpp's letters), ignore_eos, logit_bias
 * ([[token, bias], ...] with token ids or strings, or {"id": bias}; a bias
 * of false bans the token), json_schema or grammar (a GBNF; with both,
 * grammar, as in llama-server: a chat's already holds the schema),
 * grammar_type ("tool_calls": as a json_schema's, the grammar is fed the
 * generation prompt first), grammar_lazy, grammar_triggers,
 * preserved_tokens, generation_prompt, reasoning_budget_tokens,
 * reasoning_budget_start_tag, reasoning_budget_end_tags,
 * reasoning_budget_message. Others are ignored, so a chat's params are
 * up_chat_apply's answer with the request's own fields added where it has
 * none (jansson: json_object_update_missing(answer, body)), as
 * llama-server merges them. Numbers out of range are clamped where
 * llama-server clamps them (top_k, top_p, min_p, temperature, mirostat,
 * ...) and refused where it refuses them (repeat_last_n, min_keep, ...),
 * and also where it would misbehave (a negative n_probs, a malformed
 * logit_bias entry, which it skips). Returns 0, or -1 with a sentence that
 * names the field in err ("\"top_k\" must be an integer", a grammar that
 * does not parse, a token id outside the vocabulary, ...). model is
 * borrowed (it must outlive *out). up_sampler_free frees *out. */
int up_sampler_new(up_sampler_t **out, const struct llama_model *model,
                   const char *params_json, char *err, size_t errlen);
void up_sampler_free(up_sampler_t *s);

/* The sampler's settings under llama-server's names (its
 * generation_settings), or with s NULL llama-server's defaults
 * (common_params_sampling's, for /props): seed, temperature, ..., samplers,
 * logit_bias ([{"bias","token"}]), n_probs, min_keep, ignore_eos,
 * grammar, grammar_lazy, grammar_triggers, preserved_tokens,
 * post_sampling_probs. Returns 0, or -1 with err set. */
int up_sampler_settings(const up_sampler_t *s, char **out_json, char *err,
                        size_t errlen);

/* Feeds a token the sampler did not draw (the prompt's, before the first
 * draw, as llama-server does: repetition penalties and DRY count them),
 * with accept_grammar false; or a drawn one, with accept_grammar true,
 * which also advances the grammar (a lazy one watches for its triggers).
 * Every drawn token must be accepted before the next draw. Returns 0, or
 * -1 with err set (the grammar cannot take the token). */
int up_sampler_accept(up_sampler_t *s, llama_token tok, bool accept_grammar,
                      char *err, size_t errlen);

/* Draws the next token from the logits of output idx of ctx's last decode
 * (idx as llama_get_logits_ith takes it), through the chain and the
 * grammar (common_sampler_sample: the chain first, the grammar checks the
 * token drawn and, only when it refuses it, constrains every candidate and
 * the chain draws again). It does not accept the token. Returns 0 with
 * *tok set; 1 when every candidate was excluded (a grammar that is
 * complete, whose only next tokens are the end tokens, while ignore_eos
 * or a logit_bias bans them): nothing may follow, *tok is not to be
 * taken; or -1 with err set. */
int up_sampler_sample(up_sampler_t *s, struct llama_context *ctx,
                      int32_t idx, llama_token *tok, char *err,
                      size_t errlen);

typedef struct up_prob_s {
  llama_token id;
  float p;
} up_prob_t;

/* For n_probs / logprobs, right after up_sampler_sample of tok at idx (and
 * before ctx decodes again): the n most likely tokens, most likely first,
 * into out[0..n), and tok's own probability in *p_tok (0 when it is not
 * among the candidates). As llama-server reports them: by default the
 * softmax of the raw logits (the model's probabilities); with
 * post_sampling_probs, the candidates the chain left, with the
 * probabilities it drew from, those of 0 left out. Returns how many it
 * wrote (n at most), or -1 with err set. */
int up_sampler_probs(up_sampler_t *s, struct llama_context *ctx, int32_t idx,
                     llama_token tok, up_prob_t *out, int n, float *p_tok,
                     char *err, size_t errlen);

#ifdef __cplusplus
}
#endif

#endif

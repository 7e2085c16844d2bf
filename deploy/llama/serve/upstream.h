/* llama.cpp's own `common` library behind a C interface, so that serve does
 * the model-facing work exactly as llama-server does, with the same code:
 * Jinja chat templates (tools, tool_choice, response formats), the parsing
 * of what the model wrote back into an assistant message (tool calls,
 * reasoning, OpenAI's streaming deltas), JSON schema to GBNF, and
 * llama-server's sampler chain. upstream.cpp is the one C++ file; every
 * function here catches C++ exceptions and returns -1 (or NULL) with a
 * sentence in err, fit for a 400 where the caller's input was at fault.
 *
 * Requests and answers are JSON text under llama-server's field names, so
 * that the HTTP side (jansson) hands bodies through and the library's
 * options follow llama.cpp's without a C struct to keep in step. Every
 * char ** out parameter is malloc'd on success (the caller frees it) and
 * left NULL on failure; err may be NULL when errlen is 0.
 *
 * Threads: up_init and up_chat_new at start-up; up_chat_info,
 * up_chat_apply, up_json_schema_grammar, up_sampler_new and
 * up_sampler_settings from any thread, several at once (they read the
 * model and the templates only); a parser or a sampler is one thread's at
 * a time, and a sampler's up_sampler_sample and up_sampler_probs read the
 * context's logits, so they belong to the thread that decodes. */
#ifndef EVICTD_LLAMA_UPSTREAM_H
#define EVICTD_LLAMA_UPSTREAM_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "llama.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Sets how much common's own log says on stderr (it runs a thread of its
 * own to write it): warnings and errors, or everything with debug. Call
 * once at start-up, before any other function here (the threshold is a
 * plain global). */
void up_init(bool debug);

/* ---- Chat templates ---------------------------------------------------- */

typedef struct up_chat_s up_chat_t;

/* Loads the chat template(s) of model (borrowed: it must outlive *out), as
 * llama-server does at start: template_override NULL or "" takes the GGUF's
 * own (and its "tool_use" variant), else ChatML when it has none (as
 * stories260K); otherwise template_override is a template's Jinja source,
 * or "chatml". With jinja false, templates go through llama.cpp's built-in
 * list instead (llama_chat_apply_template: the GGUF's, when it is one
 * llama.cpp knows, or a built-in name such as "llama3", "mistral-v7",
 * "chatml"); tools and response formats then cannot be used. A built-in
 * name other than "chatml" with jinja true is refused (Jinja would render
 * the name itself as the template). Returns 0, or -1 with a sentence in err
 * (a template that does not parse, a name llama.cpp does not know).
 * up_chat_free frees *out. */
int up_chat_new(up_chat_t **out, const struct llama_model *model,
                const char *template_override, bool jinja, char *err,
                size_t errlen);
void up_chat_free(up_chat_t *t);

/* What a /props route shows of the templates, as a JSON object:
 * "chat_template" (the default's source), "chat_template_tool_use" (the
 * variant's, when the GGUF has one), "chat_template_caps" (common's
 * capabilities: supports_tools, supports_tool_calls, supports_system_role,
 * supports_parallel_tool_calls, supports_string_content,
 * supports_typed_content, ...), "jinja", "explicit" (false when the GGUF
 * had no template and ChatML stands in), "supports_thinking" (the template
 * has a reasoning block llama-server would turn on), "bos_token",
 * "eos_token". Returns 0, or -1 (out of memory) with err set. */
int up_chat_info(const up_chat_t *t, char **out_json, char *err,
                 size_t errlen);

/* Renders a chat request as llama-server's /v1/chat/completions does
 * (oaicompat_chat_params_parse, then common_chat_templates_apply).
 * request_json is the OpenAI body, of which these fields count: messages
 * (required; roles system, developer, user, assistant, tool; content a
 * string, null or text parts; assistant tool_calls; tool results with
 * tool_call_id), tools, tool_choice ("auto", "none", "required", or
 * {"type":"function","function":{"name":...}}, which keeps that tool alone
 * and requires it), parallel_tool_calls (default: whether the template
 * can), response_format ({"type":"text"|"json_object"|"json_schema",...}),
 * json_schema, grammar (a GBNF; not with tools), chat_template_kwargs,
 * add_generation_prompt (default true), continue_final_message, a
 * trailing assistant message (continued, as llama-server prefills it),
 * reasoning_format ("none", "auto", "deepseek", "deepseek-legacy"; default
 * "deepseek"), reasoning_effort, logprobs and top_logprobs, stream.
 * Others are ignored.
 *
 * *out_json is a JSON object under llama-server's names:
 *   "prompt"            the text to tokenize (special tokens parsed);
 *   "chat_format"       common's name of the output format (for logs);
 *   "grammar", "grammar_type" ("tool_calls"), "grammar_lazy",
 *   "grammar_triggers" ([{"type","value","token"?}], llama-server's form),
 *   "preserved_tokens", "generation_prompt", "n_probs", and, for a
 *   template with a reasoning block, "reasoning_budget_tokens" (-1),
 *   "reasoning_budget_start_tag", "reasoning_budget_end_tags",
 *   "reasoning_budget_message": what the sampler needs (up_sampler_new
 *   reads exactly these names), present only when they apply;
 *   "additional_stops"  stop strings the format needs besides the
 *                       request's own (they end the text like "stop");
 *   "parse_tool_calls"  whether tools are on;
 *   "parser"            an object, opaque, for up_parser_new: how to read
 *                       the generated text back.
 * Returns 0, or -1 with a sentence in err: the request's fault (a 400),
 * e.g. "Cannot use custom grammar constraints with tools.", or a
 * template that fails on these messages. Thread-safe: may be called from
 * any thread, several at once, on the same t (llama-server does so from
 * its HTTP threads). */
int up_chat_apply(const up_chat_t *t, const char *request_json,
                  char **out_json, char *err, size_t errlen);

/* ---- Reading the generated text back ------------------------------------ */

typedef struct up_parser_s up_parser_t;

/* A parser of one choice's generated text, from the "parser" object of
 * up_chat_apply's answer (its JSON text). Returns 0, or -1 with err set (a
 * parser object that is not one). One parser per choice: it keeps the text
 * so far, the message last parsed and the tool call ids given out.
 * up_parser_free frees it. */
int up_parser_new(up_parser_t **out, const char *parser_json, char *err,
                  size_t errlen);
void up_parser_free(up_parser_t *p);

/* Appends text[0..len) (the choice's next bytes; whole UTF-8 characters,
 * after stop strings are cut) and parses all the text so far, as
 * llama-server's task_result_state::update_chat_msg does. partial is true
 * while the choice still generates and false for the last call (also with
 * len 0), which parses strictly.
 *   *msg_json (when msg_json is not NULL): the assistant message so far,
 *     {"role":"assistant","content","reasoning_content"?,"tool_calls"?:
 *      [{"type":"function","function":{"name","arguments"},"id"}]};
 *   *deltas_json (when not NULL): an array of OpenAI chat chunk deltas
 *     from the message before this call to this one, in order, each
 *     {"content"} or {"reasoning_content"} or {"tool_calls":[{"index",
 *     "id"?,"type"?,"function":{"name"?,"arguments"?}}]}; possibly [].
 * Tool calls get ids "call_" + 24 random letters and digits, kept across
 * calls. Returns 0, or -1 with err set: the final text does not match the
 * format the template asked for (llama-server answers such a text with an
 * error too), or a partial parse went back on what it had shown. */
int up_parser_feed(up_parser_t *p, const char *text, size_t len,
                   bool partial, char **msg_json, char **deltas_json,
                   char *err, size_t errlen);

/* One whole text at once: up_parser_new, up_parser_feed, up_parser_free. */
int up_chat_parse(const char *parser_json, const char *text, size_t len,
                  bool partial, char **msg_json, char *err, size_t errlen);

/* ---- Grammars ---------------------------------------------------------- */

/* The GBNF grammar llama.cpp makes of a JSON schema (json_schema_to_grammar,
 * as llama-server does for "json_schema"). Returns 0, or -1 with a sentence
 * in err (not JSON, or a schema llama.cpp cannot convert). */
int up_json_schema_grammar(const char *schema_json, char **gbnf, char *err,
                           size_t errlen);

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

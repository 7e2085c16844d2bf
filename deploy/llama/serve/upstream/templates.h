/* llama.cpp's chat templates, the parsing of what the model wrote back,
 * and JSON schemas as grammars, as llama-server has them (upstream.h says
 * what the bridge's functions share: JSON text in and out, errors, threads).
 */
#ifndef EVICTD_LLAMA_UPSTREAM_TEMPLATES_H
#define EVICTD_LLAMA_UPSTREAM_TEMPLATES_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "llama.h"

#ifdef __cplusplus
extern "C" {
#endif

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

#ifdef __cplusplus
}
#endif

#endif

/* What the model wrote, read back by the chat format's parser
 * (upstream/templates.h) the one way every API reads it (parse.c): a
 * stream's text as OpenAI chat deltas, a whole text as the assistant's
 * message. A text the format cannot read is shown as it is. */
#ifndef EVICTD_LLAMA_SERVE_PARSE_H
#define EVICTD_LLAMA_SERVE_PARSE_H

#include <jansson.h>
#include <stdbool.h>
#include <stddef.h>

#include "serve/upstream/templates.h"

/* The deltas of a choice's next text (whole characters; at the end, len 0
 * and partial false): a JSON array of OpenAI chat deltas ({"content"},
 * {"reasoning_content"}, {"tool_calls"}), the parser's (*p made from
 * format on first use and kept for the choice's next text; the caller
 * frees it with up_parser_free), or, without a format (NULL) or when the
 * format cannot read the text, the text as one content delta ([] for no
 * text). A new reference; NULL when out of memory. */
json_t *parse_deltas(up_parser_t **p, const char *format, const char *text,
                     size_t len, bool partial);

/* The assistant message format reads in a whole text ({"role",
 * "content", "reasoning_content"?, "tool_calls"?}), or NULL when there is
 * no format or it reads none. With prefill not NULL, *prefill is the
 * message it reads before any text (a continued assistant message's
 * start, which the message then begins with), or NULL. New references. */
json_t *parse_message(const char *format, const char *text, size_t len,
                      json_t **prefill);

#endif

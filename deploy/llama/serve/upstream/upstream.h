/* llama.cpp's own `common` library behind a C interface, so that serve does
 * the model-facing work exactly as llama-server does, with the same code:
 * Jinja chat templates (tools, tool_choice, response formats), the parsing
 * of what the model wrote back into an assistant message (tool calls,
 * reasoning, OpenAI's streaming deltas), JSON schema to GBNF
 * (templates.h), and llama-server's sampler chain (sampler.h); this header
 * has common's log. These are the C++ files of serve, each behind a C
 * interface; every function catches C++ exceptions and returns -1 (or
 * NULL) with a sentence in err, fit for a 400 where the caller's input
 * was at fault. Tokenizing needs no C++: it is llama.h's own C interface
 * (common/lm.h, and shared/tokcache.h for prompts that begin alike).
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

#ifdef __cplusplus
}
#endif

#endif

/* Rendering a chat whose message list extends (or edits the end of) one
 * rendered before, by rendering only its last messages, with the text
 * a render of the whole list gives.
 *
 * How. A kept render R of a list K, and a new list M that shares K's
 * first j messages: both lists cut to their system message (if first)
 * and their messages from a user message s < j on (a window) render
 * through the same template as small lists. The end of R that K's window
 * renders too (their longest common end) is where the two differ; M's
 * window, from the place K's window starts that end, gives what follows
 * instead; the rest of R is kept. Templates that look at the whole list
 * (a system message moved into the first user message, the last message,
 * reasoning dropped from earlier turns, numbered turns) may make that
 * splice wrong, so it is made twice, from two windows starting at
 * different user messages, and used only when both give the same text
 * and the same everything else (grammar, stops, parser...), and only
 * when every message before the later window holds text alone (tool
 * calls and results, images may be counted across the list: Kimi K2
 * numbers its tool calls from the first); else, and for a list that
 * shares nothing, the whole list is rendered. What is kept:
 * the last `entries` lists (a reference to their messages: callers do
 * not change a request's messages once rendered) and their texts.
 *
 * Safe from several threads at once. */
#ifndef EVD_LLAMA_SERVE_RCACHE_H
#define EVD_LLAMA_SERVE_RCACHE_H

#include <jansson.h>
#include <stddef.h>
#include <stdint.h>

#include "serve/upstream/templates.h"

typedef struct rcache_s rcache_t;

typedef struct rcache_stats_s {
  uint64_t whole;    /* requests rendered whole */
  uint64_t windows;  /* requests rendered from two windows */
  uint64_t refused;  /* of the whole ones, those windows were tried for
                        and disagreed on */
  double seconds;    /* time spent rendering, all of it */
} rcache_stats_t;

/* A cache of `entries` renders (0: every request rendered whole); NULL
 * when out of memory. */
rcache_t *rcache_new(uint32_t entries);
void rcache_free(rcache_t *rc);

/* up_chat_apply of request (a chat request object with "messages";
 * borrowed) through chat: *out (a new reference) the applied object, as
 * up_chat_apply's JSON. Returns 0, or -1 with a sentence in err. */
int rcache_apply(rcache_t *rc, const up_chat_t *chat, json_t *request,
                 json_t **out, char *err, size_t errlen);

void rcache_scrape(rcache_t *rc, rcache_stats_t *s);

#endif

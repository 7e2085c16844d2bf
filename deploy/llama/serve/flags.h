/* llama-server's flags in serve: their rows (flags.c; the rows' parsers
 * are flags_set.h's). */
#ifndef EVICTD_LLAMA_SERVE_FLAGS_H
#define EVICTD_LLAMA_SERVE_FLAGS_H

#include <jansson.h>
#include <stddef.h>

#include "common/cli.h"
#include "serve/opts.h"

/* The rows of llama-server's flags (into serve_opts_t): each means what
 * it means to llama-server, or is accepted as changing nothing here (its
 * help says why), or refused with its reason. */
extern const cli_opt_t serve_llama_flags[];
extern const size_t serve_llama_flags_n;

/* A comma-separated list's names (blanks around them dropped, empty ones
 * left out), sorted and each once, as llama-server keeps its aliases
 * (-a) and tags (--tags): a JSON array of strings, NULL when out of
 * memory. */
json_t *flags_names(const char *list);

#endif

/* llama-server's flags in serve: their rows (flags.c) and the rows'
 * parsers (flags_set.c). A parser is a CLI_ROW's fn (common/cli.h): it
 * reads the flag's argument into its field, the row's key naming what it
 * sets, and returns 0, or -1 having said why. */
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

/* A row's field, in serve_opts_t or its llama-server part. */
#define LS(f) offsetof(serve_opts_t, ls.f)
#define OPT(f) offsetof(serve_opts_t, f)

#define FLAG_PARSER(name)                                                  \
  int name(const char *who, const cli_opt_t *o, const char *arg,          \
           void *field)

/* the request defaults (each a field of the sampler or of a chat, named by its row's key) */
FLAG_PARSER(set_number);
FLAG_PARSER(set_seed);
FLAG_PARSER(set_true);
FLAG_PARSER(set_text);
FLAG_PARSER(set_samplers);
FLAG_PARSER(set_breaker);
FLAG_PARSER(set_bias);
FLAG_PARSER(set_grammar_text);
FLAG_PARSER(set_grammar_file);
FLAG_PARSER(set_schema_text);
FLAG_PARSER(set_schema_file);
FLAG_PARSER(set_kwargs);
FLAG_PARSER(set_on);
FLAG_PARSER(set_off);
FLAG_PARSER(set_thinking);
FLAG_PARSER(set_effort);
FLAG_PARSER(set_format);

/* serve's own settings */
FLAG_PARSER(set_const);
FLAG_PARSER(set_keep);
FLAG_PARSER(set_n_predict);
FLAG_PARSER(set_device);

#endif

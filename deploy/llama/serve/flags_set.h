/* The parsers of llama-server's flags' rows (flags_set.c; the rows are
 * flags.c's). A parser is a CLI_ROW's fn (common/cli.h): it reads the
 * flag's argument into its field, the row's key naming what it sets, and
 * returns 0, or -1 having said why. */
#ifndef EVICTD_LLAMA_SERVE_FLAGS_SET_H
#define EVICTD_LLAMA_SERVE_FLAGS_SET_H

#include "common/cli.h"
#include "serve/opts.h"

#define FLAG_PARSER(name)                                                  \
  int name(const char *who, const cli_opt_t *o, const char *arg,          \
           void *field)

/* The request defaults: each a field of the sampler or of a chat, named
 * by its row's key. */
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

/* serve's own settings. */
FLAG_PARSER(set_const);
FLAG_PARSER(set_keep);
FLAG_PARSER(set_n_predict);
FLAG_PARSER(set_device);

#endif

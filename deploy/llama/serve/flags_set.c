/* The parsers of llama-server's flags' rows (flags_set.h; the rows are
 * flags.c's): each reads its argument as llama-server does and sets a
 * field of serve's settings or a request default under llama-server's
 * field name (the sampler's, a chat's), or refuses it saying why. */
#include <errno.h>
#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "serve/flags_set.h"

/* What a row's parser names in its messages: its first long spelling;
 * and what it reads. */
#define NAME(o) (int)strcspn((o)->name, "|"), (o)->name
#define KEY(o) ((o)->with.row.key)

/* ---- the request defaults ------------------------------------------------ */

/* The object of request defaults (*field), made at the first flag that
 * sets one; NULL (said) when out of memory. */
static json_t *defaults(const char *who, void *field) {
  json_t **d = field;
  if (*d == NULL && (*d = json_object()) == NULL)
    fprintf(stderr, "%s: out of memory\n", who);
  return *d;
}

/* Sets key to v (taken) in the defaults: 0, or -1 having said why. */
static int put(const char *who, void *field, const char *key, json_t *v) {
  json_t *d = defaults(who, field);
  if (d == NULL || v == NULL || json_object_set_new(d, key, v) != 0) {
    if (d != NULL)
      fprintf(stderr, "%s: out of memory\n", who);
    return -1;
  }
  return 0;
}

/* A number as llama-server's flag takes it: a whole one, or a real one
 * (finite). NULL when it is neither. */
static json_t *number(const char *arg) {
  char *end;
  errno = 0;
  long long i = strtoll(arg, &end, 10);
  if (end != arg && *end == '\0' && errno == 0)
    return json_integer(i);
  errno = 0;
  double d = strtod(arg, &end);
  if (end != arg && *end == '\0' && errno == 0 && isfinite(d))
    return json_real(d);
  return NULL;
}

/* --temp, --top-k, ...: a number under the row's key. Its range is the
 * sampler's to check (flags_model), as for a request's. */
int set_number(const char *who, const cli_opt_t *o, const char *arg,
               void *field) {
  json_t *v = number(arg);
  if (v == NULL) {
    fprintf(stderr, "%s: --%.*s wants a number, not '%s'\n", who, NAME(o),
            arg);
    return -1;
  }
  return put(who, field, KEY(o), v);
}

/* -s/--seed: any whole number (-1: a random one per request). */
int set_seed(const char *who, const cli_opt_t *o, const char *arg,
             void *field) {
  json_t *v = number(arg);
  if (!json_is_integer(v)) {
    json_decref(v);
    fprintf(stderr, "%s: --%.*s wants a whole number (-1: random), not "
            "'%s'\n", who, NAME(o), arg);
    return -1;
  }
  return put(who, field, KEY(o), v);
}

int set_true(const char *who, const cli_opt_t *o, const char *arg,
             void *field) {
  (void)arg;
  return put(who, field, KEY(o), json_true());
}

int set_text(const char *who, const cli_opt_t *o, const char *arg,
             void *field) {
  return put(who, field, KEY(o), json_string(arg));
}

/* --samplers a;b;c: a list of names. */
int set_samplers(const char *who, const cli_opt_t *o,
                 const char *arg, void *field) {
  json_t *list = json_array();
  for (const char *p = arg; list != NULL && *p != '\0';) {
    size_t n = strcspn(p, ";");
    if (n > 0)
      json_array_append_new(list, json_stringn(p, n));
    p += n + (p[n] == ';');
  }
  return put(who, field, KEY(o), list);
}

/* --dry-sequence-breaker S, again for each: the list, the defaults
 * ("\n", ":", "\"", "*") left out from the first on, as llama-server's. */
int set_breaker(const char *who, const cli_opt_t *o, const char *arg,
                void *field) {
  if (strcmp(arg, "none") == 0) {
    fprintf(stderr, "%s: --%.*s none: a request cannot ask for no "
            "breakers (llama-server refuses an empty "
            "\"dry_sequence_breakers\" too), so serve's default cannot\n",
            who, NAME(o));
    return -1;
  }
  json_t *d = defaults(who, field);
  json_t *list = d != NULL ? json_object_get(d, KEY(o)) : NULL;
  if (d == NULL ||
      (list == NULL && put(who, field, KEY(o), list = json_array()) != 0))
    return -1;
  return json_array_append_new(list, json_string(arg));
}

/* -l/--logit-bias TOKEN+BIAS or TOKEN-BIAS, again for each: [[token,
 * bias], ...]; -inf (a token never drawn) is false, as a request says it. */
int set_bias(const char *who, const cli_opt_t *o, const char *arg,
             void *field) {
  char *end;
  errno = 0;
  long tok = strtol(arg, &end, 10);
  bool ok = end != arg && errno == 0 && tok >= 0 &&
            (*end == '+' || *end == '-');
  char sign = ok ? *end : '+';
  double bias = ok ? strtod(end + 1, &end) : NAN;
  /* -inf: a token never drawn; +inf would be the only one drawn, which
   * llama.cpp's sampler does not take. */
  if (!ok || *end != '\0' || isnan(bias) || (isinf(bias) && sign == '+')) {
    fprintf(stderr, "%s: --%.*s wants TOKEN_ID+BIAS or TOKEN_ID-BIAS "
            "(15043+1, 15043-inf), not '%s'\n", who, NAME(o), arg);
    return -1;
  }
  json_t *d = defaults(who, field);
  json_t *list = d != NULL ? json_object_get(d, KEY(o)) : NULL;
  if (d == NULL ||
      (list == NULL && put(who, field, KEY(o), list = json_array()) != 0))
    return -1;
  json_t *b = isinf(bias) ? json_false()
                          : json_real(sign == '-' ? -bias : bias);
  return json_array_append_new(list, json_pack("[Io]", (json_int_t)tok, b));
}

/* --grammar GBNF, or the text of --grammar-file: the last of these and
 * -j/-jf counts, as in llama-server (the key of the other one goes). */
static int set_grammar(const char *who, const char *gbnf, void *field) {
  json_t *d = defaults(who, field);
  if (d != NULL)
    json_object_del(d, "json_schema");
  return put(who, field, "grammar", json_string(gbnf));
}

int set_grammar_text(const char *who, const cli_opt_t *o,
                     const char *arg, void *field) {
  (void)o;
  return set_grammar(who, arg, field);
}

int set_grammar_file(const char *who, const cli_opt_t *o,
                     const char *arg, void *field) {
  size_t len;
  char *text = cli_read_file(arg, &len);
  if (text == NULL) {
    fprintf(stderr, "%s: --%.*s %s: %s\n", who, NAME(o), arg,
            strerror(errno));
    return -1;
  }
  int rc = set_grammar(who, text, field);
  free(text);
  return rc;
}

/* -j SCHEMA, -jf FILE: a JSON schema, which the sampler turns into a
 * grammar as llama-server does. */
static int set_schema(const char *who, const cli_opt_t *o, const char *text,
                      const char *from, void *field) {
  json_error_t je;
  json_t *schema = json_loads(text, JSON_DECODE_ANY, &je);
  if (schema == NULL) {
    fprintf(stderr, "%s: --%.*s%s%s is not JSON: %s\n", who, NAME(o),
            *from ? " " : "", from, je.text);
    return -1;
  }
  json_t *d = defaults(who, field);
  if (d != NULL)
    json_object_del(d, "grammar");
  return put(who, field, "json_schema", schema);
}

int set_schema_text(const char *who, const cli_opt_t *o,
                    const char *arg, void *field) {
  return set_schema(who, o, arg, "", field);
}

int set_schema_file(const char *who, const cli_opt_t *o,
                    const char *arg, void *field) {
  size_t len;
  char *text = cli_read_file(arg, &len);
  if (text == NULL) {
    fprintf(stderr, "%s: --%.*s %s: %s\n", who, NAME(o), arg,
            strerror(errno));
    return -1;
  }
  int rc = set_schema(who, o, text, arg, field);
  free(text);
  return rc;
}

/* The chat template's arguments of every chat (chat_template_kwargs), a
 * request's own over them key by key (render.c), as llama-server merges
 * its default_template_kwargs. */
static json_t *kwargs(const char *who, void *field) {
  json_t *d = defaults(who, field);
  json_t *kw = d != NULL ? json_object_get(d, "chat_template_kwargs") : NULL;
  if (d != NULL && kw == NULL &&
      put(who, field, "chat_template_kwargs", kw = json_object()) != 0)
    return NULL;
  return kw;
}

/* --chat-template-kwargs '{"k":v,...}': added to those before. */
int set_kwargs(const char *who, const cli_opt_t *o, const char *arg,
               void *field) {
  json_error_t je;
  json_t *j = json_loads(arg, 0, &je), *kw;
  if (!json_is_object(j)) {
    json_decref(j);
    fprintf(stderr, "%s: --%.*s wants a JSON object, not '%s'\n", who,
            NAME(o), arg);
    return -1;
  }
  int rc = (kw = kwargs(who, field)) != NULL && json_object_update(kw, j) == 0
               ? 0 : -1;
  json_decref(j);
  return rc;
}

/* The row's key, an argument of the chat template, true (set_on) or
 * false (set_off): --reasoning-preserve's preserve_reasoning. */
static int set_kwarg(const char *who, const cli_opt_t *o, json_t *v,
                     void *field) {
  json_t *kw = kwargs(who, field);
  return kw != NULL && json_object_set_new(kw, KEY(o), v) == 0 ? 0 : -1;
}

int set_on(const char *who, const cli_opt_t *o, const char *arg,
           void *field) {
  (void)arg;
  return set_kwarg(who, o, json_true(), field);
}

int set_off(const char *who, const cli_opt_t *o, const char *arg,
            void *field) {
  (void)arg;
  return set_kwarg(who, o, json_false(), field);
}

/* -rea/--reasoning on|off|auto (and llama.cpp's other spellings): the
 * template's enable_thinking true or false, or the template's own. */
int set_thinking(const char *who, const cli_opt_t *o,
                 const char *arg, void *field) {
  if (cli_listed("on|enabled|true|1", arg, strlen(arg)))
    return set_kwarg(who, o, json_true(), field);
  if (cli_listed("off|disabled|false|0", arg, strlen(arg)))
    return set_kwarg(who, o, json_false(), field);
  if (cli_listed("auto|-1", arg, strlen(arg))) {
    json_t *kw = kwargs(who, field);
    return kw != NULL ? (json_object_del(kw, KEY(o)), 0) : -1;
  }
  fprintf(stderr, "%s: --%.*s is on, off or auto, not '%s'\n", who, NAME(o),
          arg);
  return -1;
}

/* --reasoning-effort LEVEL: the template's reasoning_effort ("default":
 * the template's own). */
int set_effort(const char *who, const cli_opt_t *o, const char *arg,
               void *field) {
  if (strcmp(arg, "default") == 0) {
    json_t *kw = kwargs(who, field);
    return kw != NULL ? (json_object_del(kw, KEY(o)), 0) : -1;
  }
  return set_kwarg(who, o, json_string(arg), field);
}

/* --reasoning-format: one of common's formats, as a request's. */
int set_format(const char *who, const cli_opt_t *o, const char *arg,
               void *field) {
  if (!cli_listed("none|auto|deepseek|deepseek-legacy", arg, strlen(arg))) {
    fprintf(stderr, "%s: --%.*s is none, auto, deepseek or deepseek-legacy, "
            "not '%s'\n", who, NAME(o), arg);
    return -1;
  }
  return set_text(who, o, arg, field);
}

/* ---- the others ---------------------------------------------------------- */

/* --jinja, --no-jinja: the row's key as a number (the last given counts). */
int set_const(const char *who, const cli_opt_t *o, const char *arg,
              void *field) {
  (void)who;
  (void)arg;
  *(int *)field = atoi(KEY(o));
  return 0;
}

/* --keep N: 0 or more; -1 (all the prompt) is refused. */
int set_keep(const char *who, const cli_opt_t *o, const char *arg,
             void *field) {
  unsigned long long v;
  if (strcmp(arg, "-1") == 0) {
    fprintf(stderr, "%s: --%.*s -1: serve's window pins a number of first "
            "positions (--sinks), not a whole prompt: give N\n", who,
            NAME(o));
    return -1;
  }
  if (cli_number(who, "keep", arg, 0, 1u << 24, &v) != 0)
    return -1;
  *(int64_t *)field = (int64_t)v;
  return 0;
}

/* -n N: -1 (until an end token or --n-predict-max) or 1 and more; 0,
 * which asks llama-server for the prompt alone into the cache, is
 * refused. */
int set_n_predict(const char *who, const cli_opt_t *o,
                  const char *arg, void *field) {
  unsigned long long v;
  if (strcmp(arg, "-1") == 0) {
    *(int64_t *)field = -1;
    return 0;
  }
  if (strcmp(arg, "0") == 0) {
    fprintf(stderr, "%s: --%.*s 0: serve generates at least one token (a "
            "prompt alone into the cache is not a request of its)\n", who,
            NAME(o));
    return -1;
  }
  if (cli_number(who, "n-predict", arg, 1, 1u << 30, &v) != 0)
    return -1;
  *(int64_t *)field = (int64_t)v;
  return 0;
}

/* -ngl, -dev, -sm, ...: where llama.cpp puts the model. serve keeps every
 * layer and its cache on the CPU, so these are accepted where llama.cpp
 * has no GPU (they change nothing there, in llama-server either) and
 * refused where it has one (flags_model asks, once the backends are
 * loaded); the row's key is a value that asks for the CPU anyway ("*":
 * the flag itself does). */
int set_device(const char *who, const cli_opt_t *o, const char *arg,
               void *field) {
  (void)who;
  if (KEY(o) != NULL && (strcmp(KEY(o), "*") == 0 || strcmp(KEY(o), arg) == 0))
    return 0;
  if (*(const cli_opt_t **)field == NULL)
    *(const cli_opt_t **)field = o;
  return 0;
}


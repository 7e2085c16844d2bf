/* The rules between evictd-llama serve's options and llama-server's
 * flags (options.h): where to listen, the API keys, the model's name, the
 * prefill chunk and a sequence's cells as the window, -n, the chat
 * template's file; then, with the model loaded, what needs it. The rows
 * of the flags themselves are flags.c's. */
#include "serve/options.h"

#include <errno.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "serve/flags.h"
#include "serve/upstream/sampler.h"

#define WHO SERVE_WHO
/* A row's first long spelling, for messages. */
#define NAME(o) (int)strcspn((o)->name, "|"), (o)->name
#define fail(...) cli_say(1, WHO, NULL, __VA_ARGS__)
#define bad(...) cli_say(2, WHO, WHO " --help", __VA_ARGS__)

/* ---- llama-server's flags' rules (their rows: flags.c) ------------------ */

/* The prefill chunk llama-server's -b and -ub say: the smaller of its
 * logical and physical batches (defaults 2048 and 512), or -1 when neither
 * is given. */
static int64_t chunk_of(const serve_llama_t *l) {
  if (l->batch < 0 && l->ubatch < 0)
    return -1;
  int64_t b = l->batch > 0 ? l->batch : 2048;
  int64_t ub = l->ubatch > 0 ? l->ubatch : 512;
  return b < ub ? b : ub;
}

/* --budget from a sequence's cells: they hold its window's budget and
 * its prefill chunk. `from` says where the cells came from. */
static int budget_of(serve_opts_t *o, int64_t cells, const char *from) {
  int64_t look = o->cfg.lookahead >= 0 ? o->cfg.lookahead : 512;
  if (o->cfg.budget >= 0) {
    if (o->cfg.budget + look != cells)
      return bad("%s is %lld cells a sequence, not --budget %lld + "
                 "lookahead %lld: give one of them, or make them agree",
                 from, (long long)cells, (long long)o->cfg.budget,
                 (long long)look);
    return 0;
  }
  if (cells <= look || (o->cfg.sinks >= 0 && cells - look <= o->cfg.sinks))
    return bad("%s is %lld cells a sequence, which the prefill chunk "
               "(lookahead %lld)%s fills: give more cells, fewer -np, a "
               "smaller -ub or --lookahead, or --budget", from,
               (long long)cells, (long long)look,
               o->cfg.sinks >= 0 ? " and the sinks" : "");
  o->cfg.budget = cells - look;
  return 0;
}

/* -c N over -np P: N/P cells a sequence. */
static int ctx_budget(serve_opts_t *o, int64_t n, bool trained) {
  char from[96];
  snprintf(from, sizeof(from), "-c %lld%s over -np %u", (long long)n,
           trained ? " (the model's training context)" : "", o->parallel);
  return budget_of(o, n / o->parallel, from);
}

/* The rules of llama-server's flags that need no model: the prefill chunk
 * (-b, -ub) as --lookahead, a sequence's cells (-c, --kv-unified-per-slot)
 * as --budget, -n as o->n_predict, --no-cache-idle-slots, the chat
 * template file read. 0, or 2 having said why. *held: what it allocated
 * (the caller frees it). */
static int flags_check(serve_opts_t *o, char **held) {
  serve_llama_t *l = &o->ls;
  int64_t chunk = chunk_of(l);
  *held = NULL;
  if (chunk >= 0) {
    if (o->cfg.lookahead >= 0 && o->cfg.lookahead != chunk)
      return bad("--lookahead %lld and -b/-ub (a prefill chunk of %lld) "
                 "disagree: give one of them", (long long)o->cfg.lookahead,
                 (long long)chunk);
    o->cfg.lookahead = chunk;
  }
  if (l->ctx >= 0 && l->ctx_slot >= 0)
    return bad("give -c or --kv-unified-per-slot, not both");
  if (l->ctx > 0 && ctx_budget(o, l->ctx, false) != 0)
    return 2;
  if (l->ctx_slot > 0) {
    char from[64];
    snprintf(from, sizeof(from), "--kv-unified-per-slot %lld",
             (long long)l->ctx_slot);
    if (budget_of(o, l->ctx_slot, from) != 0)
      return 2;
  }
  if (l->n_predict > (int64_t)o->n_predict_max)
    return bad("-n %lld is more than --n-predict-max %u",
               (long long)l->n_predict, o->n_predict_max);
  o->n_predict = l->n_predict < 0 ? o->n_predict_max
                                  : (uint32_t)l->n_predict;
  if (l->no_cache_idle)
    o->cache_ram = 0;
  if (l->chat_template != NULL && l->chat_template_file != NULL)
    return bad("give --chat-template or --chat-template-file, not both");
  if (l->chat_template_file != NULL) {
    size_t len;
    if ((*held = cli_read_file(l->chat_template_file, &len)) == NULL)
      return bad("cannot read --chat-template-file %s: %s",
                 l->chat_template_file, strerror(errno));
    l->chat_template = *held;
  }
  return 0;
}

/* The row that sets a request field, for a message about its value. */
static const cli_opt_t *row_of(const char *key) {
  for (size_t i = 0; i < serve_llama_flags_n; i++) {
    const cli_opt_t *o = &serve_llama_flags[i];
    if (o->kind == CLI_ROW && o->off == LS(defaults) &&
        o->with.row.key != NULL && strcmp(o->with.row.key, key) == 0)
      return o;
  }
  return NULL;
}

/* Those that need the model (loaded): -c 0 (its training context),
 * --keep (its BOS), the device flags (whether llama.cpp has a GPU), and
 * the request defaults, checked by making a sampler of them, as a request
 * would. 0, or 2 having said why. */
int options_model(serve_opts_t *o, const lm_t *lm) {
  serve_llama_t *l = &o->ls;
  if (l->device != NULL && llama_supports_gpu_offload())
    return bad("--%.*s: llama.cpp has a GPU here, and serve keeps every "
               "layer and the cache on the CPU: leave it out",
               NAME(l->device));
  if (l->ctx == 0) {
    int32_t n = llama_model_n_ctx_train(lm->model);
    if (ctx_budget(o, n > 0 ? n : 0, true) != 0)
      return 2;
  }
  if (l->keep >= 0) {
    int64_t sinks = l->keep + (llama_vocab_get_add_bos(lm->vocab) ? 1 : 0);
    if (o->cfg.sinks >= 0 && o->cfg.sinks != sinks)
      return bad("--keep %lld is %lld sinks with this model, not --sinks "
                 "%lld: give one of them", (long long)l->keep,
                 (long long)sinks, (long long)o->cfg.sinks);
    if (o->cfg.budget >= 0 && sinks >= o->cfg.budget)
      return bad("--keep %lld (%lld sinks) leaves nothing of --budget "
                 "%lld to slide", (long long)l->keep, (long long)sinks,
                 (long long)o->cfg.budget);
    o->cfg.sinks = sinks;
  }
  if (l->defaults == NULL)
    return 0;
  /* The defaults as a request of nothing else would give them: a sampler
   * that refuses them names the field, which names the flag. */
  char err[400], *text = json_dumps(l->defaults, JSON_COMPACT);
  up_sampler_t *s = NULL;
  int rc = text != NULL ? up_sampler_new(&s, lm->model, text, err,
                                         sizeof(err))
                        : (snprintf(err, sizeof(err), "out of memory"), -1);
  free(text);
  up_sampler_free(s);
  if (rc == 0)
    return 0;
  const char *q = strchr(err, '"'), *e = q ? strchr(q + 1, '"') : NULL;
  char key[64] = "";
  if (e != NULL && (size_t)(e - q) < sizeof(key))
    snprintf(key, sizeof(key), "%.*s", (int)(e - q - 1), q + 1);
  const cli_opt_t *row = row_of(key);
  if (row != NULL)
    return bad("--%.*s: %s", NAME(row), err);
  return bad("the request defaults of the flags: %s", err);
}

void options_free(held_t *h, serve_opts_t *o) {
  free(o->api_keys);
  free(h->keys_arg);
  free(h->keys_file);
  free(h->alias);
  free(h->template);
  free(h->ui_config);
  json_decref(o->ls.ui_settings);
  json_decref(o->ls.defaults);
}

/* An API key: printable ASCII without blanks, as the daemon's token. */
static bool key_ok(const char *k) {
  for (const char *p = k; *p; p++)
    if ((unsigned char)*p < 0x21 || (unsigned char)*p > 0x7e)
      return false;
  return *k != '\0';
}

/* Cuts text into keys at each of `seps` (blanks around a key and empty
 * pieces left out; with comments, a piece starting with # too) and adds
 * them to o->api_keys. 0, or 2 having said why. */
static int add_keys(serve_opts_t *o, char *text, const char *seps,
                    bool comments, const char *from) {
  size_t n = 0;
  while (o->api_keys != NULL && o->api_keys[n] != NULL)
    n++;
  for (char *p = text; *p != '\0';) {
    size_t len = strcspn(p, seps);
    char *next = p + len + (p[len] != '\0');
    p[len] = '\0';
    p += strspn(p, " \t\r");
    for (char *e = p + strlen(p); e > p && strchr(" \t\r", e[-1]); )
      *--e = '\0';
    if (*p != '\0' && !(comments && *p == '#')) {
      if (!key_ok(p))
        return bad("the API key must be printable ASCII without blanks "
                   "(%s)", from);
      char **k = realloc(o->api_keys, (n + 2) * sizeof(*k));
      if (k == NULL)
        return fail("out of memory");
      k[n++] = p;
      k[n] = NULL;
      o->api_keys = k;
    }
    p = next;
  }
  return 0;
}

/* The web UI's flags: --api-prefix a path ("/llama", no '/' at its end),
 * the UI's settings JSON (from --ui-config or its file). 0, or 2 having
 * said why. */
static int ui_check(serve_llama_t *l, held_t *h) {
  const char *p = l->api_prefix;
  size_t pl = p != NULL ? strlen(p) : 0;
  if (p != NULL && (pl < 2 || p[0] != '/' || p[pl - 1] == '/' ||
                    strpbrk(p, "?#{} \t") != NULL))
    return bad("--api-prefix %s: a path under which every route goes, "
               "such as /llama (no '/' at its end)", p);
  struct stat st;
  if (l->path != NULL && stat(l->path, &st) != 0)
    return bad("--path %s: %s", l->path, strerror(errno));
  if (l->path != NULL && !S_ISDIR(st.st_mode))
    return bad("--path %s: not a folder", l->path);
  if (l->ui_config != NULL && l->ui_config_file != NULL)
    return bad("give --ui-config or --ui-config-file, not both");
  if (l->ui_config_file != NULL) {
    size_t len;
    if ((h->ui_config = cli_read_file(l->ui_config_file, &len)) == NULL)
      return bad("cannot read --ui-config-file %s: %s", l->ui_config_file,
                 strerror(errno));
    l->ui_config = h->ui_config;
  }
  if (l->ui_config != NULL) {
    json_error_t je;
    l->ui_settings = json_loads(l->ui_config, JSON_DECODE_ANY, &je);
    if (l->ui_settings == NULL)
      return bad("--ui-config%s: not JSON: %s (line %d)",
                 l->ui_config_file ? "-file" : "", je.text, je.line);
    if (!json_is_object(l->ui_settings))
      return bad("--ui-config%s: not a JSON object (the page's settings, "
                 "by name)", l->ui_config_file ? "-file" : "");
  }
  return 0;
}

/* Rules between options: where to listen, the API keys, the model's
 * name, then llama-server's flags' (flags.c). */
int options_check(serve_opts_t *o, held_t *h) {
  if (o->listen != NULL && (o->host != NULL || o->port >= 0))
    return bad("give --listen or --host/--port, not both");
  const char *host = o->host ? o->host : "127.0.0.1";
  size_t hl = strlen(host);
  if (hl > 5 && strcmp(host + hl - 5, ".sock") == 0) {
    /* llama-server's: a host ending in .sock is a Unix socket. */
    if (hl + 6 > sizeof(h->listen))
      return bad("--host %s: the socket's path is too long", host);
    snprintf(h->listen, sizeof(h->listen), "unix:%s", host);
    o->listen = h->listen;
  } else if (o->host != NULL || o->port >= 0) {
    if (hl > 256)
      return bad("--host %.40s...: too long for a host", host);
    snprintf(h->listen, sizeof(h->listen),
             strchr(host, ':') ? "[%s]:%u" : "%s:%u", host,
             o->port >= 0 ? (unsigned)o->port : 8080u);
    o->listen = h->listen;
  } else if (o->listen == NULL) {
    const char *env = getenv("EVICTD_LLAMA_LISTEN");
    o->listen = env && *env ? env : "127.0.0.1:8080";
  }
  if (o->cache_prompt && o->no_cache_prompt)
    return bad("give --cache-prompt or --no-cache-prompt, not both");
  if (o->api_key != NULL) {
    if ((h->keys_arg = strdup(o->api_key)) == NULL)
      return fail("out of memory");
    int rc = add_keys(o, h->keys_arg, ",", false, "--api-key");
    if (rc != 0)
      return rc;
  }
  if (o->api_key_file != NULL) {
    size_t len;
    if ((h->keys_file = cli_read_file(o->api_key_file, &len)) == NULL)
      return bad("cannot read --api-key-file %s: %s", o->api_key_file,
                 strerror(errno));
    int rc = add_keys(o, h->keys_file, "\n", true, "on each line of the "
                      "--api-key-file");
    if (rc != 0)
      return rc;
  }
  if ((o->api_key != NULL || o->api_key_file != NULL) && o->api_keys == NULL)
    return bad("%s holds no key: serve would ask for none",
               o->api_key_file ? "--api-key-file" : "--api-key");
  if (o->alias != NULL) {
    /* llama-server keeps its aliases sorted, and answers with the first. */
    json_t *names = flags_names(o->alias);
    if (names == NULL)
      return fail("out of memory");
    const char *first = json_string_value(json_array_get(names, 0));
    h->alias = first != NULL ? strdup(first) : NULL;
    json_decref(names);
    if (first == NULL)
      return bad("-a/--alias names no model");
    if (h->alias == NULL)
      return fail("out of memory");
    o->aliases = o->alias;
    o->alias = h->alias;
  }
  int rc = flags_check(o, &h->template);
  return rc != 0 ? rc : ui_check(&o->ls, h);
}


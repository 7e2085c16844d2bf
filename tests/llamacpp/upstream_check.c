/* A driver of serve/upstream.h (llama.cpp's common library behind a C
 * interface) for tests/llamacpp/test_upstream.py: each command runs one
 * part of the shim against a real model and prints what it answered as
 * JSON on stdout; the Python side asserts. A failure the shim reports is
 * printed as {"error": "..."} with exit status 2; anything else that goes
 * wrong exits 1.
 *
 *   upstream_check settings
 *   upstream_check info    MODEL TEMPLATE JINJA        (TEMPLATE: a file, "", or a name)
 *   upstream_check apply   MODEL TEMPLATE JINJA        < request.json
 *   upstream_check threads MODEL TEMPLATE THREADS      < request.json
 *   upstream_check parse   PARSER_FILE CHUNK           < generated text
 *   upstream_check schema                              < schema.json
 *   upstream_check sampler MODEL                       < params.json
 *   upstream_check sample  MODEL PROMPT N NPROBS       < params.json
 *   upstream_check tokcache MODEL|VOCAB SPECIAL ENTRIES < texts.json
 *   upstream_check tokcache MODEL|VOCAB runs ENTRIES    < runs.json
 *   upstream_check renders MODEL TEMPLATE               < requests.json
 *
 * tokcache runs serve's prompt cache (serve/tokcache.h) over a list of
 * texts, in order, and tokenizes each whole too: it prints whether the
 * vocabulary allows reuse, the texts whose tokens differ, the tokens
 * reused, and the vocabulary's special tokens (their texts, whether
 * control, whether they strip spaces). With "runs", a list of runs each
 * on a cache of its own ({"special": bool, "texts": [...]}), their
 * results in a list, the vocabulary loaded once. A GGUF of a vocabulary
 * alone (llama.cpp's models/ggml-vocab-*)
 * loads as one.
 */
#include <jansson.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/lm.h"
#include "common/sampler.h"
#include "serve/shared/rcache.h"
#include "serve/shared/tokcache.h"
#include "serve/shared/tokseg.h"
#include "serve/upstream/sampler.h"
#include "serve/upstream/templates.h"
#include "serve/upstream/upstream.h"

static char err[1024];

static char *slurp(FILE *f) {
  size_t len = 0, cap = 4096;
  char *buf = malloc(cap);
  size_t n;
  while (buf != NULL && (n = fread(buf + len, 1, cap - len - 1, f)) > 0) {
    len += n;
    if (cap - len < 2) {
      char *more = realloc(buf, cap *= 2);
      if (more == NULL)
        free(buf);
      buf = more;
    }
  }
  if (buf == NULL) {
    fprintf(stderr, "upstream_check: out of memory\n");
    exit(1);
  }
  buf[len] = '\0';
  return buf;
}

static char *read_file(const char *path) {
  FILE *f = fopen(path, "rb");
  if (f == NULL) {
    perror(path);
    exit(1);
  }
  char *text = slurp(f);
  fclose(f);
  return text;
}

static int refused(void) {
  json_t *o = json_pack("{s:s}", "error", err);
  json_dumpf(o, stdout, 0);
  putchar('\n');
  json_decref(o);
  return 2;
}

/* Prints a JSON text the shim wrote, and frees it. */
static int print_json(char *text) {
  puts(text);
  free(text);
  return 0;
}

static void load(lm_t *lm, const char *path) {
  lm_init(false);
  up_init(false);
  if (lm_load(lm, "target", path, err, sizeof(err)) != 0) {
    fprintf(stderr, "upstream_check: %s\n", err);
    exit(1);
  }
}

/* TEMPLATE: "" (the GGUF's), a file holding one, or a name. */
static char *template_arg(const char *arg) {
  FILE *f = arg[0] != '\0' ? fopen(arg, "rb") : NULL;
  if (f == NULL)
    return strdup(arg);
  char *text = slurp(f);
  fclose(f);
  return text;
}

static int open_chat(up_chat_t **t, lm_t *lm, char **argv, bool jinja) {
  load(lm, argv[2]);
  char *tmpl = template_arg(argv[3]);
  int rc = up_chat_new(t, lm->model, tmpl, jinja, err, sizeof(err));
  free(tmpl);
  return rc;
}

typedef struct worker_s {
  const up_chat_t *t;
  const char *request, *expect;
  int same;
} worker_t;

/* Renders the same request many times, counting the answers equal to
 * the one made before the threads started. */
static void *worker(void *arg) {
  worker_t *w = arg;
  for (int i = 0; i < 25; i++) {
    char *out;
    if (up_chat_apply(w->t, w->request, &out, NULL, 0) == 0) {
      w->same += strcmp(out, w->expect) == 0;
      free(out);
    }
  }
  return NULL;
}

static int threads(const up_chat_t *t, int n) {
  char *request = slurp(stdin), *expect;
  if (up_chat_apply(t, request, &expect, err, sizeof(err)) != 0) {
    free(request);
    return refused();
  }
  worker_t w[16];
  pthread_t th[16];
  n = n < 1 ? 1 : n > 16 ? 16 : n;
  for (int i = 0; i < n; i++) {
    w[i] = (worker_t){t, request, expect, 0};
    pthread_create(&th[i], NULL, worker, &w[i]);
  }
  int same = 0;
  for (int i = 0; i < n; i++) {
    pthread_join(th[i], NULL);
    same += w[i].same;
  }
  printf("{\"applies\": %d, \"same\": %d}\n", n * 25, same);
  free(expect);
  free(request);
  return 0;
}

/* Feeds the text in chunks of CHUNK bytes (whole UTF-8 characters), then
 * the end; prints the last message, every delta, and the message of the
 * whole text parsed at once. */
static int parse(const char *parser_file, int chunk) {
  char *parser = read_file(parser_file), *text = slurp(stdin);
  up_parser_t *p;
  if (up_parser_new(&p, parser, err, sizeof(err)) != 0) {
    free(text);
    free(parser);
    return refused();
  }
  json_t *deltas = json_array();
  size_t len = strlen(text), at = 0;
  char *msg = NULL;
  int rc = 0;
  while (rc == 0) {
    size_t n = at + (size_t)chunk < len ? (size_t)chunk : len - at;
    while (at + n < len && ((unsigned char)text[at + n] & 0xC0) == 0x80)
      n++;
    char *d;
    free(msg);
    rc = up_parser_feed(p, text + at, n, n > 0, &msg, &d, err, sizeof(err));
    if (rc == 0) {
      json_t *more = json_loads(d, 0, NULL);
      json_array_extend(deltas, more);
      json_decref(more);
      free(d);
    }
    if (n == 0)
      break;
    at += n;
  }
  up_parser_free(p);
  char *whole = NULL;
  if (rc == 0)
    rc = up_chat_parse(parser, text, len, false, &whole, err, sizeof(err));
  if (rc != 0) {
    json_decref(deltas);
    free(msg);
    free(text);
    free(parser);
    return refused();
  }
  json_t *o = json_pack("{s:o,s:o,s:o}", "message", json_loads(msg, 0, NULL),
                        "deltas", deltas, "whole", json_loads(whole, 0, NULL));
  json_dumpf(o, stdout, 0);
  putchar('\n');
  json_decref(o);
  free(whole);
  free(msg);
  free(text);
  free(parser);
  return 0;
}

/* Greedy-checks and probabilities along a generation: each step's token,
 * the argmax of its logits, the probabilities up_sampler_probs gives. */
static int sample(const char *model, const char *prompt, int n, int nprobs) {
  lm_t lm = {0};
  load(&lm, model);
  char *params = slurp(stdin);
  up_sampler_t *s;
  if (up_sampler_new(&s, lm.model, params, err, sizeof(err)) != 0) {
    free(params);
    lm_close(&lm);
    return refused();
  }
  llama_token *toks;
  int n_prompt = lm_tokenize(&lm, prompt, strlen(prompt), false, &toks);
  lm_opts_t o = {.n_ctx = 4096, .n_batch = 4096, .n_seq = 1};
  lm_settings_t set = {LM_EXACT, .model = model};
  if (n_prompt < 1 || lm_context(&lm, &o, &set, err, sizeof(err)) != 0) {
    fprintf(stderr, "upstream_check: %s\n", n_prompt < 1 ? "no prompt" : err);
    return 1;
  }
  json_t *tokens = json_array(), *argmax = json_array(), *probs = json_array();
  char *text = calloc(1, (size_t)n * 64 + 1), piece[64];
  size_t text_len = 0;
  lm_clear(&lm);
  for (int i = 0; i < n_prompt; i++) {
    lm_add(&lm, toks[i], i, 0, i == n_prompt - 1);
    up_sampler_accept(s, toks[i], false, NULL, 0);
  }
  int rc = 0, pos = n_prompt;
  for (int step = 0; rc == 0 && step < n; step++) {
    if (lm_decode(&lm, err, sizeof(err)) != 0) {
      fprintf(stderr, "upstream_check: %s\n", err);
      return 1;
    }
    int idx = step == 0 ? n_prompt - 1 : 0;
    llama_token tok;
    int drawn = up_sampler_sample(s, lm.ctx, idx, &tok, err, sizeof(err));
    if (drawn < 0) {
      rc = 2;
      break;
    }
    if (drawn == 1) /* nothing may follow: the text is over */
      break;
    json_array_append_new(tokens, json_integer(tok));
    json_array_append_new(argmax, json_integer(sampler_argmax(
        llama_get_logits_ith(lm.ctx, idx), lm.n_vocab, NULL)));
    if (nprobs > 0) {
      up_prob_t top[64];
      float p_tok;
      int k = up_sampler_probs(s, lm.ctx, idx, tok, top, nprobs > 64 ? 64
                               : nprobs, &p_tok, err, sizeof(err));
      json_t *list = json_array();
      for (int i = 0; i < k; i++)
        json_array_append_new(list, json_pack("[i,f]", top[i].id,
                                              (double)top[i].p));
      json_array_append_new(probs, json_pack("{s:f,s:o}", "p_tok",
                                             (double)p_tok, "top", list));
    }
    if (up_sampler_accept(s, tok, true, err, sizeof(err)) != 0) {
      rc = 2;
      break;
    }
    if (lm_is_end(&lm, tok))
      break;
    int m = lm_piece(&lm, tok, piece, sizeof(piece));
    if (m > 0) {
      memcpy(text + text_len, piece, (size_t)m);
      text_len += (size_t)m;
    }
    lm_clear(&lm);
    lm_add(&lm, tok, pos++, 0, true);
  }
  char *settings = NULL;
  up_sampler_settings(s, &settings, NULL, 0);
  /* A random model's tokens may end within a character: then no text. */
  json_t *jtext = json_stringn(text, text_len);
  json_t *out = json_pack("{s:o,s:o,s:o,s:o,s:o}", "tokens", tokens,
                          "argmax", argmax, "probs", probs, "text",
                          jtext != NULL ? jtext : json_null(), "settings",
                          json_loads(settings, 0, NULL));
  if (rc != 0)
    json_object_set_new(out, "error", json_string(err));
  json_dumpf(out, stdout, 0);
  putchar('\n');
  json_decref(out);
  free(settings);
  free(text);
  free(toks);
  free(params);
  up_sampler_free(s);
  lm_close(&lm);
  return rc;
}

/* One run of the prompt cache over texts: what tokcache prints for it. */
static json_t *tokcache_run(const lm_t *lm, json_t *texts, bool special,
                            uint32_t entries) {
  tokcache_t *tc = tokcache_new(lm, entries, (size_t)32 << 20);
  if (tc == NULL)
    return NULL;
  const char *why = NULL;
  bool usable = tokcache_usable(tc, &why);
  json_t *bad = json_array(), *reused = json_array();
  size_t i;
  json_t *v;
  json_array_foreach(texts, i, v) {
    const char *text = json_string_value(v);
    size_t len = json_string_length(v);
    llama_token *a = NULL, *b = NULL;
    uint32_t r = 0;
    int na = tokcache_tokenize(tc, text, len, special, &a, &r);
    int nb = lm_tokenize(lm, text, len, special, &b);
    if (na != nb || na < 0 ||
        memcmp(a, b, sizeof(*a) * (size_t)(na < 0 ? 0 : na)) != 0) {
      int at = 0;
      while (at < na && at < nb && a[at] == b[at])
        at++;
      json_array_append_new(bad, json_pack("{s:I,s:i,s:i,s:i}", "text",
                                           (json_int_t)i, "cached", na,
                                           "whole", nb, "first_diff", at));
    }
    json_array_append_new(reused, json_integer(r));
    free(a);
    free(b);
  }
  tokcache_stats_t st;
  tokcache_scrape(tc, &st);
  tokseg_t *ts = tokseg_new(lm, 1, 1);
  const char *seg_why = NULL;
  bool seg = ts != NULL && tokseg_usable(ts, &seg_why);
  json_t *o = json_pack("{s:b,s:s?,s:b,s:s?,s:o,s:o,s:I,s:I,s:I,s:I}",
                        "usable", usable, "why", why, "segments", seg,
                        "segments_why", seg_why, "mismatches", bad,
                        "reused", reused, "hits", (json_int_t)st.hits,
                        "kept", (json_int_t)st.kept, "bytes",
                        (json_int_t)st.bytes, "prompts",
                        (json_int_t)st.prompts);
  tokseg_free(ts);
  tokcache_free(tc);
  return o;
}

/* The texts llama.cpp splits out first, for the tests' conversations:
 * control and unknown ones (with special), user-defined ones. */
static json_t *specials(const lm_t *lm) {
  json_t *sp = json_array();
  for (llama_token t = 0; t < llama_vocab_n_tokens(lm->vocab); t++) {
    enum llama_token_attr a = llama_vocab_get_attr(lm->vocab, t);
    const char *text = llama_vocab_get_text(lm->vocab, t);
    if (text == NULL || text[0] == '\0' ||
        !(a & (LLAMA_TOKEN_ATTR_CONTROL | LLAMA_TOKEN_ATTR_USER_DEFINED |
               LLAMA_TOKEN_ATTR_UNKNOWN)))
      continue;
    json_array_append_new(sp, json_pack(
        "{s:s%,s:b,s:b}", "text", text, strlen(text), "control",
        (a & (LLAMA_TOKEN_ATTR_CONTROL | LLAMA_TOKEN_ATTR_UNKNOWN)) != 0,
        "strip", (a & (LLAMA_TOKEN_ATTR_LSTRIP |
                       LLAMA_TOKEN_ATTR_RSTRIP)) != 0));
  }
  return sp;
}

/* SPECIAL "runs": stdin holds [{"special": bool, "texts": [...]}, ...],
 * each run on a cache of its own, and a list of results is printed. */
static int tokcache(const char *path, const char *special, uint32_t entries) {
  lm_init(false);
  struct llama_model_params mp = llama_model_default_params();
  mp.vocab_only = true;
  struct llama_model *model = llama_model_load_from_file(path, mp);
  if (model == NULL) {
    fprintf(stderr, "upstream_check: cannot load %s\n", path);
    return 1;
  }
  lm_t lm = {.label = "vocabulary", .vocab = llama_model_get_vocab(model)};
  char *in = slurp(stdin);
  json_error_t je;
  json_t *texts = json_loads(in, 0, &je), *o = NULL;
  free(in);
  bool runs = strcmp(special, "runs") == 0;
  if (!json_is_array(texts)) {
    fprintf(stderr, "upstream_check: a JSON list on stdin\n");
    return 1;
  }
  if (runs) {
    o = json_array();
    size_t i;
    json_t *run;
    json_array_foreach(texts, i, run) {
      json_t *r = tokcache_run(&lm, json_object_get(run, "texts"),
                               json_is_true(json_object_get(run, "special")),
                               entries);
      if (r == NULL)
        return 1;
      json_array_append_new(o, r);
    }
  } else if ((o = tokcache_run(&lm, texts, atoi(special) != 0, entries)) ==
             NULL) {
    return 1;
  } else {
    json_object_set_new(o, "specials", specials(&lm));
  }
  json_dumpf(o, stdout, 0);
  putchar('\n');
  json_decref(o);
  json_decref(texts);
  llama_model_free(model);
  return 0;
}

/* serve's render cache (serve/shared/rcache.h) over a list of chat
 * requests, in order, each rendered whole too: the requests whose render
 * differs in anything (or that one refused and the other did not), and
 * how the cache rendered them. */
static int renders(up_chat_t *t) {
  char *in = slurp(stdin);
  json_error_t je;
  json_t *reqs = json_loads(in, 0, &je);
  free(in);
  rcache_t *rc = rcache_new(8);
  if (!json_is_array(reqs) || rc == NULL) {
    fprintf(stderr, "upstream_check: a JSON list of requests on stdin\n");
    return 1;
  }
  json_t *bad = json_array(), *how = json_array();
  size_t i;
  json_t *req;
  json_array_foreach(reqs, i, req) {
    rcache_stats_t before, after;
    rcache_scrape(rc, &before);
    json_t *a = NULL, *b = NULL;
    char ea[256], eb[256];
    int ra = rcache_apply(rc, t, req, &a, ea, sizeof(ea));
    char *whole = json_dumps(req, JSON_COMPACT), *ans = NULL;
    int rb = up_chat_apply(t, whole, &ans, eb, sizeof(eb));
    if (rb == 0)
      b = json_loads(ans, 0, &je);
    free(whole);
    free(ans);
    rcache_scrape(rc, &after);
    json_array_append_new(how, json_string(
        ra != 0 ? "refused" : after.windows > before.windows ? "window"
                                                              : "whole"));
    if ((ra == 0) != (rb == 0) || (ra == 0 && !json_equal(a, b)))
      json_array_append_new(bad, json_pack(
          "{s:I,s:s?,s:s?}", "request", (json_int_t)i, "cached",
          ra == 0 ? json_string_value(json_object_get(a, "prompt")) : ea,
          "whole",
          rb == 0 ? json_string_value(json_object_get(b, "prompt")) : eb));
    json_decref(a);
    json_decref(b);
  }
  json_t *o = json_pack("{s:o,s:o}", "mismatches", bad, "how", how);
  json_dumpf(o, stdout, 0);
  putchar('\n');
  json_decref(o);
  json_decref(reqs);
  rcache_free(rc);
  return 0;
}

int main(int argc, char **argv) {
  const char *cmd = argc > 1 ? argv[1] : "";
  char *out;
  if (strcmp(cmd, "settings") == 0)
    return up_sampler_settings(NULL, &out, err, sizeof(err)) == 0
               ? print_json(out) : refused();
  if (strcmp(cmd, "schema") == 0) {
    char *schema = slurp(stdin);
    int rc = up_json_schema_grammar(schema, &out, err, sizeof(err));
    free(schema);
    if (rc != 0)
      return refused();
    json_t *o = json_pack("{s:s}", "grammar", out);
    json_dumpf(o, stdout, 0);
    putchar('\n');
    json_decref(o);
    free(out);
    return 0;
  }
  if (strcmp(cmd, "parse") == 0 && argc == 4)
    return parse(argv[2], atoi(argv[3]));
  if (strcmp(cmd, "tokcache") == 0 && argc == 5)
    return tokcache(argv[2], argv[3], (uint32_t)atoi(argv[4]));
  if (strcmp(cmd, "sample") == 0 && argc == 6)
    return sample(argv[2], argv[3], atoi(argv[4]), atoi(argv[5]));
  if (strcmp(cmd, "sampler") == 0 && argc == 3) {
    lm_t lm = {0};
    load(&lm, argv[2]);
    char *params = slurp(stdin);
    up_sampler_t *s;
    int rc = up_sampler_new(&s, lm.model, params, err, sizeof(err));
    free(params);
    if (rc == 0) {
      rc = up_sampler_settings(s, &out, err, sizeof(err));
      up_sampler_free(s);
    }
    lm_close(&lm);
    return rc == 0 ? print_json(out) : refused();
  }
  if (strcmp(cmd, "renders") == 0 && argc == 4) {
    lm_t lm = {0};
    up_chat_t *t;
    char *av[] = {argv[0], argv[1], argv[2], argv[3], (char *)"1"};
    if (open_chat(&t, &lm, av, true) != 0) {
      lm_close(&lm);
      return refused();
    }
    int rc = renders(t);
    up_chat_free(t);
    lm_close(&lm);
    return rc;
  }
  if ((strcmp(cmd, "info") == 0 || strcmp(cmd, "apply") == 0 ||
       strcmp(cmd, "threads") == 0) && argc == 5) {
    lm_t lm = {0};
    up_chat_t *t;
    bool threaded = strcmp(cmd, "threads") == 0;
    if (open_chat(&t, &lm, argv, threaded || atoi(argv[4]) != 0) != 0) {
      lm_close(&lm);
      return refused();
    }
    int rc;
    if (threaded) {
      rc = threads(t, atoi(argv[4]));
    } else if (strcmp(cmd, "info") == 0) {
      rc = up_chat_info(t, &out, err, sizeof(err)) == 0 ? print_json(out)
                                                        : refused();
    } else {
      char *request = slurp(stdin);
      rc = up_chat_apply(t, request, &out, err, sizeof(err)) == 0
               ? print_json(out) : refused();
      free(request);
    }
    up_chat_free(t);
    lm_close(&lm);
    return rc;
  }
  fprintf(stderr, "usage: see the top of tests/llamacpp/upstream_check.c\n");
  return 1;
}

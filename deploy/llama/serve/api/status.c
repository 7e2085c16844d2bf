/* GET /health (200 while evictd answers, "degraded" while only some
 * instances of a pool do; for probes) and GET /metrics (Prometheus text,
 * written with the daemon's prom.c: serve's families, and llama-server's
 * under its own names). */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "serve/api/status.h"

#include "prom.h"
#include "serve/shared/site.h"
#include "serve/shared/rcache.h"
#include "serve/shared/tokcache.h"

/* One instance's probe, on a thread of its own so that a hung instance
 * costs /health its timeout once, not once per instance. */
typedef struct probe_s {
  link_opts_t o;
  char url[512];
  int rc;
  fault_t f;
  pthread_t thread;
  bool started;
} probe_t;

static void *probe_main(void *arg) {
  probe_t *p = arg;
  link_t l;
  p->o.url = p->url;
  p->rc = link_open(&l, &p->o, &p->f);
  if (p->rc == 0 && (p->rc = evd_client_health(l.c)) != 0)
    fault_set(&p->f, 503, "evictd_unavailable", "evictd %s: %s: %s",
              p->url, evd_client_error(l.c)->code,
              evd_client_error(l.c)->message);
  link_close(&l);
  return NULL;
}

/* 200 {"status":"ok"} while every evictd instance answers its /healthz;
 * 200 {"status":"degraded","instances":[...]} while some of a pool do
 * (their sessions' requests pause, the others decode); 503 when none
 * does. */
static enum MHD_Result health(call_t *c) {
  const site_t *site = c->ctx;
  const char *list = site->o->link.url;
  if (list == NULL || *list == '\0')
    list = getenv("EVICTD_URL");
  if (list == NULL || *list == '\0')
    list = "http://127.0.0.1:8090";
  size_t n = 1;
  for (const char *q = list; *q; q++)
    n += *q == ',';
  probe_t *p = calloc(n, sizeof(*p));
  if (p == NULL)
    return http_error(c, 500, "out_of_memory", NULL, "out of memory");
  const char *at = list;
  for (size_t i = 0; i < n; i++) {
    size_t len = strcspn(at, ",");
    snprintf(p[i].url, sizeof(p[i].url), "%.*s", (int)len, at);
    at += len + (at[len] == ',');
    p[i].o = site->o->link;
    p[i].o.timeout_ms = 2000;
    p[i].o.reconnect_ms = 0;
    p[i].started = n > 1 &&
                   pthread_create(&p[i].thread, NULL, probe_main, &p[i]) == 0;
    if (!p[i].started)
      probe_main(&p[i]);
  }
  size_t ok = 0;
  for (size_t i = 0; i < n; i++) {
    if (p[i].started)
      pthread_join(p[i].thread, NULL);
    ok += p[i].rc == 0;
  }
  json_t *j;
  unsigned status = ok > 0 ? 200 : 503;
  if (ok == n) {
    j = json_pack("{s:s}", "status", "ok");
  } else if (n == 1) {
    j = json_pack("{s:s,s:s}", "status", "unavailable", "error", p[0].f.msg);
  } else {
    json_t *inst = json_array();
    for (size_t i = 0; i < n; i++)
      json_array_append_new(inst, p[i].rc == 0
          ? json_pack("{s:s,s:s}", "url", p[i].url, "status", "ok")
          : json_pack("{s:s,s:s,s:s}", "url", p[i].url, "status",
                      "unavailable", "error", p[i].f.msg));
    j = ok > 0 ? json_pack("{s:s,s:o}", "status", "degraded", "instances",
                           inst)
               : json_pack("{s:s,s:s,s:o}", "status", "unavailable", "error",
                           "no evictd instance of the pool answers",
                           "instances", inst);
  }
  free(p);
  return http_send_json(c, status, j);
}

/* A label's value as Prometheus's text writes it (backslash, quote and
 * newline escaped) into out, which has room for twice its length. */
static void label(char *out, const char *v) {
  for (; *v; v++) {
    if (*v == '\\' || *v == '"' || *v == '\n')
      *out++ = '\\';
    *out++ = *v == '\n' ? 'n' : *v;
  }
  *out = '\0';
}

/* The families of one sample each: a counter or a gauge, its help, its
 * value (counters of seconds are floats). */
typedef struct family_s {
  const char *name, *type, *help;
  double v;
} family_t;

static enum MHD_Result metrics(call_t *c) {
  const site_t *site = c->ctx;
  tq_counts_t qc;
  stats_t s;
  evd_buf_t b;
  tq_counts(site->q, &qc);
  board_scrape(site->board, &s);
  tokcache_stats_t tk = {0};
  if (site->tokens != NULL)
    tokcache_scrape(site->tokens, &tk);
  rcache_stats_t rs = {0};
  if (site->renders != NULL)
    rcache_scrape(site->renders, &rs);
  const family_t one[] = {
      {"evictd_llama_requests_total", "counter", "Completion requests "
       "received.", (double)qc.requests},
      {"evictd_llama_requests_failed_total", "counter", "Completion "
       "requests that ended in an error.", (double)(qc.failed + qc.rejected)},
      {"evictd_llama_tokens_predicted_total", "counter", "Tokens generated.",
       (double)s.tokens},
      {"evictd_llama_requests_active", "gauge", "Requests decoding.",
       qc.running},
      {"evictd_llama_requests_queued", "gauge", "Requests waiting for a "
       "sequence.", qc.queued},
      {"evictd_llama_sequences_active", "gauge", "Sequences decoding (a "
       "request of n choices has n).", s.sequences},
      {"evictd_llama_iterations_total", "counter", "Decode iterations (one "
       "evictd batch and one llama_decode each).", (double)s.iterations},
      {"evictd_llama_steps_total", "counter", "Steps sent to evictd.",
       (double)s.steps},
      {"evictd_llama_steps_ahead_total", "counter", "Steps sent to evictd "
       "before the pass that precedes theirs, answered while it ran.",
       (double)s.ahead},
      {"evictd_llama_evictd_connections_total", "counter", "Connections the "
       "evictd client opened.", (double)s.connections},
      {"evictd_llama_evictd_resends_total", "counter", "Requests the evictd "
       "client sent again.", (double)s.resends},
      {"evictd_llama_evictd_gateway_resends_total", "counter", "Requests "
       "sent again after a proxy's 502 or 504 (an instance behind nginx "
       "down).", (double)s.link.gateway},
      {"evictd_llama_evictd_creates_total", "counter", "Sessions created "
       "with PUT after their first step met unknown_session (a daemon "
       "with --no-autocreate).", (double)s.link.creates},
      {"evictd_llama_evictd_per_session", "gauge", "1 when evictd's URL "
       "refused POST /step (421: nginx in front of a pool) and steps go one "
       "session per request.", s.per_session},
      {"evictd_llama_evictd_seconds_total", "counter", "Time spent waiting "
       "for evictd (what the passes did not hide of the steps sent ahead "
       "of them).", s.evictd_s},
      {"evictd_llama_decode_seconds_total", "counter", "Time spent in "
       "llama_decode.", s.decode_s},
      {"evictd_llama_iteration_seconds_total", "counter", "Time of the "
       "decode iterations in all.", s.total_s},
      {"evictd_llama_conversation_hits_total", "counter", "Requests that "
       "continued a parked or saved conversation.", (double)s.convs.hits},
      {"evictd_llama_conversation_misses_total", "counter", "Requests that "
       "could have continued one (cache_prompt) and found none.",
       (double)s.convs.misses},
      {"evictd_llama_conversation_no_back_total", "counter", "Misses "
       "that a full-attention cache would have continued by going back in "
       "a kept conversation, which this model's recurrent or "
       "sliding-window state cannot: no checkpoint fitted, so the prompt "
       "was decoded afresh.",
       (double)s.convs.no_back},
      {"evictd_llama_prompt_tokens_reused_total", "counter", "Prompt tokens "
       "a continued conversation already held (not decoded again).",
       (double)s.convs.reused},
      {"evictd_llama_prompt_tokens_decoded_total", "counter", "Prompt "
       "tokens decoded.", (double)s.convs.prefilled},
      {"evictd_llama_prompt_tokenize_hits_total", "counter", "Prompts "
       "whose text began like a kept one's: tokenized from where they part "
       "(exact for the vocabularies that allow it).", (double)tk.hits},
      {"evictd_llama_prompt_tokenize_reused_total", "counter", "Prompt "
       "tokens taken from a kept prompt's, not tokenized again.",
       (double)tk.reused},
      {"evictd_llama_prompt_tokenize_kept_bytes", "gauge", "Bytes of the "
       "prompts' texts and tokens kept for that.", (double)tk.bytes},
      {"evictd_llama_template_renders_window_total", "counter", "Chat "
       "requests rendered from their last messages (a kept render "
       "extended; two windows agreeing).", (double)rs.windows},
      {"evictd_llama_template_renders_whole_total", "counter", "Chat "
       "requests whose whole message list was rendered.",
       (double)rs.whole},
      {"evictd_llama_template_seconds_total", "counter", "Time spent "
       "rendering chat templates (/v1/chat/completions, /v1/messages, "
       "/v1/responses, /apply-template).", rs.seconds},
      {"evictd_llama_conversations_parked", "gauge", "Slots holding a "
       "conversation no request decodes.", s.convs.parked},
      {"evictd_llama_conversations_saved", "gauge", "Conversations saved to "
       "host memory (--cache-ram).", s.convs.stored},
      {"evictd_llama_conversations_saved_bytes", "gauge", "Bytes they "
       "hold.", (double)s.convs.stored_bytes},
      {"evictd_llama_conversations_saved_total", "counter", "Parked "
       "conversations saved when their slot was needed.",
       (double)s.convs.saved},
      {"evictd_llama_conversations_restored_total", "counter", "Saved "
       "conversations put back in a slot.", (double)s.convs.restored},
      {"evictd_llama_conversations_dropped_total", "counter", "Parked or "
       "saved conversations dropped (least recently used first out): "
       "their sessions deleted.", (double)s.convs.dropped},
      {"evictd_llama_conversations_written_total", "counter", "Parked "
       "conversations given to --cache-dir's writer (within "
       "--cache-write-ms of parking).", (double)s.convs.written},
      {"evictd_llama_cache_dir_writes_total", "counter", "Files of "
       "conversations written to --cache-dir (whole, fsynced, renamed).",
       (double)s.convs.disk_writes},
      {"evictd_llama_cache_dir_written_bytes_total", "counter", "Their "
       "bytes.", (double)s.convs.disk_bytes},
      {"evictd_llama_cache_dir_write_errors_total", "counter", "Writes to "
       "--cache-dir that failed (a full disk, an I/O error), each try: "
       "tried again every 2 s, serving goes on.",
       (double)s.convs.disk_errors},
      {"evictd_llama_cache_dir_writes_pending", "gauge", "Writes waiting "
       "for the writer thread (failed ones to be tried again included).",
       s.convs.disk_pending},
      {"evictd_llama_conversation_disk_hits_total", "counter", "Requests "
       "that continued a conversation found in --cache-dir at start: of "
       "the conversation hits.", (double)s.convs.disk_hits},
      {"evictd_llama_checkpoints_total", "counter", "Checkpoints kept: "
       "a conversation's state where a turn's new text begins, or before "
       "its prompt's last tokens (--ctx-checkpoints).",
       (double)s.convs.ck_made},
      {"evictd_llama_checkpoint_hits_total", "counter", "Requests that "
       "continued from a checkpoint (a regenerated answer, an edited "
       "message): of the conversation hits.", (double)s.convs.ck_hits},
      {"evictd_llama_checkpoints_dropped_total", "counter", "Checkpoints "
       "dropped (the oldest first, beyond --ctx-checkpoints per slot or "
       "--cache-ram).", (double)s.convs.ck_dropped},
      {"evictd_llama_checkpoints", "gauge", "Checkpoints held in host "
       "memory.", s.convs.ck_held},
      {"evictd_llama_checkpoints_bytes", "gauge", "Bytes they hold (within "
       "--cache-ram).", (double)s.convs.ck_bytes},
      {"evictd_llama_cells_packed_total", "counter", "Sequences whose "
       "cells were moved down to cell 0 after a pass left some above what "
       "llama.cpp then attends over.", (double)s.convs.packed},
  };
  /* llama-server's families, under its names and with its helps, so that
   * what scrapes llama-server scrapes serve (its colons are legal names;
   * promtool's lint says only recording rules should use them). The
   * rates are over the time since the last scrape, as llama-server's:
   * the prompt's positions per second of the iterations that decoded
   * some; the generated tokens per second of each sequence's own
   * iterations (the first token of each, drawn from the prompt's logits,
   * costs none). serve decodes nothing speculatively: its drafts are 0. */
  const pass_counts_t *p = &s.pass, *k = &s.bucket;
  const family_t llamacpp[] = {
      {"llamacpp:prompt_tokens_total", "counter", "Number of prompt tokens "
       "processed, excluding cached tokens", (double)p->prompt_tokens},
      {"llamacpp:prompt_tokens_cached_total", "counter", "Number of prompt "
       "tokens reused from the cache", (double)s.convs.reused},
      {"llamacpp:prompt_seconds_total", "counter", "Total time spent "
       "processing prompts", p->prompt_s},
      {"llamacpp:tokens_predicted_total", "counter", "Number of generation "
       "tokens processed", (double)s.tokens},
      {"llamacpp:tokens_predicted_seconds_total", "counter", "Total time "
       "spent generating tokens", p->gen_s},
      {"llamacpp:n_decode_total", "counter", "Total number of llama_decode() "
       "calls", (double)s.iterations},
      {"llamacpp:spec_decode_num_draft_tokens_total", "counter",
       "Speculative: Total draft tokens generated", 0},
      {"llamacpp:spec_decode_num_accepted_tokens_total", "counter",
       "Speculative: Total draft tokens accepted by the target model", 0},
      {"llamacpp:spec_decode_num_drafts_total", "counter", "Speculative: "
       "Total speculative decoding verification steps", 0},
      /* A maximum, which only grows, typed a counter as llama-server types
       * it (clients and llama.cpp's test_metrics read the type); promtool
       * finds its name without _total in llama-server's too. */
      {"llamacpp:n_tokens_max", "counter", "Largest observed sequence length "
       "(prompt + generation)", p->n_max},
      {"llamacpp:prompt_tokens_seconds", "gauge", "Average prompt throughput "
       "in tokens/s", k->prompt_s > 0 ? (double)k->prompt_tokens / k->prompt_s
                                       : 0},
      {"llamacpp:predicted_tokens_seconds", "gauge", "Average generation "
       "throughput in tokens/s", k->gen_s > 0 ? (double)k->gen_steps / k->gen_s
                                               : 0},
      {"llamacpp:requests_processing", "gauge", "Number of requests "
       "processing", qc.running},
      {"llamacpp:requests_deferred", "gauge", "Number of requests deferred",
       qc.queued},
      {"llamacpp:n_busy_slots_per_decode", "gauge", "Average number of busy "
       "slots per llama_decode() call", (double)p->busy /
       (s.iterations > 0 ? (double)s.iterations : 1.0)},
  };
  evd_buf_init(&b);
  for (size_t i = 0; i < sizeof(one) / sizeof(one[0]); i++) {
    evd_prom_family(&b, one[i].name, one[i].type, one[i].help);
    evd_prom_line(&b, "%s %.17g\n", one[i].name, one[i].v);
  }
  for (size_t i = 0; i < sizeof(llamacpp) / sizeof(llamacpp[0]); i++) {
    evd_prom_family(&b, llamacpp[i].name, llamacpp[i].type,
                    llamacpp[i].help);
    evd_prom_line(&b, "%s %.17g\n", llamacpp[i].name, llamacpp[i].v);
  }
  evd_prom_family(&b, "evictd_llama_model_memory", "gauge", "1, labelled "
                  "with what the model's layers keep (kind: full, "
                  "windowed, recurrent, hybrid, other; rewind: whether a "
                  "conversation can go back in it).");
  evd_prom_line(&b, "evictd_llama_model_memory{kind=\"%s\",rewind=\"%s\"} "
                "1\n", lm_mem_label(site->lm->kind),
                site->lm->rewind ? "yes" : "no");
  evd_prom_family(&b, "evictd_llama_requests_finished_total", "counter",
                  "Completion requests that ended, by outcome: ok, failed, "
                  "cancelled (the client went away), rejected (queue full "
                  "or shutting down).");
  const char *outcome[] = {"ok", "failed", "cancelled", "rejected"};
  uint64_t count[] = {qc.ok, qc.failed, qc.cancelled, qc.rejected};
  for (int i = 0; i < 4; i++)
    evd_prom_line(&b, "evictd_llama_requests_finished_total{outcome=\"%s\"} "
                  "%llu\n", outcome[i], (unsigned long long)count[i]);
  evd_prom_family(&b, "evictd_llama_rehomes_total", "counter",
                  "Sessions re-homed (adopted in the state the engine's "
                  "cache holds, then the change sent again), by cause: "
                  "unknown_session (the daemon did not hold it), diverged "
                  "(it held another window), size (without the "
                  "precondition, an answer from a fresh window).");
  const char *cause[] = {[LINK_LOST] = "unknown_session",
                         [LINK_DIVERGED] = "diverged", [LINK_FRESH] = "size"};
  for (int i = 0; i < LINK_CAUSES; i++)
    evd_prom_line(&b, "evictd_llama_rehomes_total{cause=\"%s\"} %llu\n",
                  cause[i], (unsigned long long)s.link.rehomes[i]);
  /* Each evictd instance (a pool's, or the one URL): behind a proxy, the
   * proxy's URL stands for the pool behind it. */
  static const char *const lane_help[] = {
      "1 while the evictd instance answers within --timeout-ms.",
      "1 while the engine does not wait on the instance (it answered "
      "nothing within the wait an iteration gives it): its sequences sit "
      "out, the others decode.",
      "Sequences sitting out for the instance's answers."};
  static const char *const lane_name[] = {
      "evictd_llama_evictd_instance_up", "evictd_llama_evictd_instance_late",
      "evictd_llama_evictd_instance_waiting"};
  for (int k = 0; k < 3; k++) {
    evd_prom_family(&b, lane_name[k], "gauge", lane_help[k]);
    for (uint32_t i = 0; i < s.n_lanes; i++) {
      const lane_state_t *ls = &s.lanes[i];
      unsigned v = k == 0 ? ls->up : k == 1 ? ls->late : ls->waiting;
      char lbl[2 * sizeof(ls->name)];
      label(lbl, ls->name);
      evd_prom_line(&b, "%s{instance=\"%s\"} %u\n", lane_name[k], lbl, v);
    }
  }
  evd_prom_family(&b, "evictd_llama_evictd_round_trip_seconds", "histogram",
                  "The time an iteration waited for evictd's answers (a "
                  "batch sent at its start, and the part of the batch sent "
                  "ahead that its pass did not hide).");
  evd_prom_histogram(&b, "evictd_llama_evictd_round_trip_seconds", "",
                     &s.evictd_rtt);
  if (b.oom) {
    evd_buf_free(&b);
    return http_error(c, 500, "out_of_memory", NULL, "out of memory");
  }
  /* The buffer's memory is taken by the answer. When serve started, as
   * llama-server says it beside its metrics (its test_metrics reads it). */
  char started[24];
  snprintf(started, sizeof(started), "%lld", site->created);
  return http_send_header(c, 200, "text/plain; version=0.0.4", b.data,
                          b.len, "Process-Start-Time-Unix", started);
}

/* The probes': /health answers without the API key. */
const http_route_t status_routes[] = {
    {"/health", "GET", health, HTTP_KEYLESS, NULL, NULL},
    {"/v1/health", "GET", health, HTTP_KEYLESS, NULL, NULL},
    {"/metrics", "GET", metrics, 0, NULL, NULL},
    {NULL, NULL, NULL, 0, NULL, NULL}};

/* The API: the route table, one handler per route (those of the requests
 * that move a window are in api_step.c), and the one entry point that
 * dispatches a request. Responses are written straight into the caller's
 * buffer; nothing here knows about sockets. */
#include "api.h"

#include <assert.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "api_int.h"
#include "log.h"
#include "pages.h"

void evd_config_defaults(evd_config_t *c) {
  memset(c, 0, sizeof *c);
  c->listen = "127.0.0.1:8090";
  c->budget = EVD_WINDOW_DEFAULT_BUDGET;
  c->sinks = 0;
  c->max_budget = 1048576;
  c->lookahead = 1;
  c->max_lookahead = 65536;
  c->page_size = 0;
  c->max_sessions = 1000000;
  c->max_positions = 65536;
  c->max_batch = 65536;
  c->max_depth = 32;
  c->max_body = 1048576;
  c->idle_ttl = 0;
  c->max_conns = 4096;
  c->conn_timeout = 30;
  c->journal_wait = 5;
  c->autocreate = 1;
  c->fsync = EVD_FSYNC_EVERYSEC;
  c->compact_after = (size_t)64 << 20;
  c->replay_pool = (size_t)64 << 20;
  c->log_level = EVD_LOG_INFO;
}

int evd_method_parse(const char *m) {
  static const struct {
    const char *name;
    int bit;
  } methods[] = {{"GET", EVD_M_GET},   {"HEAD", EVD_M_HEAD},
                 {"PUT", EVD_M_PUT},   {"POST", EVD_M_POST},
                 {"DELETE", EVD_M_DELETE}};
  size_t i;

  for (i = 0; i < sizeof methods / sizeof methods[0]; i++)
    if (strcmp(m, methods[i].name) == 0)
      return methods[i].bit;
  return EVD_M_OTHER;
}

int evd_api_new(evd_api_t **out, const evd_config_t *cfg) {
  evd_api_t *api = calloc(1, sizeof *api);

  if (api == NULL)
    return EVD_ENOMEM;
  api->cfg = *cfg;
  if (evd_table_new(&api->table, cfg->max_sessions, cfg->replay_pool) != 0) {
    free(api);
    return EVD_ENOMEM;
  }
  *out = api;
  return 0;
}

void evd_api_free(evd_api_t *api) {
  if (api == NULL)
    return;
  evd_table_free(api->table);
  free(api->pos);
  free(api->slots);
  free(api->victims);
  free(api->gone);
  free(api->pages);
  free(api->items);
  free(api);
}

evd_table_t *evd_api_table(evd_api_t *api) {
  return api->table;
}

void evd_api_set_journal(evd_api_t *api, evd_journal_t *j) {
  api->journal = j;
}

evd_metrics_t *evd_api_metrics(evd_api_t *api) {
  return &api->metrics;
}

void evd_api_set_clock(evd_api_t *api, uint64_t now_ms) {
  /* Ticks wrap after 13 years; ages are computed by unsigned difference. */
  api->now_tick = (uint32_t)(now_ms / 100);
}

void evd_api_touch_all(evd_api_t *api) {
  uint32_t n = evd_table_count(api->table);

  /* Each touch moves the oldest to the young end: n of them keep the order
   * and stamp everybody. */
  while (n-- > 0)
    evd_table_touch(api->table, evd_table_oldest(api->table), api->now_tick);
}

uint32_t evd_api_reap(evd_api_t *api) {
  /* Ticks are truncated, so "more than ttl ticks ago" guarantees at least
   * ttl seconds of real idleness: a session is never reaped early. */
  uint32_t ttl = api->cfg.idle_ttl * 10u, n = 0;
  evd_session_t *s;

  if (api->cfg.idle_ttl == 0)
    return 0;
  while ((s = evd_table_oldest(api->table)) != NULL &&
         (uint32_t)(api->now_tick - s->used) > ttl) {
    if (api->journal != NULL &&
        evd_journal_room(api->journal, 64 + (size_t)s->idlen) != 0)
      break; /* the next tick tries again */
    evd_log(EVD_LOG_DEBUG, "reaped idle session %.*s", (int)s->idlen, s->id);
    evd__journal(api, &(evd_op_t){.type = EVD_OP_REAP, .id = s->id,
                                  .idlen = s->idlen});
    evd_table_remove(api->table, s);
    n++;
  }
  if (api->journal != NULL)
    evd_journal_commit(api->journal);
  api->metrics.reaped += n;
  return n;
}

/* ---- handlers ----------------------------------------------------------- */

int evd__fail(evd__ctx_t *c, evd_apierr_t e, const char *message) {
  evd_apierr_body(c->out, e, message);
  return evd_apierr_status(e);
}

static int h_healthz(evd__ctx_t *c) {
  int err = c->api->journal != NULL ? evd_journal_error(c->api->journal) : 0;

  if (err == 0) {
    evd_buf_str(c->out, "{\"status\":\"ok\"}");
    return 200;
  }
  /* Still 200: reads go on and the journal retries by itself, so a
   * liveness probe must not restart the daemon; the detail says why
   * changes are refused. */
  evd_buf_str(c->out, "{\"status\":\"degraded\",\"journal\":");
  evd_buf_json_str(c->out, strerror(err), strlen(strerror(err)));
  evd_buf_str(c->out, ",\"changes\":\"refused until a journal write "
                      "succeeds\"}");
  return 200;
}

static int h_metrics(evd__ctx_t *c) {
  evd_rpool_t *pool = evd_table_pool(c->api->table);

  c->reply->content_type = "text/plain; version=0.0.4; charset=utf-8";
  c->api->metrics.replay_pool_bytes = pool->bytes;
  c->api->metrics.replay_let_go = pool->let_go;
  evd_metrics_write(&c->api->metrics, evd_table_count(c->api->table), c->out);
  return 200;
}

static int h_put(evd__ctx_t *c) {
  static const char *const fields[] = {"budget", "sinks", "lookahead",
                                       "page_size", NULL};
  evd_api_t *api = c->api;
  evd_session_config_t cfg, have;
  const char *message;
  evd_session_t *s;
  evd_apierr_t perr;
  json_t *root;
  int err;

  perr = evd__parse_body(api, c->req, 1, fields, &root, &message);
  if (perr != EVD_AE_OK)
    return evd__fail(c, perr, message);
  perr = evd__session_config(api, root, &cfg, &message);
  json_decref(root);
  if (perr != EVD_AE_OK)
    return evd__fail(c, perr, message);
  s = evd_table_find(api->table, c->id, c->idlen);
  if (s != NULL) {
    evd_session_config(s, &have);
    if (memcmp(&have, &cfg, sizeof cfg) != 0)
      return evd__fail(c, EVD_AE_SESSION_EXISTS, NULL);
    evd_table_touch(api->table, s, api->now_tick);
    evd__write_view(api, c->out, s);
    return 200;
  }
  if (evd__room(api, c->out, 512 + c->idlen, 96 + c->idlen) != 0)
    return evd__fail(c, EVD_AE_OUT_OF_MEMORY, NULL);
  err = evd_table_add(api->table, c->id, c->idlen, &cfg, api->now_tick, &s);
  if (err == EVD_ELIMIT)
    return evd__fail(c, EVD_AE_SESSION_LIMIT, NULL);
  if (err != 0)
    return evd__fail(c, EVD_AE_OUT_OF_MEMORY, NULL);
  api->metrics.created++;
  evd__journal_create(api, s);
  evd_log(EVD_LOG_DEBUG, "created session %.*s", (int)c->idlen, c->id);
  evd__write_view(api, c->out, s);
  return 201;
}

static int h_get(evd__ctx_t *c) {
  evd_session_t *s = evd_table_find(c->api->table, c->id, c->idlen);

  if (s == NULL)
    return evd__fail(c, EVD_AE_UNKNOWN_SESSION, NULL);
  evd_table_touch(c->api->table, s, c->api->now_tick);
  evd__write_view(c->api, c->out, s);
  return 200;
}

static int h_delete(evd__ctx_t *c) {
  evd_session_t *s = evd_table_find(c->api->table, c->id, c->idlen);

  if (s == NULL)
    return evd__fail(c, EVD_AE_UNKNOWN_SESSION, NULL);
  if (evd__room(c->api, c->out, 0, 64 + (size_t)s->idlen) != 0)
    return evd__fail(c, EVD_AE_OUT_OF_MEMORY, NULL);
  evd__journal(c->api, &(evd_op_t){.type = EVD_OP_DELETE, .id = s->id,
                                    .idlen = s->idlen});
  evd_table_remove(c->api->table, s);
  c->api->metrics.deleted++;
  evd_log(EVD_LOG_DEBUG, "deleted session %.*s", (int)c->idlen, c->id);
  return 204;
}

static int h_evict(evd__ctx_t *c) {
  static const char *const fields[] = {"budget", "expect_newest", NULL};
  evd_api_t *api = c->api;
  const char *message;
  evd_session_t *s;
  evd_window_t *w;
  json_t *root, *v;
  json_int_t x = 0;
  evd_apierr_t perr;
  uint32_t n, expect;
  uint8_t has_expect;
  int err, has_budget;

  perr = evd__parse_body(api, c->req, 1, fields, &root, &message);
  if (perr != EVD_AE_OK)
    return evd__fail(c, perr, message);
  v = json_object_get(root, "budget");
  has_budget = v != NULL;
  if (has_budget && !evd__is_int(api, v)) {
    json_decref(root);
    return evd__fail(c, EVD_AE_INVALID_FIELD, "\"budget\" must be an integer.");
  }
  if (has_budget && !evd__int_in(api, v, 1, EVD_WINDOW_MAX_BUDGET, &x)) {
    json_decref(root);
    return evd__fail(c, EVD_AE_INVALID_BUDGET,
                "An eviction budget must be an integer from 1 to "
                "4294967294, above the session's sinks.");
  }
  perr = evd__expect_field(api, root, &has_expect, &expect, &message);
  json_decref(root);
  if (perr != EVD_AE_OK)
    return evd__fail(c, perr, message);
  s = evd_table_find(api->table, c->id, c->idlen);
  if (s == NULL)
    return evd__fail(c, EVD_AE_UNKNOWN_SESSION, NULL);
  w = evd_session_window(s);
  if (has_expect && expect != w->newest)
    return evd__write_diverged(api, c->out, s, expect, 0);
  if (evd_window_tentative(w) != 0)
    return evd__fail(c, EVD_AE_TENTATIVE_PENDING,
                "Tentative positions are pending: commit them before an "
                "eviction.");
  if (!has_budget)
    x = w->budget;
  if ((uint32_t)x <= w->sinks) {
    snprintf(api->msg, sizeof api->msg,
             "An eviction budget must be greater than the session's %u "
             "sinks.", w->sinks);
    return evd__fail(c, EVD_AE_INVALID_BUDGET, api->msg);
  }
  if (evd__reserve(api, evd_window_size(w), 0, 0,
                   evd_session_page_size(s)) != 0 ||
      evd__room(api, c->out, 160 + 33 * (size_t)evd_window_size(w),
           64 + (size_t)s->idlen) != 0)
    return evd__fail(c, EVD_AE_OUT_OF_MEMORY, NULL);
  err = evd_window_evict(w, (uint32_t)x, api->victims, evd_window_size(w), &n);
  assert(err == 0);
  evd_table_touch(api->table, s, api->now_tick);
  api->metrics.victims += n;
  if (n > 0) /* an eviction that took nothing changed nothing */
    evd__journal(api, &(evd_op_t){.type = EVD_OP_EVICT, .id = s->id,
                                  .idlen = s->idlen, .budget = (uint32_t)x});
  evd_buf_reserve(c->out, 64 + 22 * (size_t)n);
  evd_buf_str(c->out, "{\"victims\":");
  evd_buf_u32_array(c->out, api->victims, n);
  evd_buf_str(c->out, ",\"size\":");
  evd_buf_u32(c->out, evd_window_size(w));
  if (evd_session_page_size(s) != 0) {
    evd_pages_change_t ch = {.victims = api->victims, .nvictims = n};
    uint32_t third = (uint32_t)(api->pages_cap / 3);
    evd_pages_out_t o = {.fresh = api->pages, .freed = api->pages + third,
                         .transient = api->pages + 2 * third};
    evd_pages_diff(w, evd_session_page_size(s), &ch, &o);
    evd_buf_str(c->out, ",\"pages_new\":");
    evd_buf_u32_array(c->out, o.fresh, o.nfresh);
    evd_buf_str(c->out, ",\"pages_freed\":");
    evd_buf_u32_array(c->out, o.freed, o.nfreed);
    /* Always empty: an eviction adds nothing. Written so that the three
     * lists are in every paged answer. */
    evd_buf_str(c->out, ",\"pages_transient\":");
    evd_buf_u32_array(c->out, o.transient, o.ntransient);
  }
  evd_buf_chr(c->out, '}');
  return 200;
}

static int h_fork(evd__ctx_t *c) {
  static const char *const fields[] = {"into", "expect_newest", NULL};
  evd_api_t *api = c->api;
  evd_session_t *parent, *child;
  const char *message, *into;
  size_t len;
  evd_apierr_t perr;
  json_t *root, *v;
  uint32_t expect;
  uint8_t has_expect;
  int err;

  perr = evd__parse_body(api, c->req, 0, fields, &root, &message);
  if (perr == EVD_AE_OK)
    perr = evd__expect_field(api, root, &has_expect, &expect, &message);
  if (perr != EVD_AE_OK) {
    json_decref(root);
    return evd__fail(c, perr, message);
  }
  v = json_object_get(root, "into");
  if (!json_is_string(v)) {
    json_decref(root);
    return evd__fail(c, EVD_AE_INVALID_FIELD,
                "\"into\" must be the id of the new session.");
  }
  into = json_string_value(v);
  len = json_string_length(v);
  if (!evd_session_id_valid(into, len)) {
    json_decref(root);
    return evd__fail(c, EVD_AE_INVALID_SESSION_ID, NULL);
  }
  if (len == c->idlen && memcmp(into, c->id, len) == 0) {
    /* It would answer 200 as a resent fork does, and copy nothing. */
    json_decref(root);
    return evd__fail(c, EVD_AE_INVALID_FIELD,
                "\"into\" is the session being forked; a fork needs a new "
                "id.");
  }
  parent = evd_table_find(api->table, c->id, c->idlen);
  if (parent == NULL) {
    json_decref(root);
    return evd__fail(c, EVD_AE_UNKNOWN_SESSION, NULL);
  }
  child = evd_table_find(api->table, into, len);
  if (child != NULL && evd_session_same_state(child, parent)) {
    /* A resent fork finds its child as it left it. */
    json_decref(root);
    evd_table_touch(api->table, parent, api->now_tick);
    evd_table_touch(api->table, child, api->now_tick);
    evd__write_view(api, c->out, child);
    return 200;
  }
  /* Not a resend: the parent must be where the engine believes it. */
  if (has_expect && expect != evd_window_newest(evd_session_window(parent))) {
    json_decref(root);
    return evd__write_diverged(api, c->out, parent, expect, 0);
  }
  if (child != NULL) {
    json_decref(root);
    return evd__fail(c, EVD_AE_SESSION_EXISTS,
                     "A session with the new id exists with another state.");
  }
  /* Room for the child's view (and its pages) and the record first. */
  if (evd__room(api, c->out, evd__view_bound(parent) + EVD_SESSION_ID_MAX,
           64 + 2 * (size_t)EVD_SESSION_ID_MAX) != 0 ||
      evd__grow(&api->pages, &api->pages_cap,
                evd_window_size(evd_session_window(parent))) != 0) {
    json_decref(root);
    return evd__fail(c, EVD_AE_OUT_OF_MEMORY, NULL);
  }
  err = evd_table_fork(api->table, parent, into, len, api->now_tick, &child);
  json_decref(root);
  if (err == EVD_ELIMIT)
    return evd__fail(c, EVD_AE_SESSION_LIMIT, NULL);
  if (err != 0)
    return evd__fail(c, EVD_AE_OUT_OF_MEMORY, NULL);
  evd_table_touch(api->table, parent, api->now_tick);
  api->metrics.forks++;
  api->metrics.created++;
  evd__journal(api, &(evd_op_t){.type = EVD_OP_FORK, .id = parent->id,
                                .idlen = parent->idlen, .child = child->id,
                                .childlen = child->idlen});
  evd_log(EVD_LOG_DEBUG, "forked session %.*s into %.*s", (int)c->idlen,
          c->id, (int)child->idlen, child->id);
  evd__write_view(api, c->out, child);
  return 201;
}

/* ---- routing ------------------------------------------------------------ */

typedef int (*handler_t)(evd__ctx_t *c);

/* One row per route: which methods it takes and the handler of each. */
static const struct {
  int methods;
  const char *allow;
  handler_t get, put, post, del;
} routes[EVD_R_COUNT] = {
    [EVD_R_HEALTHZ] = {EVD_M_GET | EVD_M_HEAD, "GET, HEAD", h_healthz, NULL,
                       NULL, NULL},
    [EVD_R_METRICS] = {EVD_M_GET | EVD_M_HEAD, "GET, HEAD", h_metrics, NULL,
                       NULL, NULL},
    [EVD_R_BATCH] = {EVD_M_POST, "POST", NULL, NULL, evd__h_batch, NULL},
    [EVD_R_SESSION] = {EVD_M_GET | EVD_M_HEAD | EVD_M_PUT | EVD_M_DELETE,
                       "GET, HEAD, PUT, DELETE", h_get, h_put, NULL, h_delete},
    [EVD_R_STEP] = {EVD_M_POST, "POST", NULL, NULL, evd__h_step, NULL},
    [EVD_R_EVICT] = {EVD_M_POST, "POST", NULL, NULL, h_evict, NULL},
    [EVD_R_COMMIT] = {EVD_M_POST, "POST", NULL, NULL, evd__h_commit, NULL},
    [EVD_R_TRUNCATE] = {EVD_M_POST, "POST", NULL, NULL, evd__h_truncate, NULL},
    [EVD_R_FORK] = {EVD_M_POST, "POST", NULL, NULL, h_fork, NULL},
    [EVD_R_ADOPT] = {EVD_M_POST, "POST", NULL, NULL, evd__h_adopt, NULL},
};

/* Compares the bearer credentials in an Authorization header with the
 * token in time that depends only on the token's length, so that timing
 * tells an attacker nothing about how much of a guess was right. */
static int authorized(const char *header, const char *token) {
  size_t glen, tlen = strlen(token), i;
  unsigned char diff;

  if (header == NULL || strncasecmp(header, "Bearer ", 7) != 0)
    return 0;
  header += 7;
  while (*header == ' ')
    header++;
  glen = strlen(header);
  while (glen > 0 && header[glen - 1] == ' ')
    glen--;
  diff = glen != tlen;
  for (i = 0; i < tlen; i++)
    diff |= (unsigned char)(token[i] ^ (i < glen ? header[i] : 0));
  return diff == 0;
}

static int path_is(const char *p, size_t n, const char *lit) {
  size_t len = strlen(lit);
  return n == len && memcmp(p, lit, len) == 0;
}

/* Matches the path to a route, and finds the session id in it. */
static evd_route_t route_of(const char *p, size_t n, const char **id,
                            size_t *idlen) {
  static const char prefix[] = "/session/";
  const size_t plen = sizeof prefix - 1;
  const char *slash;

  if (path_is(p, n, "/healthz"))
    return EVD_R_HEALTHZ;
  if (path_is(p, n, "/step"))
    return EVD_R_BATCH;
  if (path_is(p, n, "/metrics"))
    return EVD_R_METRICS;
  if (n < plen || memcmp(p, prefix, plen) != 0)
    return EVD_R_NONE;
  *id = p + plen;
  slash = memchr(*id, '/', n - plen);
  *idlen = slash != NULL ? (size_t)(slash - *id) : n - plen;
  if (*idlen == 0) /* /session/ and /session//...: no route names no id */
    return EVD_R_NONE;
  if (slash == NULL)
    return EVD_R_SESSION;
  if (path_is(slash, (size_t)(p + n - slash), "/step"))
    return EVD_R_STEP;
  if (path_is(slash, (size_t)(p + n - slash), "/evict"))
    return EVD_R_EVICT;
  if (path_is(slash, (size_t)(p + n - slash), "/commit"))
    return EVD_R_COMMIT;
  if (path_is(slash, (size_t)(p + n - slash), "/truncate"))
    return EVD_R_TRUNCATE;
  if (path_is(slash, (size_t)(p + n - slash), "/fork"))
    return EVD_R_FORK;
  if (path_is(slash, (size_t)(p + n - slash), "/adopt"))
    return EVD_R_ADOPT;
  return EVD_R_NONE;
}

void evd_api_handle(evd_api_t *api, const evd_request_t *req, evd_buf_t *out,
                    evd_reply_t *reply) {
  evd__ctx_t c = {.api = api, .req = req, .out = out, .reply = reply};
  handler_t h = NULL;
  evd_route_t r;

  evd_buf_reset(out, 1u << 16);
  reply->allow = NULL;
  reply->content_type = NULL;
  reply->www_authenticate = NULL;
  reply->wait_lsn = 0;
  r = route_of(req->path, req->path_len, &c.id, &c.idlen);
  reply->route = r;
  /* Everything but the health check needs the token, when there is one;
   * unknown paths too, so that they reveal nothing. */
  if (api->cfg.token != NULL && r != EVD_R_HEALTHZ &&
      !authorized(req->authorization, api->cfg.token)) {
    reply->www_authenticate = "Bearer realm=\"evictd\"";
    reply->status = evd__fail(&c, EVD_AE_UNAUTHORIZED, NULL);
    goto done;
  }
  if (r == EVD_R_NONE || routes[r].methods == 0) {
    reply->status = evd__fail(&c, EVD_AE_NOT_FOUND, NULL);
    goto done;
  }
  if (!(routes[r].methods & req->method)) {
    reply->allow = routes[r].allow;
    reply->status = evd__fail(&c, EVD_AE_METHOD_NOT_ALLOWED, NULL);
    goto done;
  }
  if (c.id != NULL && !evd_session_id_valid(c.id, c.idlen)) {
    reply->status = evd__fail(&c, EVD_AE_INVALID_SESSION_ID, NULL);
    goto done;
  }
  /* After a journal failure, changes could no longer be made durable. */
  if (api->journal != NULL && evd_journal_failed(api->journal) &&
      (req->method & (EVD_M_PUT | EVD_M_POST | EVD_M_DELETE))) {
    reply->status = evd__fail(&c, EVD_AE_JOURNAL_FAILED, NULL);
    goto done;
  }
  switch (req->method) {
  case EVD_M_GET:
  case EVD_M_HEAD: h = routes[r].get; break;
  case EVD_M_PUT: h = routes[r].put; break;
  case EVD_M_POST: h = routes[r].post; break;
  case EVD_M_DELETE: h = routes[r].del; break;
  }
  assert(h != NULL);
  reply->status = h(&c);
  /* One record per request, whatever it changed. The answer waits until
   * that record is written (on disk, with --fsync always), as Redis writes
   * its AOF before it answers; an answer that changed nothing waits for
   * the last record too, since it may show a change (a replayed step, a
   * view, a stale position's newest) that is not written yet. Health and
   * metrics show no session and never wait, nor does a read while writes
   * fail: reads must answer at once then. */
  if (api->journal != NULL) {
    uint64_t lsn = evd_journal_commit(api->journal);
    int reads = r == EVD_R_HEALTHZ || r == EVD_R_METRICS ||
                (evd_journal_failed(api->journal) &&
                 (req->method & (EVD_M_GET | EVD_M_HEAD)));
    if (lsn != 0)
      reply->wait_lsn = lsn;
    else if (!reads)
      reply->wait_lsn = evd_journal_last(api->journal);
  }
done:
  if (out->oom) {
    /* The answer did not fit in memory; say so in a body that does. */
    evd_buf_reset(out, 0);
    reply->content_type = NULL;
    reply->status = evd__fail(&c, EVD_AE_OUT_OF_MEMORY, NULL);
  }
}

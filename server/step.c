/* The step operation: validating a step request, applying it to its
 * session (creating the session when allowed), answering a retry of the
 * last request again, journaling it, and replaying journaled ops. */
#include <assert.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "api_int.h"
#include "evictd/log.h"

/* Room for n positions, their slots and n victims. */
static int reserve_positions(evd_api_t *api, size_t n) {
  return evd__grow(&api->pos, &api->pos_cap, n) == 0 &&
                 evd__grow(&api->slots, &api->slots_cap, n) == 0 &&
                 evd__grow(&api->victims, &api->victims_cap, n) == 0
             ? 0
             : EVD_ENOMEM;
}

static void write_step_result(evd_buf_t *out, const uint32_t *victims,
                              uint32_t nv, const uint32_t *slots, uint32_t n,
                              uint32_t size, uint32_t newest, int replayed) {
  evd_buf_reserve(out, 80 + 11 * ((size_t)nv + n));
  evd_buf_add(out, "{\"victims\":", 11);
  evd_buf_u32_array(out, victims, nv);
  evd_buf_add(out, ",\"slots\":", 9);
  evd_buf_u32_array(out, slots, n);
  evd_buf_add(out, ",\"size\":", 8);
  evd_buf_u32(out, size);
  evd_buf_add(out, ",\"newest\":", 10);
  evd_buf_u32(out, newest);
  if (replayed)
    evd_buf_add(out, ",\"replayed\":true", 16);
  evd_buf_chr(out, '}');
}

/* Validates a step object into *r and api->pos. Returns EVD_AE_OK, or the
 * error to answer with *message (NULL for the default one). In a batch
 * item the id comes from its "session" field, else from the path (already
 * in r). */
evd_apierr_t evd__step_parse(evd_api_t *api, json_t *obj, int in_batch,
                             evd__step_t *r, const char **message) {
  static const char *const single[] = {"pos",    "positions", "attention",
                                       "budget", "sinks",     NULL};
  static const char *const item[] = {"session", "pos",    "positions",
                                     "attention", "budget", "sinks", NULL};
  json_t *pos, *list, *v;
  json_int_t x, prev = -1;
  size_t i, n;

  *message = NULL;
  if (!json_is_object(obj)) {
    *message = "Each item of \"steps\" must be an object.";
    return EVD_AE_INVALID_FIELD;
  }
  if (!evd__only_fields(api, obj, in_batch ? item : single)) {
    *message = api->msg;
    return EVD_AE_INVALID_FIELD;
  }
  if (in_batch) {
    v = json_object_get(obj, "session");
    if (!json_is_string(v)) {
      *message = "Each item of \"steps\" needs a \"session\" string.";
      return EVD_AE_INVALID_FIELD;
    }
    r->id = json_string_value(v);
    r->idlen = json_string_length(v);
    if (!evd_session_id_valid(r->id, r->idlen))
      return EVD_AE_INVALID_SESSION_ID;
  }
  pos = json_object_get(obj, "pos");
  list = json_object_get(obj, "positions");
  if ((pos == NULL) == (list == NULL)) {
    *message = "Give exactly one of \"pos\" and \"positions\".";
    return EVD_AE_INVALID_FIELD;
  }
  if (list != NULL && !json_is_array(list)) {
    *message = "\"positions\" must be an array of integers.";
    return EVD_AE_INVALID_FIELD;
  }
  n = list != NULL ? json_array_size(list) : 1;
  if (n == 0) {
    *message = "\"positions\" must hold at least one position.";
    return EVD_AE_INVALID_POSITION;
  }
  if (n > api->cfg.max_positions) {
    snprintf(api->msg, sizeof api->msg,
             "A step request takes at most %u positions (--max-positions).",
             api->cfg.max_positions);
    *message = api->msg;
    return EVD_AE_TOO_MANY_POSITIONS;
  }
  if (reserve_positions(api, n) != 0)
    return EVD_AE_OUT_OF_MEMORY;
  for (i = 0; i < n; i++) {
    v = list != NULL ? json_array_get(list, i) : pos;
    if (!evd__int_in(api, v, 0, UINT32_MAX, &x))
      return EVD_AE_INVALID_POSITION;
    if (x <= prev) {
      *message = "Positions within a request must strictly increase.";
      return EVD_AE_INVALID_POSITION;
    }
    api->pos[i] = (uint32_t)x;
    prev = x;
  }
  r->first = 0;
  r->n = (uint32_t)n;
  return evd__session_config(api, obj, &r->has_budget, &r->budget,
                             &r->has_sinks, &r->sinks, message);
}

/* Steps `s` through positions[0..n) (validated: increasing, above its
 * newest), leaving slots and victims in the scratch arrays, and records
 * the outcome for a retry. Returns the number of victims. */
static uint32_t advance(evd_api_t *api, evd_session_t *s,
                        const uint32_t *positions, uint32_t n) {
  evd_window_t *w = evd_session_window(s);
  uint32_t i, nv = 0;
  int r;

  for (i = 0; i < n; i++) {
    r = evd_window_advance(w, positions[i], &api->slots[i], &api->victims[nv]);
    assert(r >= 0); /* never stale (validated) nor full (evicted each time) */
    nv += (uint32_t)r;
  }
  api->metrics.steps += n;
  api->metrics.victims += nv;
  /* Without memory for the record a retry is refused as stale, which is
   * safe: it never hands out a wrong answer. */
  (void)evd_session_replay_set(s, positions, n, api->victims, nv, api->slots,
                               evd_window_size(w));
  return nv;
}

void evd__journal(evd_api_t *api, evd_op_type_t type, const evd_session_t *s,
                  uint32_t budget, const uint32_t *positions, uint32_t n) {
  evd_op_t op = {.type = type, .id = s->id, .idlen = s->idlen,
                 .budget = budget, .positions = positions, .n = n};

  if (api->journal == NULL)
    return;
  if (type == EVD_OP_CREATE)
    op.sinks = evd_session_window(s)->sinks;
  evd_journal_add(api->journal, &op);
}

int evd__step_run(evd_api_t *api, const evd__step_t *r, int in_batch,
                  evd_buf_t *out) {
  evd_session_t *s = evd_table_find(api->table, r->id, r->idlen);
  const uint32_t *pos = api->pos + r->first;
  evd_window_t *w;
  evd_replay_t rp;
  uint32_t nv, zero = 0;
  int err;

  if (s == NULL) {
    if (!api->cfg.autocreate)
      return evd__write_error(out, EVD_AE_UNKNOWN_SESSION, NULL, in_batch,
                              NULL);
    /* A new session holds position 0; refuse before creating anything. */
    if (pos[0] == 0)
      return evd__write_error(out, EVD_AE_STALE_POSITION, NULL, in_batch,
                              &zero);
    err = evd_table_add(api->table, r->id, r->idlen,
                        r->has_budget ? r->budget : api->cfg.budget,
                        r->has_sinks ? r->sinks : api->cfg.sinks,
                        api->now_tick, &s);
    if (err == EVD_ELIMIT)
      return evd__write_error(out, EVD_AE_SESSION_LIMIT, NULL, in_batch,
                              NULL);
    if (err != 0)
      return evd__write_error(out, EVD_AE_OUT_OF_MEMORY, NULL, in_batch,
                              NULL);
    api->metrics.created++;
    evd__journal(api, EVD_OP_CREATE, s, evd_session_window(s)->budget, NULL,
                 0);
    evd_log(EVD_LOG_DEBUG, "created session %.*s", (int)r->idlen, r->id);
  }
  w = evd_session_window(s);
  if (pos[0] <= evd_window_newest(w)) {
    /* A retry of the last applied request gets its answer again. */
    if (evd_session_replay_get(s, &rp) && rp.npos == r->n &&
        memcmp(rp.positions, pos, r->n * sizeof(uint32_t)) == 0) {
      evd_table_touch(api->table, s, api->now_tick);
      api->metrics.replays++;
      write_step_result(out, rp.victims, rp.nvictims, rp.slots, rp.npos,
                        rp.size, rp.newest, 1);
      return 200;
    }
    return evd__write_error(out, EVD_AE_STALE_POSITION, NULL, in_batch,
                            &w->newest);
  }
  nv = advance(api, s, pos, r->n);
  evd_table_touch(api->table, s, api->now_tick);
  evd__journal(api, EVD_OP_STEP, s, 0, pos, r->n);
  write_step_result(out, api->victims, nv, api->slots, r->n,
                    evd_window_size(w), evd_window_newest(w), 0);
  return 200;
}

/* ---- journal replay ----------------------------------------------------- */

int evd_api_apply(void *ctx, const evd_op_t *op) {
  evd_api_t *api = ctx;
  evd_session_t *s = evd_table_find(api->table, op->id, op->idlen);
  evd_window_t *w;
  uint32_t i, n;

  if (op->type == EVD_OP_CREATE) {
    if (s != NULL)
      return EVD_ECORRUPT;
    switch (evd_table_add(api->table, op->id, op->idlen, op->budget,
                          op->sinks, api->now_tick, &s)) {
    case 0: return 0;
    case EVD_ENOMEM: return EVD_ENOMEM;
    default: return EVD_ECORRUPT;
    }
  }
  if (s == NULL)
    return EVD_ECORRUPT;
  w = evd_session_window(s);
  switch (op->type) {
  case EVD_OP_STEP:
    for (i = 0; i < op->n; i++)
      if (op->positions[i] <= (i ? op->positions[i - 1] : w->newest))
        return EVD_ECORRUPT;
    if (reserve_positions(api, op->n) != 0)
      return EVD_ENOMEM;
    advance(api, s, op->positions, op->n);
    return 0;
  case EVD_OP_EVICT:
    if (op->budget <= w->sinks ||
        evd__grow(&api->victims, &api->victims_cap, evd_window_size(w)) != 0)
      return op->budget <= w->sinks ? EVD_ECORRUPT : EVD_ENOMEM;
    return evd_window_evict(w, op->budget, api->victims, evd_window_size(w),
                            &n) == 0 ? 0 : EVD_ECORRUPT;
  case EVD_OP_DELETE:
  case EVD_OP_REAP:
    evd_table_remove(api->table, s);
    return 0;
  default:
    return EVD_ECORRUPT;
  }
}

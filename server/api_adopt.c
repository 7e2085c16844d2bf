/* POST /session/{id}/adopt: a session created in the state its engine
 * holds (configuration, positions held and their slots, newest), so that
 * an engine can re-home a session on an instance that lost it or holds an
 * old copy. The state is checked by the window (window_state.c), which
 * accepts exactly the states the policy can be in; journal recovery
 * applies a journaled adoption through the same evd__adopt_apply. */
#include <inttypes.h>
#include <stdio.h>
#include <string.h>

#include "api_int.h"
#include "log.h"

int evd__adopt_apply(evd_api_t *api, evd_session_t *s, const char *id,
                     size_t idlen, const evd_session_config_t *cfg,
                     const evd_window_state_t *st, evd_session_t **out) {
  evd_window_rule_t rule;
  uint32_t at;
  int err;

  if (evd_window_check(cfg->budget, cfg->sinks, cfg->lookahead, st, &rule,
                       &at) != 0)
    return EVD_EINVAL;
  err = s != NULL ? evd_table_replace(api->table, s, cfg, api->now_tick, out)
                  : evd_table_add_prepared(api->table, id, idlen, cfg,
                                           api->now_tick, out);
  if (err != 0)
    return err;
  err = evd_window_build(evd_session_window(*out), st, &rule, &at);
  (void)err; /* checked above: it cannot refuse */
  return 0;
}

/* The sentence of a refused state, with its figures, in api->msg. */
static const char *rule_message(evd_api_t *api, const evd_session_config_t *c,
                                const evd_window_state_t *st,
                                evd_window_rule_t rule, uint32_t at) {
  const uint32_t *k = st->kept, *s = st->slots;
  uint32_t last = c->budget + c->lookahead - 1, np;
  char *m = api->msg;
  size_t n = sizeof api->msg;

  np = st->n < c->sinks ? st->n : c->sinks;
  switch (rule) {
  case EVD_WR_OK:
  case EVD_WR_EMPTY:
    return "\"kept\" must hold at least one position.";
  case EVD_WR_REPEATED:
    snprintf(m, n, "kept[%u] repeats position %u: the positions held must "
             "strictly increase.", at, k[at]);
    break;
  case EVD_WR_ORDER:
    snprintf(m, n, "kept[%u] (%u) is below kept[%u] (%u): the positions "
             "held must strictly increase.", at, k[at], at - 1, k[at - 1]);
    break;
  case EVD_WR_BUDGET:
    snprintf(m, n, "%u positions held, more than the budget of %u: a "
             "session without drafts holds at most budget positions.",
             st->n, c->budget);
    break;
  case EVD_WR_SINK:
    snprintf(m, n, "Position 0 is not held, but the session pins %u "
             "sink%s: position 0 is held and pinned from the start, and no "
             "request removes it.", c->sinks, c->sinks == 1 ? "" : "s");
    break;
  case EVD_WR_NEWEST:
    snprintf(m, n, "\"newest\" (%u) is below kept[%u] (%u): the newest is "
             "at least every position held.", st->newest, at, k[at]);
    break;
  case EVD_WR_NEWEST_MAX:
    snprintf(m, n, "\"newest\" is 4294967295 but not held: a newest above "
             "every position held is what truncating from newest + 1 "
             "leaves, and 4294967296 is not a position.");
    break;
  case EVD_WR_SLOT_RANGE:
    snprintf(m, n, "slots[%u] (%u) is not a slot of this session: slots "
             "run from 0 to %u (budget + lookahead - 1).", at, s[at], last);
    break;
  case EVD_WR_PIN_SLOT:
    snprintf(m, n, "slots[%u] must be %u: kept[%u] is pinned (one of the "
             "first %u positions held), and pinned positions take slots 0, "
             "1, ... in order.", at, at, at, c->sinks);
    break;
  case EVD_WR_RING:
    if (at == np)
      snprintf(m, n, "slots[%u] (%u) is a pinned slot, but kept[%u] is not "
               "pinned: unpinned positions take the ring's slots, %u to "
               "%u.", at, s[at], at, c->sinks, last);
    else
      snprintf(m, n, "slots[%u] must be %u: unpinned positions take "
               "consecutive ring slots (%u to %u, wrapping round).", at,
               s[at - 1] >= last ? c->sinks : s[at - 1] + 1, c->sinks, last);
    break;
  case EVD_WR_TURN:
    snprintf(m, n, "slots[%u] (%u) is further round the ring than any "
             "window gets: the ring turns a slot per position evicted, and "
             "at most %" PRIu64 " can have been evicted below kept[%u] (%u) "
             "and above the pins. Leave \"slots\" out for the canonical "
             "layout.",
             at, s[at],
             np > 0 ? (uint64_t)k[at] - k[np - 1] - 1 : (uint64_t)k[at], at,
             k[at]);
    break;
  }
  return m;
}

/* A body's list of uint32 (kept, slots, pages) into *dst (grown as
 * needed). An entry out of [0, UINT32_MAX] is `range`, with a message
 * naming it; a list that is not an array of integers is invalid_field. */
static evd_apierr_t u32_list(evd_api_t *api, json_t *list, const char *name,
                             evd_apierr_t range, uint32_t **dst,
                             size_t *cap, const char **message) {
  size_t i, n;
  json_t *v;

  if (!json_is_array(list)) {
    snprintf(api->msg, sizeof api->msg, "\"%s\" must be an array of "
             "integers.", name);
    *message = api->msg;
    return EVD_AE_INVALID_FIELD;
  }
  n = json_array_size(list);
  if (evd__grow(dst, cap, n) != 0)
    return EVD_AE_OUT_OF_MEMORY;
  json_array_foreach(list, i, v) {
    if (!evd__is_int(api, v)) {
      snprintf(api->msg, sizeof api->msg, "%s[%zu] must be an integer.",
               name, i);
      *message = api->msg;
      return EVD_AE_INVALID_FIELD;
    }
    if (!evd__u32_field(api, v, 0, UINT32_MAX, &(*dst)[i])) {
      snprintf(api->msg, sizeof api->msg, "%s[%zu] is out of range: an "
               "integer from 0 to 4294967295.", name, i);
      *message = api->msg;
      return range;
    }
  }
  return EVD_AE_OK;
}

/* The adopt body: configuration, state and replace flag. */
typedef struct {
  evd_session_config_t cfg;
  evd_window_state_t st;
  int replace;
} adopt_t;

/* Reads and checks the body into *a (arrays in api->pos, api->slots).
 * Returns EVD_AE_OK, or the error with *message (NULL: the default). */
static evd_apierr_t parse(evd_api_t *api, json_t *root, adopt_t *a,
                          const char **message) {
  json_t *kept = json_object_get(root, "kept"), *v;
  json_t *slots = json_object_get(root, "slots");
  json_t *pages = json_object_get(root, "pages");
  evd_window_rule_t rule;
  evd_apierr_t e;
  uint32_t at, i, np = 0;

  *message = NULL;
  e = evd__session_config(api, root, &a->cfg, message);
  if (e != EVD_AE_OK)
    return e;
  v = json_object_get(root, "replace");
  if (v != NULL && !json_is_boolean(v)) {
    *message = "\"replace\" must be true or false.";
    return EVD_AE_INVALID_FIELD;
  }
  a->replace = json_is_true(v);
  if (kept == NULL) {
    *message = "\"kept\" is required: the positions the session holds.";
    return EVD_AE_INVALID_FIELD;
  }
  e = u32_list(api, kept, "kept", EVD_AE_INVALID_POSITION, &api->pos,
               &api->pos_cap, message);
  if (e != EVD_AE_OK)
    return e;
  v = json_object_get(root, "newest");
  if (v == NULL) {
    *message = "\"newest\" is required: the session's newest position.";
    return EVD_AE_INVALID_FIELD;
  }
  if (!evd__u32_field(api, v, 0, UINT32_MAX, &a->st.newest)) {
    *message = "\"newest\" must be a position: an integer from 0 to "
               "4294967295.";
    return EVD_AE_INVALID_POSITION;
  }
  a->st.kept = api->pos;
  a->st.n = (uint32_t)json_array_size(kept);
  a->st.slots = NULL;
  if (slots != NULL) {
    e = u32_list(api, slots, "slots", EVD_AE_INVALID_STATE, &api->slots,
                 &api->slots_cap, message);
    if (e != EVD_AE_OK)
      return e;
    if (json_array_size(slots) != a->st.n) {
      snprintf(api->msg, sizeof api->msg, "\"slots\" has %zu entries and "
               "\"kept\" %u: give the slot of each position held.",
               json_array_size(slots), a->st.n);
      *message = api->msg;
      return EVD_AE_INVALID_STATE;
    }
    a->st.slots = api->slots;
  }
  if (evd_window_check(a->cfg.budget, a->cfg.sinks, a->cfg.lookahead,
                       &a->st, &rule, &at) != 0) {
    *message = rule_message(api, &a->cfg, &a->st, rule, at);
    return EVD_AE_INVALID_STATE;
  }
  if (pages == NULL)
    return EVD_AE_OK;
  e = u32_list(api, pages, "pages", EVD_AE_INVALID_STATE, &api->pages,
               &api->pages_cap, message);
  if (e != EVD_AE_OK)
    return e;
  if (a->cfg.page_size == 0) {
    if (json_array_size(pages) == 0)
      return EVD_AE_OK;
    *message = "\"pages\" is given for a session without pages (page_size "
               "0).";
    return EVD_AE_INVALID_STATE;
  }
  /* The pages of the positions held, ascending and each once: compared
   * entry by entry as they come. */
  for (i = 0; i < a->st.n; i++) {
    uint32_t p = a->st.kept[i] / a->cfg.page_size;
    if (i > 0 && p == a->st.kept[i - 1] / a->cfg.page_size)
      continue;
    if (np >= json_array_size(pages) || api->pages[np] != p) {
      snprintf(api->msg, sizeof api->msg, "\"pages\" must be the pages of "
               "the positions held (position / page_size, ascending, each "
               "once): entry %u should be %u.", np, p);
      *message = api->msg;
      return EVD_AE_INVALID_STATE;
    }
    np++;
  }
  if (np != json_array_size(pages)) {
    snprintf(api->msg, sizeof api->msg, "\"pages\" must be the pages of the "
             "positions held (position / page_size, ascending, each once): "
             "%u of them, not %zu.", np, json_array_size(pages));
    *message = api->msg;
    return EVD_AE_INVALID_STATE;
  }
  return EVD_AE_OK;
}

/* Journals an adoption with the slots the window gave each position, so
 * that recovery builds exactly this window whatever layout it was asked
 * in. */
static void journal_adopt(evd_api_t *api, const evd_session_t *s,
                          const adopt_t *a, int replaced) {
  const evd_window_t *w = evd_session_window(s);
  uint32_t i;

  if (api->journal == NULL)
    return;
  for (i = 0; i < a->st.n; i++) /* api->slots has room: reserved */
    evd_window_at(w, i, &api->slots[i]);
  evd__journal(api, &(evd_op_t){.type = EVD_OP_ADOPT, .id = s->id,
                                .idlen = s->idlen, .cfg = a->cfg,
                                .flags = replaced ? EVD_OP_REPLACED : 0,
                                .arg = a->st.newest, .positions = a->st.kept,
                                .slots = api->slots, .n = a->st.n});
}

int evd__h_adopt(evd__ctx_t *c) {
  static const char *const fields[] = {"budget", "sinks",  "lookahead",
                                       "page_size", "kept", "newest",
                                       "slots",  "pages", "replace", NULL};
  evd_api_t *api = c->api;
  evd_session_config_t have;
  evd_session_t *s, *made;
  const char *message;
  evd_apierr_t e;
  json_t *root;
  adopt_t a;
  size_t view;
  int err;

  e = evd__parse_body(api, c->req, 0, fields, &root, &message);
  if (e == EVD_AE_OK)
    e = parse(api, root, &a, &message);
  json_decref(root);
  if (e != EVD_AE_OK) {
    api->metrics.adopt_refused++;
    return evd__fail(c, e, message);
  }
  s = evd_table_find(api->table, c->id, c->idlen);
  if (s != NULL) {
    evd_session_config(s, &have);
    if (memcmp(&have, &a.cfg, sizeof have) == 0 &&
        evd_window_is_state(evd_session_window(s), &a.st)) {
      /* A resent adoption finds the session as it left it. */
      evd_table_touch(api->table, s, api->now_tick);
      api->metrics.adopt_resent++;
      evd__write_view(api, c->out, s);
      return 200;
    }
    if (!a.replace) {
      api->metrics.adopt_refused++;
      return evd__fail(c, EVD_AE_SESSION_EXISTS,
                       "A session with this id exists in another state; "
                       "adopt with \"replace\": true to replace it.");
    }
  }
  /* Room for the view (its pages too), the journal record and its slots
   * before anything changes. */
  view = 320 + c->idlen + 44 * (size_t)a.st.n;
  if (evd__room(api, c->out, view, 96 + c->idlen + 8 * (size_t)a.st.n) != 0 ||
      evd__grow(&api->pages, &api->pages_cap, a.st.n) != 0 ||
      evd__grow(&api->slots, &api->slots_cap, a.st.n) != 0)
    return evd__fail(c, EVD_AE_OUT_OF_MEMORY, NULL);
  if (a.st.slots != NULL)
    a.st.slots = api->slots; /* (moved, if the slots grew) */
  err = evd__adopt_apply(api, s, c->id, c->idlen, &a.cfg, &a.st, &made);
  if (err == EVD_ELIMIT)
    return evd__fail(c, EVD_AE_SESSION_LIMIT, NULL);
  if (err != 0)
    return evd__fail(c, EVD_AE_OUT_OF_MEMORY, NULL);
  journal_adopt(api, made, &a, s != NULL);
  if (s != NULL) {
    api->metrics.adopt_replaced++;
  } else {
    api->metrics.adopt_created++;
    api->metrics.created++;
  }
  evd_log(EVD_LOG_DEBUG, "%s session %.*s by adoption (%u held, newest %u)",
          s != NULL ? "replaced" : "created", (int)c->idlen, c->id, a.st.n,
          a.st.newest);
  evd__write_view(api, c->out, made);
  return s != NULL ? 200 : 201;
}

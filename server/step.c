/* The operations that move a window: step (with drafts and a commit),
 * commit and truncate. Each is validated against its session, applied
 * (creating the session when a step may), recorded for a retry, journaled
 * and answered; a retry of the last applied request gets its answer again.
 * Journal recovery (apply.c) applies the same ops through the same code. */
#include <assert.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "api_int.h"
#include "log.h"
#include "pages.h"
#include "replay.h"

int evd__reserve(evd_api_t *api, size_t nvictims, size_t ngone,
                 size_t nadded, uint32_t page_size) {
  /* Pages: new, freed and transient, each at most one per touched position
   * plus page 0 of a new session. Arrays are sized by what the request can
   * use, so that a plain step never grows what only truncation needs. */
  size_t pages = page_size ? 3 * (nvictims + ngone + nadded + 1) : 0;

  if (nadded <= api->slots_cap && nvictims <= api->victims_cap &&
      ngone <= api->gone_cap && pages <= api->pages_cap)
    return 0; /* the usual case: one test */
  return evd__grow(&api->slots, &api->slots_cap, nadded) == 0 &&
                 evd__grow(&api->victims, &api->victims_cap, nvictims) == 0 &&
                 evd__grow(&api->gone, &api->gone_cap, ngone) == 0 &&
                 evd__grow(&api->pages, &api->pages_cap, pages) == 0
             ? 0
             : EVD_ENOMEM;
}

/* evd__reserve for request r on window w (NULL: a new session, which holds
 * one position and no drafts). */
static int reserve_for(evd_api_t *api, const evd_window_t *w,
                       const evd__step_t *r, uint32_t page_size) {
  int commit = r->op == EVD_RP_COMMIT || r->has_arg;
  size_t drafts = w != NULL && commit ? evd_window_tentative(w) : 0;

  if (r->op == EVD_RP_TRUNCATE)
    return evd__reserve(api, 0, w != NULL ? evd_window_size(w) : 1, 0,
                        page_size);
  /* Victims: the commit's (at most the drafts) and the steps' (at most
   * one per position); gone: the dropped drafts. */
  return evd__reserve(api, r->n + (commit ? drafts : 0), commit ? drafts : 0,
                      r->n, page_size);
}

/* 1 when the request names a configuration field whose value differs from
 * the existing session's, with the message (both configurations) in
 * api->msg: such a step is refused as a PUT with another configuration
 * is, instead of being applied under the session's own. */
static int config_conflict(evd_api_t *api, evd_session_t *s,
                           const evd__step_t *r) {
  evd_session_config_t have;

  evd_session_config(s, &have);
  if (!((r->given & EVD__GIVEN_BUDGET) && r->cfg.budget != have.budget) &&
      !((r->given & EVD__GIVEN_SINKS) && r->cfg.sinks != have.sinks) &&
      !((r->given & EVD__GIVEN_LOOKAHEAD) &&
        r->cfg.lookahead != have.lookahead) &&
      !((r->given & EVD__GIVEN_PAGE_SIZE) &&
        r->cfg.page_size != have.page_size))
    return 0;
  snprintf(api->msg, sizeof api->msg,
           "The session exists with budget %u, sinks %u, lookahead %u, "
           "page_size %u; the step names another value. Leave the "
           "configuration out of steps to an existing session, or use "
           "another id.",
           have.budget, have.sinks, have.lookahead, have.page_size);
  return 1;
}

/* ---- validation --------------------------------------------------------- */

/* Checks a request against the window it goes to (NULL: the session does
 * not exist yet and would start with the request's configuration). */
static evd_apierr_t check(evd_api_t *api, const evd_window_t *w,
                          const evd__step_t *r, const uint32_t *pos,
                          const char **message) {
  uint32_t newest = w != NULL ? w->newest : 0, drafts, lookahead;

  *message = NULL;
  if (r->op == EVD_RP_TRUNCATE)
    return EVD_AE_OK;
  if (r->op == EVD_RP_STEP && !r->has_arg && !r->tentative && r->n > 0) {
    /* The decode step and the chunk: no drafts to count. */
    if (w != NULL && evd_window_has_drafts(w)) {
      *message = "Tentative positions are pending: commit them "
                 "(\"commit\") before a step that is not tentative.";
      return EVD_AE_TENTATIVE_PENDING;
    }
    return pos[0] <= newest ? EVD_AE_STALE_POSITION : EVD_AE_OK;
  }
  drafts = w != NULL ? evd_window_tentative(w) : 0;
  lookahead = w != NULL ? evd_window_lookahead(w) : r->cfg.lookahead;
  if (r->op == EVD_RP_COMMIT || r->has_arg) {
    uint32_t committed = w != NULL ? evd_window_committed(w) : 0, i;
    if (r->arg < committed) {
      snprintf(api->msg, sizeof api->msg,
               "A commit must name at least the committed newest "
               "position, %u.", committed);
      *message = api->msg;
      return EVD_AE_INVALID_POSITION;
    }
    /* The newest after the commit: the last draft kept, else the
     * committed newest. Drafts are the newest positions held. */
    newest = committed;
    for (i = 0; i < drafts; i++) {
      uint32_t p = evd_window_at(w, evd_window_size(w) - 1 - i, NULL);
      if (p <= r->arg) {
        newest = p;
        break;
      }
    }
    drafts = 0;
  }
  if (r->op != EVD_RP_STEP || r->n == 0)
    return EVD_AE_OK;
  /* Here the request commits (no drafts left after it) or is tentative:
   * plain steps were told apart above. */
  if (pos[0] <= newest)
    return EVD_AE_STALE_POSITION;
  if (r->tentative && r->n > lookahead - drafts) {
    snprintf(api->msg, sizeof api->msg,
             "The session's lookahead lets %u tentative positions be "
             "pending; %u are, and the request adds %u.", lookahead, drafts,
             r->n);
    *message = api->msg;
    return EVD_AE_TOO_MANY_POSITIONS;
  }
  return EVD_AE_OK;
}

/* ---- the request as a record ------------------------------------------ */

/* The flags a replay record and its hash keep of r (a journaled step keeps
 * the file's own, EVD_OP_*, which record.h ties to these). */
static inline uint8_t rp_flags(const evd__step_t *r) {
  return (uint8_t)((r->tentative ? EVD_RP_TENTATIVE : 0u) |
                   (r->op == EVD_RP_STEP && r->has_arg ? EVD_RP_COMMIT_ARG
                                                       : 0u));
}

/* The arg they keep: 0 for a step without "commit". */
static inline uint32_t rp_arg(const evd__step_t *r) {
  return r->op == EVD_RP_STEP && !r->has_arg ? 0 : r->arg;
}

/* ---- applying ----------------------------------------------------------- */

/* Applies a checked request to `s`, leaving its answer in *rp (arrays in
 * the scratch space, reserved by evd__reserve) and recording it for a
 * retry. Returns 0, or the window's error when the request does not apply
 * (only journal replay can get one: the live path checked first). */
static int apply(evd_api_t *api, evd_session_t *s, const evd__step_t *r,
                 const uint32_t *pos, int created, evd_replay_t *rp) {
  evd_window_t *w = evd_session_window(s);
  uint32_t nv = 0, ng = 0, k = 0;
  int err = 0;

  if (r->op == EVD_RP_TRUNCATE) {
    err = evd_window_truncate(w, r->arg, api->gone, &ng);
    api->metrics.truncates++;
    api->metrics.removed += ng;
  } else {
    if (r->op == EVD_RP_COMMIT || r->has_arg) {
      err = evd_window_commit(w, r->arg, api->gone, &ng, api->victims, &nv);
      api->metrics.commits++;
      api->metrics.dropped += ng;
    }
    if (err == 0 && r->n > 0) {
      err = evd_window_steps(w, pos, r->n, r->tentative, api->slots,
                             api->victims + nv, &k);
      nv += k;
      api->metrics.steps += r->n;
    }
  }
  if (err != 0)
    return err;
  api->metrics.victims += nv;
  *rp = (evd_replay_t){
      .op = r->op,
      .flags = rp_flags(r), .arg = rp_arg(r),
      .positions = evd_u32s(pos, r->n), .slots = evd_u32s(api->slots, r->n),
      .victims = evd_u32s(api->victims, nv), .gone = evd_u32s(api->gone, ng),
      .size = evd_window_size(w), .newest = evd_window_newest(w),
      .sinks = evd_window_sinks(w), .last = evd_window_last_slot(w)};
  if (evd_session_page_size(s) != 0) {
    uint32_t ps = evd_session_page_size(s);
    evd_pages_change_t c = {.victims = api->victims, .nvictims = nv,
                            .gone = api->gone, .ngone = ng,
                            .added = pos, .nadded = r->n,
                            .created = created};
    uint32_t third = (uint32_t)(api->pages_cap / 3);
    evd_pages_out_t o = {.fresh = api->pages, .freed = api->pages + third,
                         .transient = api->pages + 2 * third};
    evd_pages_diff(w, ps, &c, &o);
    rp->pages_new = evd_u32s(o.fresh, o.nfresh);
    rp->pages_freed = evd_u32s(o.freed, o.nfreed);
    /* The record keeps only whether the edge victim pages are transient
     * (see EVD_RP_FIRST_TRANSIENT); write_transient derives the rest. */
    if (o.ntransient > 0) {
      rp->ends = (uint8_t)((o.transient[0] == api->victims[0] / ps
                                ? EVD_RP_FIRST_TRANSIENT : 0u) |
                           (o.transient[o.ntransient - 1] ==
                                    api->victims[nv - 1] / ps
                                ? EVD_RP_LAST_TRANSIENT : 0u));
    }
  }
  evd_replay_set(api->table, s, rp);
  return 0;
}

/* 1 when request r is the one the record rp remembers. */
static int same_request(const evd_replay_t *rp, const evd__step_t *r,
                        const uint32_t *pos) {
  uint32_t i;

  if (rp->op != r->op)
    return 0;
  if (r->op != EVD_RP_STEP)
    return rp->arg == r->arg;
  if (rp->flags != rp_flags(r) ||
      (r->has_arg && rp->arg != r->arg) || rp->positions.n != r->n)
    return 0;
  if (rp->positions.v != NULL)
    return r->n == 0 ||
           memcmp(rp->positions.v, pos, r->n * sizeof(uint32_t)) == 0;
  for (i = 0; i < r->n; i++)
    if (pos[i] != rp->positions.first + i)
      return 0;
  return 1;
}

/* The request r as a record without an answer: what its hash is taken
 * of. */
static uint64_t request_hash(const evd__step_t *r, const uint32_t *pos) {
  evd_replay_t q = {
      .op = r->op,
      .flags = rp_flags(r), .arg = rp_arg(r),
      .positions = evd_u32s(pos, r->n)};
  return evd_replay_hash(&q);
}

/* Writes a list of a record as a JSON array. */
static void write_list(evd_buf_t *out, const evd_replay_t *rp,
                       const evd_u32s_t *l) {
  uint32_t tmp[64], i, k;

  if (l->v != NULL || l->n == 0) {
    evd_buf_u32_array(out, l->v, l->n);
    return;
  }
  evd_buf_chr(out, '[');
  if (!l->ring) {
    evd_buf_u32_seq(out, NULL, l->first, l->n, 0);
  } else {
    for (i = 0; i < l->n; i += k) {
      for (k = 0; k < 64 && i + k < l->n; k++)
        tmp[k] = evd_replay_at(rp, l, i + k);
      evd_buf_u32_seq(out, tmp, 0, k, i > 0);
    }
  }
  evd_buf_chr(out, ']');
}

/* The i-th value of a list that is never a ring of slots (victims, pages):
 * an array, or a run from `first`. */
static inline uint32_t plain_at(const evd_u32s_t *l, uint32_t i) {
  return l->v != NULL ? l->v[i] : l->first + i;
}

/* 1 when page p is in the page list l, whose values from *i on are
 * ascending and at or above the pages asked before; advances *i past the
 * smaller ones. A run answers at once. */
static inline int has_page(const evd_u32s_t *l, uint32_t *i, uint32_t p) {
  if (l->v == NULL)
    return p - l->first < l->n;
  while (*i < l->n && l->v[*i] < p)
    (*i)++;
  return *i < l->n && l->v[*i] == p;
}

/* Writes ,"pages_transient":[...] for a record: the pages of its victims
 * that are neither new nor freed, those of the first and the last victim
 * only when the record's bits say so (EVD_RP_FIRST_TRANSIENT). O(victims +
 * pages): a run of victims is walked page by page. */
static void write_transient(evd_buf_t *out, const evd_replay_t *rp,
                            uint32_t page_size) {
  static const char key[] = ",\"pages_transient\":[]";
  const evd_u32s_t *v = &rp->victims;
  uint32_t i = 0, in = 0, ifr = 0, first, last, p;
  int more = 0;

  /* Without victims, or with no page between the edges and neither edge's
   * bit (every decode step), there are none. */
  if (v->n == 0)
    goto none;
  first = plain_at(v, 0) / page_size;
  last = plain_at(v, v->n - 1) / page_size;
  if (rp->ends == 0 && last - first <= 1)
    goto none;
  evd_buf_add(out, key, sizeof key - 2);
  for (p = first;;) {
    if ((p != first || (rp->ends & EVD_RP_FIRST_TRANSIENT)) &&
        (p != last || (rp->ends & EVD_RP_LAST_TRANSIENT)) &&
        !has_page(&rp->pages_new, &in, p) &&
        !has_page(&rp->pages_freed, &ifr, p)) {
      if (more)
        evd_buf_chr(out, ',');
      evd_buf_u32(out, p);
      more = 1;
    }
    if (p == last)
      break;
    if (v->v == NULL) { /* a run: every page up to the last has victims */
      p++;
    } else {
      while (v->v[i] / page_size == p)
        i++;
      p = v->v[i] / page_size;
    }
  }
  evd_buf_chr(out, ']');
  return;
none:
  evd_buf_add(out, key, sizeof key - 1);
}

static void write_answer(evd_buf_t *out, const evd_replay_t *rp,
                         uint32_t page_size, int replayed) {
  evd_buf_reserve(out, 160 + 11 * ((size_t)rp->victims.n + rp->slots.n +
                                   rp->gone.n + rp->pages_new.n +
                                   rp->pages_freed.n +
                                   (page_size != 0 ? rp->victims.n : 0)));
  if (rp->op == EVD_RP_TRUNCATE) {
    evd_buf_add(out, "{\"removed\":", 11);
    write_list(out, rp, &rp->gone);
  } else {
    evd_buf_add(out, "{\"victims\":", 11);
    write_list(out, rp, &rp->victims);
    if (rp->op == EVD_RP_COMMIT) {
      evd_buf_add(out, ",\"dropped\":", 11);
      write_list(out, rp, &rp->gone);
    } else {
      evd_buf_add(out, ",\"slots\":", 9);
      write_list(out, rp, &rp->slots);
    }
  }
  evd_buf_add(out, ",\"size\":", 8);
  evd_buf_u32(out, rp->size);
  evd_buf_add(out, ",\"newest\":", 10);
  evd_buf_u32(out, rp->newest);
  if (rp->op == EVD_RP_STEP && (rp->flags & EVD_RP_COMMIT_ARG)) {
    evd_buf_add(out, ",\"dropped\":", 11);
    write_list(out, rp, &rp->gone);
  }
  if (page_size != 0) {
    evd_buf_add(out, ",\"pages_new\":", 13);
    write_list(out, rp, &rp->pages_new);
    evd_buf_add(out, ",\"pages_freed\":", 15);
    write_list(out, rp, &rp->pages_freed);
    write_transient(out, rp, page_size);
  }
  if (replayed)
    evd_buf_add(out, ",\"replayed\":true", 16);
  evd_buf_chr(out, '}');
}

void evd__journal(evd_api_t *api, const evd_op_t *op) {
  if (api->journal != NULL)
    evd_journal_add(api->journal, op);
}

/* Journals an applied request, in the oldest record form that says it
 * all (a plain step is still a version 1 STEP). */
static void journal_request(evd_api_t *api, const evd_session_t *s,
                            const evd__step_t *r, const uint32_t *pos,
                            int created) {
  evd_op_t op = {.id = s->id, .idlen = s->idlen, .positions = pos,
                 .n = r->n, .arg = r->arg};

  if (api->journal == NULL)
    return;
  if (r->op == EVD_RP_TRUNCATE) {
    op.type = EVD_OP_TRUNCATE;
  } else if (r->op == EVD_RP_COMMIT) {
    op.type = EVD_OP_COMMIT;
  } else {
    /* The file's flags, spelled out (record.h ties them to these). */
    op.flags = (r->tentative ? EVD_OP_TENTATIVE : 0u) |
               (r->has_arg ? EVD_OP_COMMIT_ARG : 0u) |
               (created ? EVD_OP_CREATED : 0u);
    op.type = op.flags == 0 ? EVD_OP_STEP : EVD_OP_STEP2;
    op.arg = rp_arg(r);
  }
  evd_journal_add(api->journal, &op);
}

void evd__journal_create(evd_api_t *api, const evd_session_t *s) {
  evd_op_t op = {.type = EVD_OP_CREATE, .id = s->id, .idlen = s->idlen};

  evd_session_config(s, &op.cfg);
  if (op.cfg.lookahead != 1 || op.cfg.page_size != 0)
    op.type = EVD_OP_CREATE2;
  evd__journal(api, &op);
}

/* ---- room before a change ------------------------------------------------ */

/* The most bytes a run-time error object of a step, commit or truncate
 * takes (messages of those errors are short and carry numbers only). */
#define ERROR_BOUND 240

size_t evd__result_bound(evd_api_t *api, const evd_session_t *s,
                         const evd__step_t *r, size_t *journal) {
  const evd_window_t *w = s != NULL ? evd_session_window(s) : NULL;
  const uint32_t *pos = r->n > 0 ? api->pos + r->first : NULL;
  size_t la = w != NULL ? evd_window_lookahead(w) : r->cfg.lookahead;
  size_t size = w != NULL ? evd_window_size(w) : 1;
  size_t b = s != NULL ? evd_session_page_size(s) : r->cfg.page_size;
  size_t n = r->n, victims = n + la, gone, entries, answer;
  evd_replay_t rp;

  /* Drafts pending are at most the lookahead; victims at most those and
   * the new positions; a truncate removes at most what is held. */
  gone = r->op == EVD_RP_TRUNCATE ? size : la;
  entries = victims + gone + n + (b != 0 ? 3 * (victims + gone + n + 1) : 0);
  answer = 160 + 11 * entries;
  if (w != NULL && (r->op != EVD_RP_STEP || n == 0 || pos[0] <= w->newest) &&
      evd_replay_get(s, &rp) && same_request(&rp, r, pos)) {
    /* Transient pages are at most one per victim. */
    size_t stored = 160 + 11 * ((size_t)rp.positions.n * 2 +
                                (b != 0 ? 2u : 1u) * rp.victims.n +
                                rp.gone.n + rp.pages_new.n +
                                rp.pages_freed.n);
    answer = stored > answer ? stored : answer;
  }
  *journal = 2 * (64 + 2 * (size_t)r->idlen) + 4 * n;
  return answer > ERROR_BOUND ? answer : ERROR_BOUND;
}

int evd__room(evd_api_t *api, evd_buf_t *out, size_t answer,
              size_t journal) {
  if (evd_buf_room(out, answer) != 0)
    return EVD_ENOMEM;
  return api->journal != NULL ? evd_journal_room(api->journal, journal) : 0;
}

/* evd__room for the answer and the journal record of r. (A divergence's
 * answer, which carries the session's view, is not counted: it changes
 * nothing, so a lack of room for it can only make it out_of_memory; a
 * batch makes room for it in batch_room.) */
static int make_room(evd_api_t *api, const evd_session_t *s,
                     const evd__step_t *r, evd_buf_t *out) {
  size_t journal, answer = evd__result_bound(api, s, r, &journal);

  return evd__room(api, out, answer, journal);
}

/* The decode step (one committed position, above the newest, no drafts,
 * no pages, the newest expected if one is) in as few instructions as the
 * general path would spend on telling what it is: it is every request of
 * a plain decode loop. Returns the status, or 0 when the request is not
 * one (nothing done). */
static int decode_step(evd_api_t *api, evd_session_t *s, const evd__step_t *r,
                       const uint32_t *pos, evd_buf_t *out) {
  evd_window_t *w = evd_session_window(s);
  uint32_t slot, victim;
  int k;

  if (r->n != 1 || r->op != EVD_RP_STEP || r->has_arg || r->tentative ||
      r->given || (s->bits & EVD__PAGED) || pos[0] <= w->newest ||
      evd_window_has_drafts(w) || (r->has_expect && r->expect != w->newest))
    return 0;
  k = evd_window_advance(w, pos[0], &slot, &victim);
  assert(k >= 0); /* new, no drafts, at most budget held */
  api->metrics.steps++;
  api->metrics.victims += (uint32_t)k;
  evd_replay_step(api->table, s, slot, k, victim, w->size);
  evd_table_touch(api->table, s, api->now_tick);
  journal_request(api, s, r, pos, 0);
  evd_buf_reserve(out, 80);
  evd_buf_add(out, "{\"victims\":", 11);
  evd_buf_u32_array(out, &victim, (size_t)k);
  evd_buf_add(out, ",\"slots\":[", 10);
  evd_buf_u32(out, slot);
  evd_buf_add(out, "],\"size\":", 9);
  evd_buf_u32(out, w->size);
  evd_buf_add(out, ",\"newest\":", 10);
  evd_buf_u32(out, pos[0]);
  evd_buf_chr(out, '}');
  return 200;
}

int evd__step_run(evd_api_t *api, const evd__step_t *r, int in_batch,
                  evd_buf_t *out) {
  evd_session_t *s = evd_table_find(api->table, r->id, r->idlen);
  /* (no arithmetic on a NULL array: a commit or truncate has none) */
  const uint32_t *pos = r->n > 0 ? api->pos + r->first : NULL;
  const char *message;
  evd_apierr_t e;
  evd_replay_t rp;
  int err, created = 0;

  if (make_room(api, s, r, out) != 0)
    return evd__write_error(out, EVD_AE_OUT_OF_MEMORY, NULL, in_batch, NULL);
  if (s != NULL && (err = decode_step(api, s, r, pos, out)) != 0)
    return err;

  if (s == NULL) {
    /* Expecting a newest above 0 is expecting a session that holds what
     * the engine holds: a fresh one would describe another cache. */
    if (!api->cfg.autocreate || r->op != EVD_RP_STEP ||
        (r->has_expect && r->expect != 0))
      return evd__write_error(out, EVD_AE_UNKNOWN_SESSION, NULL, in_batch,
                              NULL);
    /* Refuse before creating anything. */
    e = check(api, NULL, r, pos, &message);
    if (e == EVD_AE_STALE_POSITION)
      message = "A new session already holds position 0 (the start "
                "state): its first step names position 1 or later.";
    if (e != EVD_AE_OK) {
      static const uint32_t zero = 0;
      return evd__write_error(out, e, message, in_batch,
                              e == EVD_AE_STALE_POSITION ? &zero : NULL);
    }
    if (reserve_for(api, NULL, r, r->cfg.page_size) != 0)
      return evd__write_error(out, EVD_AE_OUT_OF_MEMORY, NULL, in_batch,
                              NULL);
    err = evd_table_add(api->table, r->id, r->idlen, &r->cfg, api->now_tick,
                        &s);
    if (err == EVD_ELIMIT)
      return evd__write_error(out, EVD_AE_SESSION_LIMIT, NULL, in_batch,
                              NULL);
    if (err != 0)
      return evd__write_error(out, EVD_AE_OUT_OF_MEMORY, NULL, in_batch,
                              NULL);
    created = 1;
    api->metrics.created++;
    evd__journal_create(api, s);
    evd_log(EVD_LOG_DEBUG, "created session %.*s", (int)r->idlen, r->id);
  } else {
    evd_window_t *w = evd_session_window(s);
    if (r->given && config_conflict(api, s, r))
      return evd__write_error(out, EVD_AE_SESSION_EXISTS, api->msg, in_batch,
                              NULL);
    /* A retry of the last applied request gets its answer again. A step
     * whose positions are all new cannot be one: after any step the
     * newest is at least its last position. */
    if ((r->op != EVD_RP_STEP || r->n == 0 || pos[0] <= w->newest) &&
        evd_replay_get(s, &rp) && same_request(&rp, r, pos)) {
      evd_table_touch(api->table, s, api->now_tick);
      api->metrics.replays++;
      write_answer(out, &rp, evd_session_page_size(s), 1);
      return 200;
    }
    /* ... or, when its record was let go for room, says so. */
    {
      uint64_t hash;
      if (evd_replay_gone(s, &hash) && hash == request_hash(r, pos)) {
        api->metrics.replays_unavailable++;
        return evd__write_error(out, EVD_AE_REPLAY_UNAVAILABLE, NULL,
                                in_batch, NULL);
      }
    }
    /* Not a resend: the session must be where the engine believes it. */
    if (r->has_expect && r->expect != w->newest)
      return evd__write_diverged(api, out, s, r->expect, in_batch);
    e = check(api, w, r, pos, &message);
    if (e != EVD_AE_OK)
      return evd__write_error(out, e, message, in_batch,
                              e == EVD_AE_STALE_POSITION ? &w->newest : NULL);
    if (reserve_for(api, w, r, evd_session_page_size(s)) != 0)
      return evd__write_error(out, EVD_AE_OUT_OF_MEMORY, NULL, in_batch,
                              NULL);
  }
  err = apply(api, s, r, pos, created, &rp);
  assert(err == 0); /* checked above */
  (void)err;
  evd_table_touch(api->table, s, api->now_tick);
  journal_request(api, s, r, pos, created);
  write_answer(out, &rp, evd_session_page_size(s), 0);
  return 200;
}

int evd__step_replay(evd_api_t *api, evd_session_t *s, const evd__step_t *r,
                     const uint32_t *pos, int created) {
  evd_window_t *w = evd_session_window(s);
  const char *message;
  evd_replay_t rp;

  if (check(api, w, r, pos, &message) != EVD_AE_OK)
    return EVD_ECORRUPT;
  if (reserve_for(api, w, r, evd_session_page_size(s)) != 0)
    return EVD_ENOMEM;
  return apply(api, s, r, pos, created, &rp) == 0 ? 0 : EVD_ECORRUPT;
}

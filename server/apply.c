/* Journal recovery's side of the API: each recovered op (create, step,
 * commit, truncate, evict, fork, adopt, delete, reap) is applied to the
 * table as its request applied it, through the same code (loop.c hands
 * evd_api_apply to the journal at start-up). */
#include "api_int.h"

/* Applies a journaled step, commit or truncate as its request did. */
static int apply_logged(evd_api_t *api, evd_session_t *s, const evd_op_t *op) {
  evd__step_t r = {.n = op->n, .arg = op->arg};
  uint32_t i;

  switch (op->type) {
  case EVD_OP_TRUNCATE:
    r.op = EVD_RP_TRUNCATE;
    break;
  case EVD_OP_COMMIT:
    r.op = EVD_RP_COMMIT;
    r.n = 0;
    break;
  default:
    r.op = EVD_RP_STEP;
    r.tentative = (op->flags & EVD_OP_TENTATIVE) != 0;
    r.has_arg = (op->flags & EVD_OP_COMMIT_ARG) != 0;
    if (r.n == 0 && !r.has_arg)
      return EVD_ECORRUPT;
    for (i = 1; i < r.n; i++)
      if (op->positions[i] <= op->positions[i - 1])
        return EVD_ECORRUPT;
  }
  if (r.op == EVD_RP_TRUNCATE && r.arg == 0)
    return EVD_ECORRUPT;
  return evd__step_replay(api, s, &r, op->positions,
                          (op->flags & EVD_OP_CREATED) != 0);
}

int evd_api_apply(void *ctx, const evd_op_t *op) {
  evd_api_t *api = ctx;
  evd_session_t *s = evd_table_find(api->table, op->id, op->idlen), *child;
  evd_window_t *w;
  uint32_t n;

  if (op->type == EVD_OP_ADOPT) {
    evd_window_state_t st = {op->positions, op->slots, op->n, op->arg};
    /* A replacement names a session that exists, a creation one that
     * does not. */
    if ((s != NULL) != ((op->flags & EVD_OP_REPLACED) != 0))
      return EVD_ECORRUPT;
    switch (evd__adopt_apply(api, s, op->id, op->idlen, &op->cfg, &st,
                             &child)) {
    case 0: return 0;
    case EVD_ENOMEM: return EVD_ENOMEM;
    default: return EVD_ECORRUPT;
    }
  }
  if (op->type == EVD_OP_CREATE || op->type == EVD_OP_CREATE2) {
    if (s != NULL)
      return EVD_ECORRUPT;
    switch (evd_table_add(api->table, op->id, op->idlen, &op->cfg,
                          api->now_tick, &s)) {
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
  case EVD_OP_STEP2:
  case EVD_OP_COMMIT:
  case EVD_OP_TRUNCATE:
    return apply_logged(api, s, op);
  case EVD_OP_EVICT:
    if (op->budget <= w->sinks || evd_window_tentative(w) != 0)
      return EVD_ECORRUPT;
    if (evd__grow(&api->victims, &api->victims_cap, evd_window_size(w)) != 0)
      return EVD_ENOMEM;
    return evd_window_evict(w, op->budget, api->victims, evd_window_size(w),
                            &n) == 0 ? 0 : EVD_ECORRUPT;
  case EVD_OP_FORK:
    if (evd_table_find(api->table, op->child, op->childlen) != NULL)
      return EVD_ECORRUPT;
    switch (evd_table_fork(api->table, s, op->child, op->childlen,
                           api->now_tick, &child)) {
    case 0: return 0;
    case EVD_ENOMEM: return EVD_ENOMEM;
    default: return EVD_ECORRUPT;
    }
  case EVD_OP_DELETE:
  case EVD_OP_REAP:
    evd_table_remove(api->table, s);
    return 0;
  default:
    return EVD_ECORRUPT;
  }
}

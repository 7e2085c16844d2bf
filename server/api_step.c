/* The API's handlers of the requests that move a window: POST
 * /session/{id}/step, /commit and /truncate, and the batch POST /step.
 * Each reads its body (the fast path first, where there is one) into
 * step requests and hands them to step.c. */
#include <stdio.h>

#include "api_int.h"

int evd__h_step(evd__ctx_t *c) {
  evd__step_t r; /* set by the fast path, whatever it answers */
  const char *message;
  json_t *root;
  evd_apierr_t err;
  int status;

  r.id = c->id;
  r.idlen = c->idlen;
  if (evd__fast_step(c->api, c->req->body, c->req->body_len, &r))
    return evd__step_run(c->api, &r, 0, c->out);
  err = evd__parse_body(c->api, c->req, 0, NULL, &root, &message);
  if (err == 0)
    err = evd__step_parse(c->api, root, 0, &r, &message);
  if (err != 0) {
    json_decref(root);
    return evd__fail(c, err, message);
  }
  status = evd__step_run(c->api, &r, 0, c->out);
  json_decref(root);
  return status;
}

/* Makes room for a whole batch's answer and journal record before any item
 * is applied: items is NULL for the general path's items in steps. Items
 * the general path refuses for their form are measured by writing their
 * error once. Returns 0, or EVD_ENOMEM. */
static int batch_room(evd_api_t *api, evd_buf_t *out,
                      const evd__step_t *items, json_t *steps, size_t n) {
  size_t i, answer = 16 + n, journal = 0, j;
  evd_session_t *s;

  for (i = 0; i < n; i++) {
    evd__step_t parsed;
    const evd__step_t *r = &parsed;
    const char *message;
    if (items != NULL) {
      r = &items[i]; /* read in place: no copy */
    } else {
      evd_apierr_t e;
      parsed = (evd__step_t){0};
      e = evd__step_parse(api, json_array_get(steps, i), 1, &parsed,
                          &message);
      if (e != EVD_AE_OK) {
        size_t at = out->len;
        evd__write_error(out, e, message, 1, NULL);
        if (out->oom)
          return EVD_ENOMEM;
        answer += out->len - at;
        out->len = at;
        continue;
      }
    }
    s = evd_table_find(api->table, r->id, r->idlen);
    answer += evd__result_bound(api, s, r, &j);
    journal += j;
    /* An item that expects a newest may be answered with a divergence,
     * which carries the session's view (and needs the pages' scratch). */
    if (r->has_expect && s != NULL) {
      answer += evd__view_bound(s);
      if (evd__view_room(api, s) != 0)
        return EVD_ENOMEM;
    }
  }
  return evd__room(api, out, answer, journal);
}

int evd__h_batch(evd__ctx_t *c) {
  evd_api_t *api = c->api;
  const evd_request_t *req = c->req;
  evd_buf_t *out = c->out;
  static const char *const fields[] = {"steps", NULL};
  const char *message;
  json_t *root, *steps, *item;
  evd_apierr_t err;
  size_t i, n;

  if (evd__fast_batch(api, req->body, req->body_len, &n)) {
    if (batch_room(api, out, api->items, NULL, n) != 0)
      return evd__fail(c, EVD_AE_OUT_OF_MEMORY, NULL);
    evd_buf_str(out, "{\"results\":[");
    for (i = 0; i < n; i++) {
      if (i > 0)
        evd_buf_chr(out, ',');
      evd__step_run(api, &api->items[i], 1, out);
    }
    evd_buf_str(out, "]}");
    return 200;
  }
  err = evd__parse_body(api, req, 0, fields, &root, &message);
  if (err != 0)
    return evd__fail(c, err, message);
  steps = json_object_get(root, "steps");
  if (!json_is_array(steps)) {
    json_decref(root);
    return evd__fail(c, EVD_AE_INVALID_FIELD,
                "\"steps\" must be an array of step objects.");
  }
  if (json_array_size(steps) > api->cfg.max_batch) {
    snprintf(api->msg, sizeof api->msg,
             "A batch takes at most %u items (--max-batch).",
             api->cfg.max_batch);
    json_decref(root);
    return evd__fail(c, EVD_AE_TOO_MANY_STEPS, api->msg);
  }
  /* Room for every item's answer first (reading each item once more to
   * do so), so that no item is applied whose batch cannot be answered. */
  if (batch_room(api, out, NULL, steps, json_array_size(steps)) != 0) {
    json_decref(root);
    return evd__fail(c, EVD_AE_OUT_OF_MEMORY, NULL);
  }
  evd_buf_str(out, "{\"results\":[");
  json_array_foreach(steps, i, item) {
    evd__step_t r = {0};
    if (i > 0)
      evd_buf_chr(out, ',');
    err = evd__step_parse(api, item, 1, &r, &message);
    if (err != 0)
      evd__write_error(out, err, message, 1, NULL);
    else
      evd__step_run(api, &r, 1, out);
  }
  evd_buf_str(out, "]}");
  json_decref(root);
  return 200;
}

/* POST /session/{id}/commit and /truncate: one integer field, then the
 * operation as a step request of its own kind. */
static int one_position_op(evd__ctx_t *c, uint8_t op, const char *field,
                           uint32_t min) {
  evd_api_t *api = c->api;
  const char *fields[] = {field, "expect_newest", NULL}, *message;
  evd__step_t r = {.id = c->id, .idlen = c->idlen, .op = op};
  evd_apierr_t perr;
  json_t *root, *v;

  perr = evd__parse_body(api, c->req, 0, fields, &root, &message);
  if (perr != EVD_AE_OK)
    return evd__fail(c, perr, message);
  v = json_object_get(root, field);
  if (v == NULL) {
    snprintf(api->msg, sizeof api->msg, "\"%s\" is required.", field);
    json_decref(root);
    return evd__fail(c, EVD_AE_INVALID_FIELD, api->msg);
  }
  if (!evd__u32_field(api, v, min, UINT32_MAX, &r.arg)) {
    snprintf(api->msg, sizeof api->msg,
             "\"%s\" must be a position: an integer from %u to 4294967295.",
             field, min);
    json_decref(root);
    return evd__fail(c, EVD_AE_INVALID_POSITION, api->msg);
  }
  perr = evd__expect_field(api, root, &r.has_expect, &r.expect, &message);
  json_decref(root);
  if (perr != EVD_AE_OK)
    return evd__fail(c, perr, message);
  r.has_arg = 1;
  return evd__step_run(api, &r, 0, c->out);
}

int evd__h_commit(evd__ctx_t *c) {
  return one_position_op(c, EVD_RP_COMMIT, "newest", 0);
}

int evd__h_truncate(evd__ctx_t *c) {
  return one_position_op(c, EVD_RP_TRUNCATE, "from", 1);
}

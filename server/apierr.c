/* The error table: status, code and default message of every API error. */
#include "apierr.h"

#include <string.h>

static const struct {
  int status;
  const char *code;
  const char *message;
} table[EVD_AE_COUNT] = {
    [EVD_AE_INVALID_JSON] = {400, "invalid_json",
                             "The request body is not a JSON object."},
    [EVD_AE_INVALID_FIELD] = {400, "invalid_field",
                              "A field is unknown, missing or of the wrong "
                              "type."},
    [EVD_AE_INVALID_SESSION_ID] = {400, "invalid_session_id",
                                   "Session ids are 1 to 128 bytes of "
                                   "A-Z a-z 0-9 . _ ~ -."},
    [EVD_AE_INVALID_BUDGET] = {400, "invalid_budget",
                               "The budget is out of range."},
    [EVD_AE_INVALID_SINKS] = {400, "invalid_sinks",
                              "sinks must be an integer from 0 to budget - "
                              "1."},
    [EVD_AE_INVALID_LOOKAHEAD] = {400, "invalid_lookahead",
                                  "lookahead must be an integer from 1 to "
                                  "--max-lookahead."},
    [EVD_AE_INVALID_PAGE_SIZE] = {400, "invalid_page_size",
                                  "page_size must be an integer from 0 to "
                                  "65536."},
    [EVD_AE_INVALID_POSITION] = {400, "invalid_position",
                                 "Positions must be integers from 0 to "
                                 "4294967295, strictly increasing."},
    [EVD_AE_TOO_MANY_POSITIONS] = {400, "too_many_positions",
                                   "The request has more positions than "
                                   "--max-positions allows."},
    [EVD_AE_TOO_MANY_STEPS] = {400, "too_many_steps",
                               "The batch has more items than --max-batch "
                               "allows."},
    [EVD_AE_TOO_DEEP] = {400, "invalid_json",
                         "The request body nests JSON too deeply."},
    [EVD_AE_UNAUTHORIZED] = {401, "unauthorized",
                             "A valid bearer token is required."},
    [EVD_AE_UNKNOWN_SESSION] = {404, "unknown_session",
                                "No session has this id."},
    [EVD_AE_NOT_FOUND] = {404, "not_found", "No such endpoint."},
    [EVD_AE_METHOD_NOT_ALLOWED] = {405, "method_not_allowed",
                                   "This endpoint does not take that "
                                   "method; see the Allow header."},
    [EVD_AE_SESSION_EXISTS] = {409, "session_exists",
                               "A session with this id exists with another "
                               "configuration or state."},
    [EVD_AE_STALE_POSITION] = {409, "stale_position",
                               "The first position is not greater than the "
                               "newest position of the session."},
    [EVD_AE_TENTATIVE_PENDING] = {409, "tentative_pending",
                                  "Tentative positions are pending: commit "
                                  "them first."},
    [EVD_AE_REPLAY_UNAVAILABLE] = {409, "replay_unavailable",
                                   "This resends the session's last request, "
                                   "whose answer is no longer kept "
                                   "(--replay-pool); GET the session to see "
                                   "the state it left."},
    [EVD_AE_BODY_TOO_LARGE] = {413, "body_too_large",
                               "The request body is larger than --max-body "
                               "allows."},
    [EVD_AE_SESSION_LIMIT] = {503, "session_limit",
                              "The daemon holds --max-sessions sessions "
                              "already."},
    [EVD_AE_OUT_OF_MEMORY] = {503, "out_of_memory",
                              "The daemon is out of memory."},
    [EVD_AE_JOURNAL_FAILED] = {503, "journal_failed",
                               "The journal cannot be written; changes are "
                               "refused until a retried write succeeds."},
    [EVD_AE_INVALID_STATE] = {400, "invalid_state",
                              "The state to adopt is not one a session can "
                              "be in."},
    [EVD_AE_DIVERGED] = {409, "diverged",
                         "The session's newest position is not the one "
                         "the request expects (expect_newest); nothing "
                         "changed."},
};

int evd_apierr_status(evd_apierr_t e) {
  return table[e].status;
}

const char *evd_apierr_code(evd_apierr_t e) {
  return table[e].code;
}

void evd_apierr_fields(evd_buf_t *out, evd_apierr_t e, const char *message) {
  const char *m = message != NULL ? message : table[e].message;

  evd_buf_str(out, "\"code\":\"");
  evd_buf_str(out, table[e].code);
  evd_buf_str(out, "\",\"message\":");
  evd_buf_json_str(out, m, strlen(m));
}

void evd_apierr_body(evd_buf_t *out, evd_apierr_t e, const char *message) {
  evd_buf_str(out, "{\"error\":{");
  evd_apierr_fields(out, e, message);
  evd_buf_str(out, "}}");
}

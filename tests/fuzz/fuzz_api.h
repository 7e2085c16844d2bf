/* What the parts of the API fuzzer share (tests/fuzz/fuzz_api*.c): the
 * harness's state, the spec's error codes and routes, the model of a
 * session, and the functions each part offers the others. */
#ifndef EVD_FUZZ_API_H
#define EVD_FUZZ_API_H

#include <jansson.h>
#include <stddef.h>
#include <stdint.h>

#include "api.h"
#include "error.h"
#include "session.h"
#include "window.h"

/* ---- the harness (fuzz_api.c) ------------------------------------------- */

/* The one long-lived API under test, its configuration, the buffer of its
 * last answer and the clock it is given. */
extern evd_api_t *api;
extern evd_config_t cfg;
extern evd_buf_t out;
extern uint64_t clock_ms;

/* Reports a violated invariant with the request and answer at hand, then
 * goes on with the next input (standalone runner) or aborts. */
__attribute__((noreturn, format(printf, 1, 2))) void fail(const char *fmt,
                                                          ...);

#define CHECK(cond, ...)                                                       \
  do {                                                                         \
    if (!(cond))                                                               \
      fail(__VA_ARGS__);                                                       \
  } while (0)

/* The tick (100 ms) that sessions record as their last use. */
static inline uint32_t now_tick(void) {
  return (uint32_t)(clock_ms / 100);
}

/* EVD_FUZZ_STATS counters, printed at exit. */
extern unsigned long seen_items[2], seen_replays, seen_drafts, seen_paged;
void count_status(evd_route_t r, int st);

/* ---- the spec as tables (fuzz_api_spec.c) ------------------------------- */

/* Error codes, as bits of a set of codes whose conditions hold. */
enum {
  E_INVALID_JSON, E_INVALID_FIELD, E_INVALID_SESSION_ID, E_INVALID_BUDGET,
  E_INVALID_SINKS, E_INVALID_LOOKAHEAD, E_INVALID_PAGE_SIZE,
  E_INVALID_POSITION, E_TOO_MANY_POSITIONS, E_TOO_MANY_STEPS,
  E_UNKNOWN_SESSION, E_NOT_FOUND, E_METHOD_NOT_ALLOWED, E_SESSION_EXISTS,
  E_STALE_POSITION, E_TENTATIVE_PENDING, E_SESSION_LIMIT, E_INVALID_STATE,
  E_DIVERGED, E_COUNT
};
#define B(e) (1u << (e))

typedef struct {
  const char *code;
  int status;
} fuzz_code_t;

extern const fuzz_code_t codes[E_COUNT];
extern const char *const route_names[EVD_R_COUNT];

const char *code_names(unsigned set);
const char *route_allow(evd_route_t r);
int route_methods(evd_route_t r);
int route_status_ok(evd_route_t r, int st);
evd_route_t parse_route(const char *p, size_t n, const char **id,
                        size_t *idlen);
int id_valid(const char *id, size_t n);

/* Small JSON helpers. */
int is_u32(json_t *v);
uint32_t u32_of(json_t *v);
int is_int(json_t *v);
int int_in(json_t *v, long long min, long long max, uint32_t *o);
int parse_body(const evd_request_t *req, int optional, json_t **root);
int only_fields(json_t *obj, const char *const *names);
void check_u32_array(json_t *a, int ascending, const char *what);
json_t *jarr(const uint32_t *v, size_t n);
void jpush(json_t *a, uint32_t v);
void check_equal(json_t *got, json_t *want, const char *what);
int check_error(json_t *e, int status, int in_batch);

/* ---- the model (fuzz_api_model.c) --------------------------------------- */

/* One session as the spec describes it. */
typedef struct shadow_s {
  struct shadow_s *hnext;
  char id[EVD_SESSION_ID_MAX + 1];
  size_t idlen;
  uint32_t budget, sinks, look, page;
  uint32_t n, cap;          /* held; room (budget + lookahead) */
  uint32_t *pos, *slot;     /* ascending positions and their slots */
  uint8_t *pinned, *tent;   /* flags per held position */
  uint8_t *occ;             /* per slot: held */
  uint32_t newest, committed;
  uint32_t used;            /* tick of the last use */
  /* The replay record: the last applied step, commit or truncate. */
  int rec_op;               /* 0: none, else R_STEP, R_COMMIT, R_TRUNCATE */
  int rec_tent, rec_has_commit;
  uint32_t rec_arg, rec_n, *rec_pos;
  json_t *rec_answer;
} shadow_t;

enum { R_STEP = 1, R_COMMIT = 2, R_TRUNCATE = 3 };

/* Every live session of the model, by the hash of its id. */
enum { SH_BUCKETS = 4096 };
extern shadow_t *sh_tab[SH_BUCKETS];
extern uint32_t sh_count;

shadow_t *sh_find(const char *id, size_t n);
void sh_free(shadow_t *s);
uint32_t sh_append(shadow_t *s, uint32_t p, int tentative);
void sh_evict_to(shadow_t *s, uint32_t limit, json_t *victims);
uint32_t sh_drafts(const shadow_t *s);
void sh_commit(shadow_t *s, uint32_t p, json_t *victims, json_t *dropped);
void sh_truncate(shadow_t *s, uint32_t from, json_t *removed);
shadow_t *sh_new(const char *id, size_t idlen, const evd_session_config_t *c);
shadow_t *sh_copy(const shadow_t *src, const char *id, size_t idlen,
                  int record);
shadow_t *sh_adopted(const char *id, size_t idlen,
                     const evd_session_config_t *c, const uint32_t *kept,
                     const uint32_t *slots, uint32_t n, uint32_t newest);
void sh_insert(shadow_t *s);
void sh_remove(shadow_t *s);
void sh_put(shadow_t *s);
void sh_set_record(shadow_t *s, int op, int tent, int has_commit,
                   uint32_t arg, const uint32_t *pos, uint32_t n,
                   json_t *answer);
int sh_rec_match(const shadow_t *s, int op, int tent, int has_commit,
                 uint32_t arg, const uint32_t *pos, uint32_t n);
void add_pages(json_t *ans, const shadow_t *before, const shadow_t *after,
               const uint32_t *added, uint32_t nadded);
json_t *sh_view(const shadow_t *s);
int sh_same_state(const shadow_t *a, const shadow_t *b);
void sh_check(const shadow_t *s);

/* ---- requests as the model reads them (fuzz_api_request.c) -------------- */

/* What the model expects of one request: the codes it may be refused with
 * (those whose conditions hold), whether it may succeed, and then the
 * answer and the sessions after it. */
typedef struct {
  unsigned allowed;
  int may_succeed;
  int status;          /* of success */
  json_t *expect;      /* the answer (NULL: checked by the caller) */
  int replay;          /* the answer is the replay record */
  shadow_t *next;      /* the session after success (owned) */
  uint32_t newest;     /* for stale_position and diverged */
} outcome_t;

/* A request's "expect_newest" (obj NULL: none): the codes of a bad one,
 * and *has and *expect. */
unsigned read_expect(json_t *obj, int *has, uint32_t *expect);

/* The codes an expectation of a session's newest adds: s's newest is not
 * the one expected (diverged), or, with no session, a newest past 0 is
 * expected (unknown_session). */
unsigned expect_codes(const shadow_t *s, int has, uint32_t expect);

/* Checks a diverged error object against session id's model. */
void check_diverged(json_t *e, const char *id, size_t idlen);

unsigned read_config(json_t *obj, evd_session_config_t *c);
void outcome_free(outcome_t *o);
void model_one_position(shadow_t *s, const char *id, size_t idlen, int op,
                        json_t *body, int bad_json, outcome_t *o,
                        uint32_t *arg);
void settle(outcome_t *o, json_t *res, int status, int in_batch,
            const char *id, size_t idlen, const char *what);
void step_item(json_t *obj, json_t *res, int status, int in_batch,
               const char *id, size_t idlen);

/* ---- adopt as the model reads it (fuzz_api_adopt.c) ---------------------- */

/* POST /session/{id}/adopt: the codes whose conditions hold, the answer,
 * and the model's session after it. */
void check_adopt(const evd_request_t *req, json_t *res, int st,
                 const char *id, size_t idlen);

/* ---- answers against the model (fuzz_api_check.c) ----------------------- */

evd_session_t *session_of(const char *id, size_t len);
void check_session(const char *id, size_t idlen, const char *when);
void check_count(const char *when);
void check_table(void);
void check_reply(const evd_request_t *req, const evd_reply_t *rep);

#endif

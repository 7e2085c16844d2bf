/* libFuzzer harness for the API without sockets: decodes each input into
 * requests, hands them to ONE long-lived evd_api_t (state accumulates across
 * inputs, as in a running daemon) and checks every answer against the spec
 * (/work/spec9.md: lookahead, page_size, drafts and commit, truncate, fork,
 * pages, replay; proto/openapi.yaml: adopt and expect_newest) and against
 * the harness's own model of every session.
 *
 * Input framing (text-friendly, so that seeds can be written by hand):
 *
 *   input   := record ( 0xFF record )*
 *   record  := op path [ "\n" body ]
 *
 * 0xFF never occurs in UTF-8, so it is never needed inside a JSON body. `op`
 * is one byte: 'G' GET, 'H' HEAD, 'U' PUT, 'P' POST, 'D' DELETE, 'X' a method
 * the API does not know, and 'T' for the clock: then `path` is a decimal
 * number of milliseconds (at most 9 digits) by which the clock advances
 * before the idle reaper runs. Any other op byte picks one of the six
 * methods by its value modulo 6. `path` runs to the first "\n" (or the end)
 * and is passed as is (the transport strips query strings; nothing is
 * decoded); `body` is the rest of the record, passed with its length and no
 * terminating NUL, so that reading past it is caught by ASan.
 *
 * The model. The harness keeps a shadow of every live session, written from
 * the spec and sharing no code with server/ (a plain sorted array of held
 * positions, each with its slot and its pinned and tentative flags, slots
 * handed out by looking at the array, like proto/vectors/gen.py): its
 * configuration (budget, sinks, lookahead, page_size), newest, the committed
 * newest C, the tick of its last use, and its replay record (the last
 * applied step, commit or truncate request and the daemon's answer to it).
 * Every request is first decoded by the harness itself into the set of
 * error codes whose conditions hold (field types and ranges, then the
 * session's state: stale, tentative_pending, too_many_positions for drafts,
 * a commit below C, unknown session, session limit, ...) and, when none
 * holds, the exact answer the model gives. Then, after the API answered:
 *
 * - the route is the harness's own reading of the path, the status is one
 *   the spec documents for that route (201 only for PUT /session/{id},
 *   fork and adopt), a 405 names the route's methods in Allow, a 204 has no
 *   body,
 *   every other answer but /metrics is a JSON object (jansson, duplicate
 *   keys refused, so also valid UTF-8), /metrics names the new counters;
 * - an error is exactly {"error":{"code","message"}} (plus "newest" for
 *   stale_position, the session's newest before the request; plus
 *   "newest" and "view", the model's view of the session, for diverged;
 *   plus "status" in a batch) with a code of its status, and a code whose
 *   condition holds for this request; a request for which none holds is
 *   not refused;
 * - a refused request changes nothing: the session count, the addressed
 *   session (for fork the child too; for a batch every session named) with
 *   every position, slot, draft and its last-use tick stay as the model has
 *   them;
 * - an answer of step, commit, truncate, evict, PUT, GET, fork is exactly
 *   the model's, field order included: victims are the oldest unpinned
 *   positions, evicted per sub-step of `lookahead` positions (drafts are
 *   appended and never evicted); slots are round-robin over sinks..budget +
 *   lookahead - 1 with pinned position k in slot k; "dropped" only with a
 *   commit, "pages_new"/"pages_freed"/"pages_transient" only with
 *   page_size > 0, equal to after \ before, before \ after and the pages
 *   of the added positions (and page 0 of a new session) in neither, of the
 *   model's pages (those the GET view shows); truncate's removed are the positions >= from; fork's 201 is
 *   the parent's view under the child's id; views show "lookahead" only when
 *   it is not 1, "page_size"/"pages" only when page_size > 0, "tentative"
 *   only when drafts are pending. Independent shape checks back this up
 *   (ascending lists, slots below budget + lookahead, size within budget
 *   + lookahead and within budget without drafts, newest, removed >= from);
 * - a request equal to the session's replay record (same operation and
 *   operation fields) is answered with the recorded answer plus
 *   "replayed":true and changes nothing, whatever newest it expects; a
 *   fork's child has no record; any other change expecting a newest the
 *   session does not have is diverged (a missing session expected past 0
 *   is unknown_session, autocreate or not);
 * - an adoption is refused unless the state keeps the spec's rules (the
 *   model's own restatement of them: ascending, within the budget, position
 *   0 under sinks, newest at least the largest, pins in their slots, one
 *   run round the ring turned no further than the positions below it
 *   allow, pages those of the positions); it creates (201), finds the same
 *   state (200), refuses another without replace (409) or replaces it
 *   (200, no replay record left), the view the model's with the canonical
 *   layout when no slots are given;
 * - after every request the sessions it addressed agree with the model
 *   (positions, slots, drafts, newest, configuration, last use); every 64
 *   requests all sessions do, the table's last-use list is ordered and as
 *   long as the count, and the count never exceeds max_sessions;
 * - the reaper removes exactly the sessions the model has idle for longer
 *   than the TTL.
 *
 * Built with -DEVD_FUZZ_DIFF (as fuzz.mk does when server/fastpath.c
 * exists), every request also goes to a twin API without the fast path for
 * step and batch bodies, and the two answers must be identical.
 *
 * EVD_FUZZ_FRESH=1 in the environment makes a new API state for every
 * input, to reproduce a failure from one file alone. Built with
 * -DEVD_FUZZ_STANDALONE it has its own main() that runs the files named on
 * the command line (for coverage reports and for debugging under gcc).
 * EVD_FUZZ_STATS=1 prints, at exit, how often each route answered each
 * status. At most 64 records of an input are run, so that no input takes
 * long.
 *
 * This file is the harness (decoding, the twin, the reaper, entry points);
 * fuzz_api_spec.c holds the spec as tables and the JSON helpers,
 * fuzz_api_model.c the model of a session, fuzz_api_request.c the model's
 * reading of step, commit and truncate requests, fuzz_api_check.c the
 * checks of each answer; fuzz_api.h is what they share. */
#include <setjmp.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fuzz_api.h"

enum { MAX_PATH = 512, MAX_RECORDS = 64 };

evd_api_t *api;
evd_config_t cfg;
evd_buf_t out;
uint64_t clock_ms = 1000000;
static unsigned long calls;
/* The standalone runner goes on with the next file after a violation. */
static jmp_buf next_input;
static int jump_ok;

/* The request being checked, for the report. */
static const char *cur_path, *cur_body;
static size_t cur_path_len, cur_body_len;
static int cur_method;

__attribute__((noreturn, format(printf, 1, 2))) void
fail(const char *fmt, ...) {
  va_list ap;

  fprintf(stderr, "\n*** invariant violated: ");
  va_start(ap, fmt);
  vfprintf(stderr, fmt, ap);
  va_end(ap);
  /* libFuzzer's fork mode shows only the lines of a job's log that hold
   * "ERROR:": say it once more in such a line. */
  fprintf(stderr, "\n==fuzz_api== ERROR: invariant violated: ");
  va_start(ap, fmt);
  vfprintf(stderr, fmt, ap);
  va_end(ap);
  fprintf(stderr, "\n*** request: method %d path [%.*s] body (%zu bytes) "
                  "[%.*s]\n*** answer (%zu bytes): [%.*s]\n",
          cur_method, (int)cur_path_len, cur_path, cur_body_len,
          (int)(cur_body_len > 2000 ? 2000 : cur_body_len),
          cur_body != NULL ? cur_body : "", out.len,
          (int)(out.len > 2000 ? 2000 : out.len), out.data != NULL ? out.data : "");
  if (jump_ok)
    longjmp(next_input, 1);
  abort();
}

#ifdef EVD_FUZZ_DIFF
/* The differential twin (see fuzz.mk): the same API with the fast path of
 * step and batch bodies switched off. It gets every request too, and its
 * answers must be the same byte for byte: the fast path may only ever
 * accept what the general path accepts, with the same values. */
int ref_evd_api_new(evd_api_t **out, const evd_config_t *cfg);
void ref_evd_api_free(evd_api_t *api);
void ref_evd_api_handle(evd_api_t *api, const evd_request_t *req,
                        evd_buf_t *out, evd_reply_t *reply);
void ref_evd_api_set_clock(evd_api_t *api, uint64_t now_ms);
uint32_t ref_evd_api_reap(evd_api_t *api);

static evd_api_t *twin;
static evd_buf_t twin_out;

static int same_str(const char *a, const char *b) {
  return a == b || (a != NULL && b != NULL && strcmp(a, b) == 0);
}

static void twin_handle(const evd_request_t *req, const evd_reply_t *rep) {
  evd_reply_t t;

  ref_evd_api_handle(twin, req, &twin_out, &t);
  CHECK(t.status == rep->status && t.route == rep->route &&
            same_str(t.allow, rep->allow) &&
            same_str(t.content_type, rep->content_type) &&
            same_str(t.www_authenticate, rep->www_authenticate) &&
            /* metrics hold process figures such as the resident size */
            (rep->route == EVD_R_METRICS ||
             (twin_out.len == out.len &&
              (out.len == 0 ||
               memcmp(twin_out.data, out.data, out.len) == 0))),
        "the fast path changed the answer; without it: %d [%.*s]", t.status,
        (int)(twin_out.len > 2000 ? 2000 : twin_out.len),
        twin_out.data != NULL ? twin_out.data : "");
}
#endif

/* EVD_FUZZ_STATS: answers per route and status class, and the batch items,
 * so that a run shows how far it got into the new routes. */
static unsigned long seen[EVD_R_COUNT][6];
unsigned long seen_items[2], seen_replays, seen_drafts, seen_paged;

static void print_stats(void) {
  int r;

  fprintf(stderr, "fuzz_api stats: route 2xx/400/404/405/409/503\n");
  for (r = 0; r < EVD_R_COUNT; r++)
    fprintf(stderr, "  %-9s %lu/%lu/%lu/%lu/%lu/%lu\n", route_names[r],
            seen[r][0], seen[r][1], seen[r][2], seen[r][3], seen[r][4],
            seen[r][5]);
  fprintf(stderr, "  batch items ok/error %lu/%lu, replays %lu, applied "
          "requests leaving drafts %lu, on paged sessions %lu\n",
          seen_items[0], seen_items[1], seen_replays, seen_drafts,
          seen_paged);
}

void count_status(evd_route_t r, int st) {
  int k = st < 300 ? 0 : st == 400 ? 1 : st == 404 ? 2 : st == 405 ? 3
        : st == 409 ? 4 : 5;
  seen[r][k]++;
}

/* Runs the reaper after advancing the clock by `ms`, and checks that it
 * removed exactly the sessions the model has idle for longer than the
 * TTL. */
static void advance_and_reap(uint64_t ms) {
  evd_table_t *t = evd_api_table(api);
  uint32_t now, ttl = cfg.idle_ttl * 10u, expect = 0, count, n, b;
  shadow_t *s, *next;

  clock_ms += ms;
  evd_api_set_clock(api, clock_ms);
  now = now_tick();
  count = evd_table_count(t);
  for (b = 0; b < SH_BUCKETS; b++)
    for (s = sh_tab[b]; s != NULL; s = s->hnext)
      expect += now - s->used > ttl;
  n = evd_api_reap(api);
  CHECK(n == expect, "reaped %u, the model says %u", n, expect);
#ifdef EVD_FUZZ_DIFF
  ref_evd_api_set_clock(twin, clock_ms);
  CHECK(ref_evd_api_reap(twin) == n, "the twin reaped another number");
#endif
  CHECK(evd_table_count(t) == count - n, "count after reaping");
  for (b = 0; b < SH_BUCKETS; b++)
    for (s = sh_tab[b]; s != NULL; s = next) {
      next = s->hnext;
      if (now - s->used > ttl) {
        CHECK(session_of(s->id, s->idlen) == NULL,
              "session %.*s idle for %u ticks survived", (int)s->idlen, s->id,
              now - s->used);
        sh_remove(s);
      } else {
        CHECK(session_of(s->id, s->idlen) != NULL,
              "session %.*s idle for %u ticks was reaped", (int)s->idlen,
              s->id, now - s->used);
      }
    }
  check_count("after reaping");
}

static void setup(void) {
  evd_config_defaults(&cfg);
  cfg.budget = 4;
  cfg.sinks = 0;
  cfg.max_budget = 4096;
  cfg.max_lookahead = 64;
  cfg.max_sessions = 1000;
  cfg.max_positions = 1024;
  cfg.max_batch = 64;
  cfg.idle_ttl = 5;
  if (evd_api_new(&api, &cfg) != 0)
    abort();
  evd_api_set_clock(api, clock_ms);
  evd_buf_init(&out);
#ifdef EVD_FUZZ_DIFF
  if (ref_evd_api_new(&twin, &cfg) != 0)
    abort();
  ref_evd_api_set_clock(twin, clock_ms);
  evd_buf_init(&twin_out);
#endif
}

static void teardown(void) {
  uint32_t b;

  evd_api_free(api);
  evd_buf_free(&out);
  api = NULL;
  for (b = 0; b < SH_BUCKETS; b++)
    while (sh_tab[b] != NULL)
      sh_remove(sh_tab[b]);
#ifdef EVD_FUZZ_DIFF
  ref_evd_api_free(twin);
  evd_buf_free(&twin_out);
#endif
}

static void run_record(const uint8_t *p, size_t n) {
  static const int methods[6] = {EVD_M_GET,  EVD_M_HEAD,   EVD_M_PUT,
                                 EVD_M_POST, EVD_M_DELETE, EVD_M_OTHER};
  const uint8_t *nl;
  size_t plen;
  char *path, *body = NULL;
  evd_request_t req = {0};
  evd_reply_t rep;

  if (n == 0)
    return;
  switch (p[0]) {
  case 'G': req.method = EVD_M_GET; break;
  case 'H': req.method = EVD_M_HEAD; break;
  case 'U': req.method = EVD_M_PUT; break;
  case 'P': req.method = EVD_M_POST; break;
  case 'D': req.method = EVD_M_DELETE; break;
  case 'X': req.method = EVD_M_OTHER; break;
  case 'T': {
    uint64_t ms = 0;
    size_t i;
    for (i = 1; i < n && i <= 9 && p[i] >= '0' && p[i] <= '9'; i++)
      ms = ms * 10 + (uint64_t)(p[i] - '0');
    cur_method = 0;
    cur_path = (const char *)p;
    cur_path_len = n < 10 ? n : 10;
    cur_body = NULL;
    cur_body_len = 0;
    advance_and_reap(ms);
    return;
  }
  default: req.method = methods[p[0] % 6]; break;
  }
  p++;
  n--;
  nl = memchr(p, '\n', n);
  plen = nl != NULL ? (size_t)(nl - p) : n;
  if (plen > MAX_PATH)
    plen = MAX_PATH;
  /* Exact-size copies: ASan catches any read past path_len or body_len. */
  path = malloc(plen ? plen : 1);
  if (path == NULL)
    abort();
  memcpy(path, p, plen);
  req.path = path;
  req.path_len = plen;
  if (nl != NULL && (size_t)(nl - p) + 1 < n) {
    req.body_len = n - (size_t)(nl - p) - 1;
    body = malloc(req.body_len);
    if (body == NULL)
      abort();
    memcpy(body, nl + 1, req.body_len);
    req.body = body;
  }
  cur_method = req.method;
  cur_path = path;
  cur_path_len = plen;
  cur_body = body;
  cur_body_len = req.body_len;
  evd_api_handle(api, &req, &out, &rep);
#ifdef EVD_FUZZ_DIFF
  twin_handle(&req, &rep);
#endif
  check_reply(&req, &rep);
  if (++calls % 64 == 0)
    check_table();
  free(body);
  free(path);
}

int LLVMFuzzerInitialize(int *argc, char ***argv) {
  const char *stats = getenv("EVD_FUZZ_STATS");

  (void)argc;
  (void)argv;
  setup();
  if (stats != NULL && stats[0] == '1')
    atexit(print_stats);
  return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  const char *fresh = getenv("EVD_FUZZ_FRESH");
  size_t start = 0, i, records = 0;

  if (fresh != NULL && fresh[0] == '1') {
    teardown();
    setup();
  }
  for (i = 0; i <= size && records < MAX_RECORDS; i++) {
    if (i == size || data[i] == 0xff) {
      run_record(data + start, i - start);
      start = i + 1;
      records++;
    }
  }
  return 0;
}

#ifdef EVD_FUZZ_STANDALONE
/* Runs each file named on the command line as one input, in order, and
 * goes on after a violation. Exits 1 if there was any. */
int main(int argc, char **argv) {
  int i;
  volatile int failed = 0;

  LLVMFuzzerInitialize(&argc, &argv);
  for (i = 1; i < argc; i++) {
    FILE *f = fopen(argv[i], "rb");
    uint8_t *buf;
    long len;
    if (f == NULL || fseek(f, 0, SEEK_END) != 0 || (len = ftell(f)) < 0) {
      perror(argv[i]);
      return 1;
    }
    rewind(f);
    buf = malloc((size_t)len + 1);
    if (buf == NULL || fread(buf, 1, (size_t)len, f) != (size_t)len) {
      perror(argv[i]);
      return 1;
    }
    fclose(f);
    if (setjmp(next_input) == 0) {
      jump_ok = 1;
      LLVMFuzzerTestOneInput(buf, (size_t)len);
    } else {
      failed++;
      fprintf(stderr, "*** in %s\n", argv[i]);
      /* The model may be half-updated: start again from nothing. */
      teardown();
      setup();
    }
    jump_ok = 0;
    free(buf);
  }
  teardown();
  printf("ran %d inputs, %d violated an invariant\n", argc - 1, failed);
  return failed ? 1 : 0;
}
#endif

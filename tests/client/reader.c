/* The C client's answer reader on its own (deploy/clients/c/reader.h):
 * bytes in, structs out, with an arena and no connection. The daemon's
 * answers as it writes them, each written back (rewrite.h) and read again
 * to the same struct; answers that break an invariant, refused; an arena
 * too small for an answer, refused without a write past it. The "reader"
 * suite. */
#include <stdlib.h>
#include <string.h>

#include "../../deploy/clients/c/reader.h"
#include "common.h"
#include "rewrite.h"

/* Answers the daemon wrote (budget 4, lookahead 2, page size 4). */
#define VIEW                                                                   \
  "{\"id\":\"a\",\"budget\":4,\"sinks\":0,\"lookahead\":2,\"page_size\":4,"    \
  "\"size\":6,\"newest\":8,\"kept\":[3,4,5,6,7,8],\"slots\":[3,4,5,0,1,2],"    \
  "\"tentative\":[7,8],\"pages\":[0,1,2]}"
#define STEP                                                                   \
  "{\"victims\":[0,1,2],\"slots\":[1,2,3,4,5,0],\"size\":4,\"newest\":6,"      \
  "\"pages_new\":[1],\"pages_freed\":[],\"pages_transient\":[]}"
#define COMMIT                                                                 \
  "{\"victims\":[3],\"dropped\":[8],\"size\":4,\"newest\":7,\"pages_new\":[]," \
  "\"pages_freed\":[0,2],\"pages_transient\":[]}"
#define BATCH                                                                  \
  "{\"results\":[{\"victims\":[],\"slots\":[1],\"size\":3,\"newest\":9,"       \
  "\"pages_new\":[2],\"pages_freed\":[],\"pages_transient\":[]},{\"error\":{"  \
  "\"code\":\"stale_position\",\"message\":\"The first position is not "       \
  "greater than the newest position of the session.\",\"newest\":9,"          \
  "\"status\":409}}]}"
#define ERROR                                                                  \
  "{\"error\":{\"code\":\"stale_position\",\"message\":\"The first position "  \
  "is not greater.\",\"newest\":9}}"

static const unsigned STEP_FIELDS =
    EVD__F_VICTIMS | EVD__F_SLOTS | EVD__F_SIZE | EVD__F_NEWEST;
static const unsigned COMMIT_FIELDS =
    EVD__F_VICTIMS | EVD__F_DROPPED | EVD__F_SIZE | EVD__F_NEWEST;

/* A reader over the NUL-terminated text s, with the arena fitted to it. */
static evd__reader_t *reader(evd__reader_t *r, evd__arena_t *a,
                             const char *s) {
  ck_assert_int_eq(evd__arena_fit(a, strlen(s)), 0);
  evd__reader_init(r, s, strlen(s), a);
  return r;
}

/* A copy of s without its NUL in a buffer of exactly its length, so that
 * ASan sees any read past the answer's last byte. */
static char *exact(const char *s) {
  char *p = malloc(strlen(s));
  ck_assert_ptr_nonnull(p);
  memcpy(p, s, strlen(s));
  return p;
}

START_TEST(daemon_answers_read_and_read_again_the_same) {
  evd__arena_t a = {0}, b = {0};
  evd_answer_t x, y;
  evd_view_t v, w;
  evd_batch_result_t bx[2], by[2];
  evd_client_err_t ex, ey;
  evd__reader_t r;
  rw_buf_t out = {0};

  ck_assert_int_eq(evd__read_answer(reader(&r, &a, STEP), STEP_FIELDS, &x), 0);
  EXPECT(x.victims, 0, 1, 2);
  EXPECT(x.slots, 1, 2, 3, 4, 5, 0);
  EXPECT(x.pages_new, 1);
  EMPTY(x.pages_freed);
  ck_assert_int_eq(x.size, 4);
  ck_assert_int_eq(x.newest, 6);
  ck_assert_ptr_null(rw_answer_broken(&x));
  rw_answer(&out, &x);
  ck_assert(!out.failed);
  ck_assert_int_eq(evd__arena_fit(&b, out.len), 0);
  evd__reader_init(&r, out.p, out.len, &b);
  ck_assert_int_eq(evd__read_answer(&r, STEP_FIELDS, &y), 0);
  ck_assert_ptr_null(rw_answer_diff(&x, &y));

  ck_assert_int_eq(evd__read_answer(reader(&r, &a, COMMIT), COMMIT_FIELDS,
                                    &x), 0);
  EXPECT(x.dropped, 8);
  EXPECT(x.pages_freed, 0, 2);
  EMPTY(x.slots);

  ck_assert_int_eq(evd__read_view(reader(&r, &a, VIEW), &v), 0);
  ck_assert_str_eq(v.id, "a");
  ck_assert_int_eq(v.lookahead, 2);
  EXPECT(v.tentative, 7, 8);
  EXPECT(v.pages, 0, 1, 2);
  ck_assert_ptr_null(rw_view_broken(&v));
  out.len = 0;
  rw_view(&out, &v);
  ck_assert_int_eq(evd__arena_fit(&b, out.len), 0);
  evd__reader_init(&r, out.p, out.len, &b);
  ck_assert_int_eq(evd__read_view(&r, &w), 0);
  ck_assert_ptr_null(rw_view_diff(&v, &w));

  ck_assert_int_eq(evd__read_batch(reader(&r, &a, BATCH), bx, 2), 0);
  ck_assert_int_eq(bx[0].rc, 0);
  ck_assert_int_eq(bx[1].rc, EVD_CLIENT_EAPI);
  ck_assert_str_eq(bx[1].error.code, "stale_position");
  ck_assert_int_eq(bx[1].error.status, 409);
  ck_assert_int_eq(bx[1].error.newest, 9);
  ck_assert_ptr_null(rw_batch_broken(bx, 2));
  out.len = 0;
  rw_batch(&out, bx, 2);
  ck_assert_int_eq(evd__arena_fit(&b, out.len), 0);
  evd__reader_init(&r, out.p, out.len, &b);
  ck_assert_int_eq(evd__read_batch(&r, by, 2), 0);
  ck_assert_ptr_null(rw_batch_diff(bx, by, 2));

  ck_assert_int_eq(evd__read_error(reader(&r, &a, ERROR), &ex), 0);
  ck_assert_str_eq(ex.code, "stale_position");
  ck_assert_int_eq(ex.newest, 9);
  ck_assert_int_eq(ex.status, 0);
  out.len = 0;
  rw_error(&out, &ex);
  ck_assert_int_eq(evd__arena_fit(&b, out.len), 0);
  evd__reader_init(&r, out.p, out.len, &b);
  ck_assert_int_eq(evd__read_error(&r, &ey), 0);
  ck_assert_ptr_null(rw_error_diff(&ex, &ey));

  rw_free(&out);
  evd__arena_free(&a);
  evd__arena_free(&b);
}
END_TEST

/* The lists and strings are the arena's, and one fit serves one answer:
 * a warm arena's memory stays where it was. */
START_TEST(answers_live_in_the_arena) {
  evd__arena_t a = {0};
  const uint32_t *first;
  evd__reader_t r;
  evd_answer_t x;
  evd_view_t v;

  ck_assert_int_eq(evd__read_answer(reader(&r, &a, STEP), STEP_FIELDS, &x), 0);
  ck_assert(x.victims.v >= a.u32 && x.victims.v < a.u32 + a.u32_len);
  ck_assert(x.slots.v >= a.u32 && x.slots.v + 6 <= a.u32 + a.u32_len);
  first = x.victims.v;
  ck_assert_int_eq(evd__read_view(reader(&r, &a, VIEW), &v), 0);
  ck_assert(v.id >= a.chars && v.id < a.chars + a.chars_len);
  ck_assert_ptr_eq(v.kept.v, first);
  evd__arena_free(&a);
}
END_TEST

/* An arena fitted to a shorter answer: refused, nothing written past it
 * (ASan), whatever the answer holds. */
START_TEST(an_arena_too_small_is_refused_not_overrun) {
  static const char view[] = "{\"id\":\"a-very-long-session-id\"}";
  evd__arena_t a = {0}, b = {0};
  evd__reader_t r;
  evd_answer_t x;
  evd_view_t v;
  char *s = exact(STEP);

  ck_assert_int_eq(evd__arena_fit(&a, 3), 0);
  evd__reader_init(&r, s, strlen(STEP), &a);
  ck_assert_int_eq(evd__read_answer(&r, STEP_FIELDS, &x), -1);
  ck_assert_msg(strstr(r.why, "more numbers") != NULL, "%s", r.why);
  free(s);
  s = exact(view);
  ck_assert_int_eq(evd__arena_fit(&b, 3), 0);
  evd__reader_init(&r, s, strlen(view), &b);
  ck_assert_int_eq(evd__read_view(&r, &v), -1);
  ck_assert_msg(strstr(r.why, "longer than the answer") != NULL, "%s",
                r.why);
  free(s);
  evd__arena_free(&a);
  evd__arena_free(&b);
}
END_TEST

/* Answers that are JSON and have every field, but break an invariant. */
START_TEST(answers_breaking_an_invariant_are_refused) {
  static const struct {
    char shape; /* a answer (a step's fields), v view, b batch of 1 */
    const char *body, *says;
  } bad[] = {
      {'a', "{\"victims\":[2,1],\"slots\":[],\"size\":1,\"newest\":1}",
       "not strictly ascending"},
      {'a', "{\"victims\":[1,1],\"slots\":[],\"size\":1,\"newest\":1}",
       "not strictly ascending"},
      {'a', "{\"victims\":[],\"slots\":[5,1],\"size\":1,\"newest\":1,"
            "\"dropped\":[3,2]}",
       "not strictly ascending"},
      {'a', "{\"victims\":[],\"slots\":[],\"size\":1,\"newest\":1,"
            "\"pages_new\":[1,4],\"pages_freed\":[2,4]}",
       "a page in two"},
      {'a', "{\"victims\":[],\"slots\":[],\"size\":1,\"newest\":1,"
            "\"pages_freed\":[7],\"pages_transient\":[7]}",
       "a page in two"},
      {'v', "{\"id\":\"a\",\"budget\":4,\"sinks\":0,\"size\":2,\"newest\":2,"
            "\"kept\":[1,2],\"slots\":[1]}",
       "one per kept"},
      {'v', "{\"id\":\"a\",\"budget\":4,\"sinks\":0,\"size\":3,\"newest\":2,"
            "\"kept\":[1,2],\"slots\":[1,2]}",
       "size is not the count"},
      {'v', "{\"id\":\"a\",\"budget\":4,\"sinks\":0,\"size\":2,\"newest\":1,"
            "\"kept\":[1,2],\"slots\":[1,2]}",
       "newest is below"},
      {'v', "{\"id\":\"a\",\"budget\":4,\"sinks\":0,\"size\":2,\"newest\":2,"
            "\"kept\":[2,1],\"slots\":[1,2]}",
       "not strictly ascending"},
      {'v', "{\"id\":\"a\",\"budget\":4,\"sinks\":0,\"size\":3,\"newest\":3,"
            "\"kept\":[1,2,3],\"slots\":[1,2,3],\"tentative\":[2]}",
       "tentative are not the newest"},
      {'v', "{\"id\":\"a\",\"budget\":4,\"sinks\":0,\"size\":1,\"newest\":1,"
            "\"kept\":[1],\"slots\":[1],\"tentative\":[0,1]}",
       "tentative are not the newest"},
      {'v', "{\"id\":\"a\",\"budget\":4,\"sinks\":0,\"size\":1,\"newest\":1,"
            "\"kept\":[1],\"slots\":[1],\"pages\":[0]}",
       "pages but no page_size"},
      {'v', "{\"id\":\"a\",\"budget\":4,\"sinks\":0,\"page_size\":2,"
            "\"size\":2,\"newest\":5,\"kept\":[1,5],\"slots\":[1,2],"
            "\"pages\":[0,1,2]}",
       "pages are not those"},
      {'v', "{\"id\":\"a\",\"budget\":4,\"sinks\":0,\"page_size\":2,"
            "\"size\":2,\"newest\":5,\"kept\":[1,5],\"slots\":[1,2],"
            "\"pages\":[0]}",
       "pages are not those"},
      {'b', "{\"results\":[{\"error\":{\"code\":\"x\",\"message\":\"m\","
            "\"status\":200}}]}",
       "4xx/5xx"},
      {'b', "{\"results\":[{\"victims\":[3,2],\"slots\":[1],\"size\":1,"
            "\"newest\":1}]}",
       "not strictly ascending"},
  };
  evd__arena_t a = {0};
  size_t i;

  for (i = 0; i < sizeof bad / sizeof bad[0]; i++) {
    char *s = exact(bad[i].body);
    size_t len = strlen(bad[i].body);
    evd_batch_result_t res;
    evd__reader_t r;
    evd_answer_t x;
    evd_view_t v;
    int rc;

    ck_assert_int_eq(evd__arena_fit(&a, len), 0);
    evd__reader_init(&r, s, len, &a);
    rc = bad[i].shape == 'a'   ? evd__read_answer(&r, STEP_FIELDS, &x)
         : bad[i].shape == 'v' ? evd__read_view(&r, &v)
                               : evd__read_batch(&r, &res, 1);
    ck_assert_msg(rc == -1, "case %zu (%s) was accepted", i, bad[i].body);
    ck_assert_msg(strstr(r.why, bad[i].says) != NULL,
                  "case %zu: \"%s\" does not say \"%s\"", i, r.why,
                  bad[i].says);
    free(s);
  }
  evd__arena_free(&a);
}
END_TEST

Suite *reader_suite(void) {
  Suite *s = suite_create("reader");
  TCase *tc = tcase_create("bytes");

  tcase_add_test(tc, daemon_answers_read_and_read_again_the_same);
  tcase_add_test(tc, answers_live_in_the_arena);
  tcase_add_test(tc, an_arena_too_small_is_refused_not_overrun);
  tcase_add_test(tc, answers_breaking_an_invariant_are_refused);
  suite_add_tcase(s, tc);
  return s;
}

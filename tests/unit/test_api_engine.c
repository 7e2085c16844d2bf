/* API unit tests of the engine workflows: lookahead and pages, drafts and
 * commit, truncate, fork, and the replay records of runs; part of
 * build/test_api. */
#include <check.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "api_harness.h"

/* ---- engine workflows: lookahead, pages, drafts, commit, truncate, fork -- */

START_TEST(engine_config_fields) {
  char *before;

  start();
  expect_ok(PUT, "/session/a", "{\"budget\":4,\"lookahead\":3,\"page_size\":2}",
            201,
            "{\"id\":\"a\",\"budget\":4,\"sinks\":0,\"lookahead\":3,"
            "\"page_size\":2,\"size\":1,\"newest\":0,\"kept\":[0],"
            "\"slots\":[0],\"pages\":[0]}");
  expect_ok(PUT, "/session/a", "{\"budget\":4,\"lookahead\":3,\"page_size\":2}",
            200, NULL);
  before = view_of("a");
  expect_error(PUT, "/session/a", "{\"budget\":4,\"page_size\":2}", 409,
               "session_exists");
  expect_error(PUT, "/session/a", "{\"budget\":4,\"lookahead\":3}", 409,
               "session_exists");
  expect_view("a", before);
  free(before);
  expect_error(PUT, "/session/b", "{\"lookahead\":0}", 400,
               "invalid_lookahead");
  expect_error(PUT, "/session/b", "{\"lookahead\":65537}", 400,
               "invalid_lookahead");
  expect_error(PUT, "/session/b", "{\"lookahead\":\"2\"}", 400,
               "invalid_field");
  expect_error(PUT, "/session/b", "{\"page_size\":65537}", 400,
               "invalid_page_size");
  expect_error(PUT, "/session/b", "{\"page_size\":-1}", 400,
               "invalid_page_size");
  expect_error(PUT, "/session/b", "{\"page_size\":1.5}", 400,
               "invalid_field");
  expect_error(POST, "/session/b/step", "{\"pos\":1,\"lookahead\":0}", 400,
               "invalid_lookahead");
  ck_assert_uint_eq(evd_table_count(evd_api_table(api)), 1);
  /* An autocreating step takes them; its answer lists page 0 as new. */
  expect_ok(POST, "/session/b/step",
            "{\"positions\":[1,2,3,4,5],\"budget\":2,\"lookahead\":5,"
            "\"page_size\":2}",
            200,
            "{\"victims\":[0,1,2,3],\"slots\":[1,2,3,4,5],\"size\":2,"
            "\"newest\":5,\"pages_new\":[2],\"pages_freed\":[],"
            "\"pages_transient\":[0,1]}");
  expect_ok(GET, "/session/b", NULL, 200,
            "{\"id\":\"b\",\"budget\":2,\"sinks\":0,\"lookahead\":5,"
            "\"page_size\":2,\"size\":2,\"newest\":5,\"kept\":[4,5],"
            "\"slots\":[4,5],\"pages\":[2]}");
  /* ... and they are creation parameters only: a later step may repeat
   * them, not change them. */
  expect_error(POST, "/session/b/step", "{\"pos\":6,\"lookahead\":1}", 409,
               "session_exists");
  expect_ok(POST, "/session/b/step", "{\"pos\":6,\"lookahead\":5}", 200,
            "{\"victims\":[4],\"slots\":[6],\"size\":2,\"newest\":6,"
            "\"pages_new\":[3],\"pages_freed\":[],\"pages_transient\":[]}");
  expect_ok(POST, "/session/c/step", "{\"pos\":1,\"page_size\":4}", 200,
            "{\"victims\":[],\"slots\":[1],\"size\":2,\"newest\":1,"
            "\"pages_new\":[0],\"pages_freed\":[],\"pages_transient\":[]}");
  stop();
}
END_TEST

START_TEST(drafts_commit_and_their_refusals) {
  char *before;

  start();
  expect_ok(PUT, "/session/a", "{\"budget\":3,\"lookahead\":2}", 201, NULL);
  expect_ok(POST, "/session/a/step", "{\"positions\":[1,2,3]}", 200, NULL);
  expect_ok(POST, "/session/a/step", "{\"positions\":[4,5],\"tentative\":true}",
            200,
            "{\"victims\":[],\"slots\":[4,0],\"size\":5,\"newest\":5}");
  expect_ok(GET, "/session/a", NULL, 200,
            "{\"id\":\"a\",\"budget\":3,\"sinks\":0,\"lookahead\":2,"
            "\"size\":5,\"newest\":5,\"kept\":[1,2,3,4,5],"
            "\"slots\":[1,2,3,4,0],\"tentative\":[4,5]}");
  before = view_of("a");
  expect_error(POST, "/session/a/step", "{\"pos\":6}", 409,
               "tentative_pending");
  expect_error(POST, "/session/a/evict", NULL, 409, "tentative_pending");
  expect_error(POST, "/session/a/step", "{\"pos\":6,\"tentative\":true}", 400,
               "too_many_positions");
  expect_error(POST, "/session/a/step", "{\"pos\":5,\"tentative\":true}", 409,
               "stale_position");
  expect_error(POST, "/session/a/step", "{\"pos\":6,\"tentative\":1}", 400,
               "invalid_field");
  expect_error(POST, "/session/a/commit", "{\"newest\":2}", 400,
               "invalid_position");
  expect_error(POST, "/session/a/commit", "{\"newest\":-1}", 400,
               "invalid_position");
  expect_error(POST, "/session/a/commit", "{}", 400, "invalid_field");
  expect_error(POST, "/session/a/commit", NULL, 400, "invalid_json");
  expect_error(POST, "/session/a/commit", "{\"newest\":4,\"x\":1}", 400,
               "invalid_field");
  expect_error(POST, "/session/z/commit", "{\"newest\":4}", 404,
               "unknown_session");
  /* A step with a commit must still go above the commit's newest. */
  expect_error(POST, "/session/a/step", "{\"commit\":4,\"pos\":4}", 409,
               "stale_position");
  expect_error(POST, "/session/a/step", "{\"commit\":2,\"pos\":9}", 400,
               "invalid_position");
  expect_view("a", before);
  free(before);
  ck_assert_uint_eq(evd_table_count(evd_api_table(api)), 1);
  /* Accept 4, drop 5; a resend is replayed. */
  expect_ok(POST, "/session/a/commit", "{\"newest\":4}", 200,
            "{\"victims\":[1],\"dropped\":[5],\"size\":3,\"newest\":4}");
  expect_ok(POST, "/session/a/commit", "{\"newest\":4}", 200,
            "{\"victims\":[1],\"dropped\":[5],\"size\":3,\"newest\":4,"
            "\"replayed\":true}");
  /* Commit and the next drafts in one request, and its replay. */
  expect_ok(POST, "/session/a/step",
            "{\"commit\":4,\"positions\":[5,6],\"tentative\":true}", 200,
            "{\"victims\":[],\"slots\":[0,1],\"size\":5,\"newest\":6,"
            "\"dropped\":[]}");
  expect_ok(POST, "/session/a/step",
            "{\"commit\":6,\"positions\":[7],\"tentative\":true}", 200,
            "{\"victims\":[2,3],\"slots\":[2],\"size\":4,\"newest\":7,"
            "\"dropped\":[]}");
  expect_ok(POST, "/session/a/step",
            "{\"commit\":6,\"positions\":[7],\"tentative\":true}", 200,
            "{\"victims\":[2,3],\"slots\":[2],\"size\":4,\"newest\":7,"
            "\"dropped\":[],\"replayed\":true}");
  /* The same positions without the flag are another request: drop the
   * draft 7, then step 7 for good. */
  expect_ok(POST, "/session/a/step", "{\"commit\":6,\"positions\":[7]}", 200,
            "{\"victims\":[4],\"slots\":[2],\"size\":3,\"newest\":7,"
            "\"dropped\":[7]}");
  /* A commit-only step, rejecting every draft. */
  expect_ok(POST, "/session/a/step", "{\"pos\":8,\"tentative\":true}", 200,
            NULL);
  expect_ok(POST, "/session/a/step", "{\"commit\":7}", 200,
            "{\"victims\":[],\"slots\":[],\"size\":3,\"newest\":7,"
            "\"dropped\":[8]}");
  expect_ok(POST, "/session/a/step", "{\"pos\":8}", 200,
            "{\"victims\":[5],\"slots\":[3],\"size\":3,\"newest\":8}");
  stop();
}
END_TEST

START_TEST(truncate_forms_and_refusals) {
  start();
  expect_ok(PUT, "/session/a", "{\"budget\":4,\"sinks\":2,\"page_size\":2}",
            201, NULL);
  expect_ok(POST, "/session/a/step", "{\"positions\":[1,2,3,4,5,6,7]}", 200,
            NULL);
  expect_error(POST, "/session/a/truncate", "{\"from\":0}", 400,
               "invalid_position");
  expect_error(POST, "/session/a/truncate", "{\"from\":\"1\"}", 400,
               "invalid_position");
  expect_error(POST, "/session/a/truncate", "{}", 400, "invalid_field");
  expect_error(POST, "/session/z/truncate", "{\"from\":1}", 404,
               "unknown_session");
  expect_ok(POST, "/session/a/truncate", "{\"from\":50}", 200,
            "{\"removed\":[],\"size\":4,\"newest\":7,\"pages_new\":[],"
            "\"pages_freed\":[],\"pages_transient\":[]}");
  expect_ok(POST, "/session/a/truncate", "{\"from\":1}", 200,
            "{\"removed\":[1,6,7],\"size\":1,\"newest\":0,\"pages_new\":[],"
            "\"pages_freed\":[3],\"pages_transient\":[]}");
  expect_ok(POST, "/session/a/truncate", "{\"from\":1}", 200,
            "{\"removed\":[1,6,7],\"size\":1,\"newest\":0,\"pages_new\":[],"
            "\"pages_freed\":[3],\"pages_transient\":[],\"replayed\":true}");
  /* 1 is pinned again in slot 1; 2 starts the ring at slot 2. */
  expect_ok(POST, "/session/a/step", "{\"positions\":[1,2]}", 200,
            "{\"victims\":[],\"slots\":[1,2],\"size\":3,\"newest\":2,"
            "\"pages_new\":[1],\"pages_freed\":[],\"pages_transient\":[]}");
  stop();
}
END_TEST

/* A step past the budget writes pages it also evicts: they are named, and
 * a resend gets the same lists even after an evict changed the window
 * (the record keeps two bits, not the pages). Positions with gaps keep
 * the record as arrays rather than runs: the same must hold. */
START_TEST(transient_pages_and_their_replay) {
  start();
  expect_ok(PUT, "/session/a", "{\"budget\":3,\"page_size\":2,"
            "\"lookahead\":8}", 201, NULL);
  expect_ok(POST, "/session/a/step", "{\"positions\":[1,2,3,4,5,6,7]}", 200,
            "{\"victims\":[0,1,2,3,4],\"slots\":[1,2,3,4,5,6,7],"
            "\"size\":3,\"newest\":7,\"pages_new\":[2,3],"
            "\"pages_freed\":[0],\"pages_transient\":[1]}");
  expect_ok(POST, "/session/a/evict", "{\"budget\":1}", 200,
            "{\"victims\":[5,6],\"size\":1,\"pages_new\":[],"
            "\"pages_freed\":[2],\"pages_transient\":[]}");
  expect_ok(POST, "/session/a/step", "{\"positions\":[1,2,3,4,5,6,7]}", 200,
            "{\"victims\":[0,1,2,3,4],\"slots\":[1,2,3,4,5,6,7],"
            "\"size\":3,\"newest\":7,\"pages_new\":[2,3],"
            "\"pages_freed\":[0],\"pages_transient\":[1],"
            "\"replayed\":true}");
  /* Gaps: victims 7 20 23 24 are not a run; 20, 23 and 24 each had a
   * page of its own, held within the request only. */
  expect_ok(POST, "/session/a/step", "{\"positions\":[20,23,24,29,31,33]}",
            200,
            "{\"victims\":[7,20,23,24],\"slots\":[8,9,10,0,1,2],"
            "\"size\":3,\"newest\":33,\"pages_new\":[14,15,16],"
            "\"pages_freed\":[3],\"pages_transient\":[10,11,12]}");
  expect_ok(POST, "/session/a/evict", "{\"budget\":1}", 200, NULL);
  expect_ok(POST, "/session/a/step", "{\"positions\":[20,23,24,29,31,33]}",
            200,
            "{\"victims\":[7,20,23,24],\"slots\":[8,9,10,0,1,2],"
            "\"size\":3,\"newest\":33,\"pages_new\":[14,15,16],"
            "\"pages_freed\":[3],\"pages_transient\":[10,11,12],"
            "\"replayed\":true}");
  /* The victims' page still held after the step (3 survives in page 0)
   * is not transient, and stays so in the replay after an evict emptied
   * it: the window then no longer says what it held. */
  expect_ok(PUT, "/session/b", "{\"budget\":3,\"page_size\":4,"
            "\"lookahead\":8}", 201, NULL);
  expect_ok(POST, "/session/b/step", "{\"positions\":[1,2,3]}", 200, NULL);
  expect_ok(POST, "/session/b/step", "{\"positions\":[4,5]}", 200,
            "{\"victims\":[1,2],\"slots\":[4,5],\"size\":3,"
            "\"newest\":5,\"pages_new\":[1],\"pages_freed\":[],"
            "\"pages_transient\":[]}");
  expect_ok(POST, "/session/b/evict", "{\"budget\":1}", 200,
            "{\"victims\":[3,4],\"size\":1,\"pages_new\":[],"
            "\"pages_freed\":[0],\"pages_transient\":[]}");
  expect_ok(POST, "/session/b/step", "{\"positions\":[4,5]}", 200,
            "{\"victims\":[1,2],\"slots\":[4,5],\"size\":3,"
            "\"newest\":5,\"pages_new\":[1],\"pages_freed\":[],"
            "\"pages_transient\":[],\"replayed\":true}");
  stop();
}
END_TEST

START_TEST(fork_forms_and_refusals) {
  evd_config_t cfg;

  default_cfg(&cfg);
  cfg.max_sessions = 3;
  start_with(&cfg);
  expect_ok(PUT, "/session/p", "{\"budget\":3,\"lookahead\":2}", 201, NULL);
  expect_ok(POST, "/session/p/step", "{\"positions\":[1,2,3,4]}", 200, NULL);
  expect_ok(POST, "/session/p/step", "{\"pos\":5,\"tentative\":true}", 200,
            NULL);
  expect_error(POST, "/session/p/fork", "{}", 400, "invalid_field");
  expect_error(POST, "/session/p/fork", "{\"into\":7}", 400, "invalid_field");
  expect_error(POST, "/session/p/fork", "{\"into\":\"a b\"}", 400,
               "invalid_session_id");
  expect_error(POST, "/session/z/fork", "{\"into\":\"c\"}", 404,
               "unknown_session");
  ck_assert_uint_eq(evd_table_count(evd_api_table(api)), 1);
  expect_ok(POST, "/session/p/fork", "{\"into\":\"c\"}", 201,
            "{\"id\":\"c\",\"budget\":3,\"sinks\":0,\"lookahead\":2,"
            "\"size\":4,\"newest\":5,\"kept\":[2,3,4,5],"
            "\"slots\":[2,3,4,0],\"tentative\":[5]}");
  expect_ok(POST, "/session/p/fork", "{\"into\":\"c\"}", 200, NULL);
  expect_error(POST, "/session/p/fork", "{\"into\":\"p\"}", 400,
               "invalid_field");
  expect_error(POST, "/session/z/fork", "{\"into\":\"z\"}", 400,
               "invalid_field");
  /* The child's drafts are its own; so is its commit. */
  expect_ok(POST, "/session/c/commit", "{\"newest\":4}", 200,
            "{\"victims\":[],\"dropped\":[5],\"size\":3,\"newest\":4}");
  expect_ok(POST, "/session/p/commit", "{\"newest\":5}", 200,
            "{\"victims\":[2],\"dropped\":[],\"size\":3,\"newest\":5}");
  expect_error(POST, "/session/p/fork", "{\"into\":\"c\"}", 409,
               "session_exists");
  /* The child has no replay record: the parent's last request is new
   * there (and, here, applies). */
  expect_ok(POST, "/session/c/commit", "{\"newest\":5}", 200,
            "{\"victims\":[],\"dropped\":[],\"size\":3,\"newest\":4}");
  expect_ok(POST, "/session/p/fork", "{\"into\":\"d\"}", 201, NULL);
  expect_error(POST, "/session/p/fork", "{\"into\":\"e\"}", 503,
               "session_limit");
  stop();
}
END_TEST

START_TEST(batch_items_with_drafts_and_commits) {
  json_t *results;

  start();
  ck_assert_int_eq(req(POST, "/step",
                       "{\"steps\":[{\"session\":\"a\",\"positions\":[1,2],"
                       "\"tentative\":true,\"lookahead\":2,\"budget\":2},"
                       "{\"session\":\"a\",\"pos\":3},"
                       "{\"session\":\"a\",\"commit\":1,\"pos\":2},"
                       "{\"session\":\"a\",\"commit\":2},"
                       "{\"session\":\"b\",\"commit\":0,\"pos\":1}]}"),
                   200);
  results = json_object_get(body, "results");
  ck_assert_uint_eq(json_array_size(results), 5);
  ck_assert_str_eq(check_error_object(json_object_get(
                                          json_array_get(results, 1), "error"),
                                      0, 1),
                   "tentative_pending");
  {
    json_t *want = json_loads(
        "[{\"victims\":[],\"slots\":[1,2],\"size\":3,\"newest\":2},"
        "{\"victims\":[0],\"slots\":[2],\"size\":2,\"newest\":2,"
        "\"dropped\":[2]},"
        "{\"victims\":[],\"slots\":[],\"size\":2,\"newest\":2,"
        "\"dropped\":[]},"
        "{\"victims\":[],\"slots\":[1],\"size\":2,\"newest\":1,"
        "\"dropped\":[]}]",
        0, NULL);
    json_array_remove(results, 1);
    ck_assert_msg(json_equal(want, results), "got %.*s", (int)out.len,
                  out.data);
    json_decref(want);
  }
  stop();
}
END_TEST

START_TEST(replays_of_runs_and_of_records_let_go) {
  evd_config_t cfg;
  evd_table_t *t;

  default_cfg(&cfg);
  cfg.replay_pool = 150; /* room for one small record at most */
  start_with(&cfg);
  /* A prefill and a decode step: runs, kept in the session whatever the
   * pool; resent, they are answered again. */
  expect_ok(POST, "/session/a/step", "{\"positions\":[1,2,3,4,5,6,7,8,9,10]}",
            200, NULL);
  expect_ok(POST, "/session/a/step", "{\"positions\":[1,2,3,4,5,6,7,8,9,10]}",
            200,
            "{\"victims\":[0,1,2],\"slots\":[1,2,3,4,5,6,7,8,0,1],"
            "\"size\":8,\"newest\":10,\"replayed\":true}");
  /* Positions with gaps: not runs, and too big for this pool: let go. */
  expect_ok(POST, "/session/a/step",
            "{\"positions\":[20,30,40,50,60,70,80,90,100,110,120]}", 200,
            NULL);
  expect_error(POST, "/session/a/step",
               "{\"positions\":[20,30,40,50,60,70,80,90,100,110,120]}", 409,
               "replay_unavailable");
  /* Another stale request is still stale, not a lost replay. */
  expect_error(POST, "/session/a/step", "{\"positions\":[20,30]}", 409,
               "stale_position");
  /* A small record with gaps fits the pool and is kept. */
  expect_ok(POST, "/session/a/step", "{\"positions\":[130,140]}", 200,
            NULL);
  expect_ok(POST, "/session/a/step", "{\"positions\":[130,140]}", 200,
            NULL);
  ck_assert(json_is_true(json_object_get(body, "replayed")));
  t = evd_api_table(api);
  ck_assert_uint_le(evd_table_pool(t)->bytes, 150);
  ck_assert_uint_gt(evd_table_pool(t)->let_go + 1, 0);
  stop();
}
END_TEST

void api_engine_tests(TCase *ops) {
  tcase_add_test(ops, replays_of_runs_and_of_records_let_go);
  tcase_add_test(ops, engine_config_fields);
  tcase_add_test(ops, drafts_commit_and_their_refusals);
  tcase_add_test(ops, truncate_forms_and_refusals);
  tcase_add_test(ops, transient_pages_and_their_replay);
  tcase_add_test(ops, fork_forms_and_refusals);
  tcase_add_test(ops, batch_items_with_drafts_and_commits);
}

/* POST /session/{id}/adopt and the precondition expect_newest over real
 * HTTP, on a daemon with a state directory: every answer, every bad input
 * of issue 26 (a 4xx naming the rule, nothing created, the journal not
 * grown), and adopted sessions surviving a restart. */
#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "harness.h"

#define ARGS(...) ((const char *const[]){__VA_ARGS__, NULL})

/* A fresh state directory in dir[0..len). */
static void state_dir(char *dir, size_t len) {
  const char *tmp = access("/dev/shm", W_OK) == 0 ? "/dev/shm" : "/tmp";

  snprintf(dir, len, "%s/evictd-adopt.XXXXXX", tmp);
  ck_assert_ptr_nonnull(mkdtemp(dir));
}

static void rm_state_dir(const char *dir) {
  char path[600];
  struct dirent *e;
  DIR *d = opendir(dir);

  if (d == NULL)
    return;
  while ((e = readdir(d)) != NULL)
    if (e->d_name[0] != '.') {
      snprintf(path, sizeof path, "%s/%s", dir, e->d_name);
      unlink(path);
    }
  closedir(d);
  rmdir(dir);
}

/* The bytes of the journal's segments in dir: what requests appended. */
static long journal_bytes(const char *dir) {
  char path[600];
  struct dirent *e;
  struct stat st;
  long n = 0;
  DIR *d = opendir(dir);

  ck_assert_ptr_nonnull(d);
  while ((e = readdir(d)) != NULL)
    if (strncmp(e->d_name, "journal.", 8) == 0) {
      snprintf(path, sizeof path, "%s/%s", dir, e->d_name);
      if (stat(path, &st) == 0)
        n += (long)st.st_size;
    }
  closedir(d);
  return n;
}

/* Asserts the last error message names the rule: holds `says`. */
static void expect_says(json_t *j, const char *says) {
  const char *m = json_string_value(
      json_object_get(json_object_get(j, "error"), "message"));

  ck_assert_msg(m != NULL && strstr(m, says) != NULL,
                "the message does not say \"%s\": %s", says, ht_dump(j, 0));
}

START_TEST(adopt_answers_and_what_they_journal) {
  static const char a[] =
      "{\"budget\":4,\"sinks\":1,\"kept\":[0,5,9,10],\"newest\":12}";
  char dir[256];
  long bytes;
  json_t *j;
  ht_t t;

  state_dir(dir, sizeof dir);
  ht_up(&t, NULL, ARGS("--state-dir", dir, "--fsync", "always",
                       "--no-autocreate"));
  /* Created (autocreate off does not matter): journaled. */
  bytes = journal_bytes(dir);
  ht_expect(&t, "POST", "/session/x/adopt", a, 201,
            "{\"id\":\"x\",\"budget\":4,\"sinks\":1,\"size\":4,\"newest\":12,"
            "\"kept\":[0,5,9,10],\"slots\":[0,1,2,3]}");
  ck_assert_int_gt(journal_bytes(dir), bytes);
  /* Resent: 200, nothing journaled. */
  bytes = journal_bytes(dir);
  ht_expect(&t, "POST", "/session/x/adopt", a, 200,
            "{\"id\":\"x\",\"budget\":4,\"sinks\":1,\"size\":4,\"newest\":12,"
            "\"kept\":[0,5,9,10],\"slots\":[0,1,2,3]}");
  ck_assert_int_eq(journal_bytes(dir), bytes);
  /* Another state without replace: 409, nothing journaled. */
  j = ht_call(&t, "POST", "/session/x/adopt",
              "{\"budget\":4,\"sinks\":1,\"kept\":[0,5,9,11],\"newest\":12}",
              409);
  ht_check_error(j, 409, "session_exists", 0);
  expect_says(j, "replace");
  json_decref(j);
  ck_assert_int_eq(journal_bytes(dir), bytes);
  /* Replaced: 200 and journaled. */
  ht_expect(&t, "POST", "/session/x/adopt",
            "{\"budget\":6,\"page_size\":4,\"kept\":[2,3,4,20],\"newest\":20,"
            "\"slots\":[2,3,4,5],\"pages\":[0,1,5],\"replace\":true}",
            200,
            "{\"id\":\"x\",\"budget\":6,\"sinks\":0,\"page_size\":4,"
            "\"size\":4,\"newest\":20,\"kept\":[2,3,4,20],"
            "\"slots\":[2,3,4,5],\"pages\":[0,1,5]}");
  ck_assert_int_gt(journal_bytes(dir), bytes);
  /* A restart finds it as it was. */
  ht_down(&t);
  ht_up(&t, NULL, ARGS("--state-dir", dir));
  ht_expect(&t, "GET", "/session/x", NULL, 200,
            "{\"id\":\"x\",\"budget\":6,\"sinks\":0,\"page_size\":4,"
            "\"size\":4,\"newest\":20,\"kept\":[2,3,4,20],"
            "\"slots\":[2,3,4,5],\"pages\":[0,1,5]}");
  ht_down(&t);
  rm_state_dir(dir);
}
END_TEST

/* Issue 26's bad inputs: each a 4xx naming the rule, nothing created,
 * nothing journaled; and the same over an existing session, which stays
 * as it was. */
START_TEST(adopt_bad_inputs_create_and_journal_nothing) {
  static const struct {
    const char *body, *code, *says;
  } bad[] = {
      {"{\"kept\":[0,9,5],\"newest\":9}", "invalid_state", "strictly"},
      {"{\"kept\":[0,5,5],\"newest\":5}", "invalid_state", "repeats"},
      {"{\"budget\":2,\"kept\":[0,1,2],\"newest\":2}", "invalid_state",
       "budget"},
      {"{\"sinks\":2,\"kept\":[3,4],\"newest\":4}", "invalid_state",
       "pins 2 sinks"},
      {"{\"kept\":[0,5],\"newest\":3}", "invalid_state", "below kept[1]"},
      {"{\"page_size\":4,\"kept\":[0,5],\"newest\":5,\"pages\":[0,2]}",
       "invalid_state", "pages"},
      {"{\"kept\":[0,5],\"newest\":5,\"slots\":[0,7]}", "invalid_state",
       "slot"},
      {"{\"kept\":[0,1,2],\"newest\":2,\"slots\":[3,4,5]}", "invalid_state",
       "ring"},
      {"{\"kept\":[0],\"newest\":0,\"budget\":0}", "invalid_budget", ""},
      {"{\"kept\":[0],\"newest\":0,\"extra\":1}", "invalid_field",
       "extra"},
      {"{\"kept\":[0,5]", "invalid_json", ""},
  };
  char dir[256], big[2048], id[140], path[200];
  json_t *before, *j;
  hc_response_t resp;
  hc_conn_t c2;
  long bytes;
  size_t i;
  ht_t t;

  state_dir(dir, sizeof dir);
  ht_up(&t, NULL, ARGS("--state-dir", dir, "--fsync", "always",
                       "--max-body", "1024", "--budget", "8"));
  ht_do(&t, "PUT", "/session/have", "{\"budget\":4}", 201);
  before = ht_view(&t, "have");
  bytes = journal_bytes(dir);
  for (i = 0; i < sizeof bad / sizeof bad[0]; i++) {
    j = ht_call(&t, "POST", "/session/new/adopt", bad[i].body, 400);
    ht_check_error(j, 400, bad[i].code, 0);
    expect_says(j, bad[i].says);
    json_decref(j);
    j = ht_call(&t, "POST", "/session/have/adopt", bad[i].body, 400);
    ht_check_error(j, 400, bad[i].code, 0);
    json_decref(j);
    ht_error(&t, "GET", "/session/new", NULL, 404, "unknown_session");
    j = ht_view(&t, "have");
    ck_assert_msg(json_equal(j, before), "%s changed have: %s", bad[i].body,
                  ht_dump(j, 0));
    json_decref(j);
    ck_assert_msg(journal_bytes(dir) == bytes, "%s grew the journal",
                  bad[i].body);
  }
  /* A session id over the limit. */
  memset(id, 'i', 129);
  id[129] = '\0';
  snprintf(path, sizeof path, "/session/%s/adopt", id);
  ht_error(&t, "POST", path, "{\"kept\":[0],\"newest\":0}", 400,
           "invalid_session_id");
  /* A body over --max-body, on a connection of its own. */
  memset(big, ' ', sizeof big);
  memcpy(big, "{\"kept\":[0],\"newest\":0}", 24);
  ck_assert_int_eq(hc_connect(&c2, t.d.addr, 20), 0);
  if (hc_send(&c2, "POST", "/session/new/adopt", NULL, big, sizeof big, 0) !=
      0)
    ck_abort_msg("the body was not sent");
  ck_assert_int_eq(hc_read_response(&c2, 0, &resp), 0);
  ck_assert_int_eq(resp.status, 413);
  j = json_loads(resp.body, 0, NULL);
  ht_check_error(j, 413, "body_too_large", 0);
  json_decref(j);
  hc_response_free(&resp);
  hc_close(&c2);
  ht_error(&t, "GET", "/session/new", NULL, 404, "unknown_session");
  ck_assert_int_eq(journal_bytes(dir), bytes);
  json_decref(before);
  ht_down(&t);
  rm_state_dir(dir);
}
END_TEST

/* expect_newest over HTTP: a divergence is 409 with the daemon's newest and
 * view, changes and journals nothing; a missing session expected past 0 is
 * 404 (autocreate on) and made of nothing; the rest goes on. */
START_TEST(expect_newest_refuses_divergence) {
  static const struct {
    const char *path, *body;
  } diverged[] = {
      {"/session/a/step", "{\"pos\":20,\"expect_newest\":5}"},
      {"/session/a/commit", "{\"newest\":20,\"expect_newest\":5}"},
      {"/session/a/truncate", "{\"from\":3,\"expect_newest\":5}"},
      {"/session/a/evict", "{\"budget\":2,\"expect_newest\":5}"},
      {"/session/a/fork", "{\"into\":\"b\",\"expect_newest\":5}"},
  };
  char dir[256];
  json_t *before, *j;
  long bytes;
  size_t i;
  ht_t t;

  state_dir(dir, sizeof dir);
  ht_up(&t, NULL, ARGS("--state-dir", dir, "--fsync", "always"));
  ht_do(&t, "PUT", "/session/a", "{\"budget\":4}", 201);
  ht_expect(&t, "POST", "/session/a/step",
            "{\"positions\":[1,2,9],\"expect_newest\":0}", 200,
            "{\"victims\":[],\"slots\":[1,2,3],\"size\":4,\"newest\":9}");
  before = ht_view(&t, "a");
  bytes = journal_bytes(dir);
  for (i = 0; i < sizeof diverged / sizeof diverged[0]; i++) {
    ck_assert_int_eq(ht_error(&t, "POST", diverged[i].path, diverged[i].body,
                              409, "diverged"),
                     9);
    j = ht_view(&t, "a");
    ck_assert_msg(json_equal(j, before), "%s changed the session: %s",
                  diverged[i].path, ht_dump(j, 0));
    json_decref(j);
  }
  ht_error(&t, "GET", "/session/b", NULL, 404, "unknown_session");
  ht_error(&t, "POST", "/session/c/step", "{\"pos\":3,\"expect_newest\":2}",
           404, "unknown_session");
  ht_error(&t, "GET", "/session/c", NULL, 404, "unknown_session");
  ck_assert_int_eq(journal_bytes(dir), bytes);
  /* In a batch, the diverged item fails alone. */
  j = ht_call(&t, "POST", "/step",
              "{\"steps\":[{\"session\":\"a\",\"pos\":10,\"expect_newest\":3},"
              "{\"session\":\"a\",\"pos\":10,\"expect_newest\":9}]}",
              200);
  ht_check_error(json_array_get(json_object_get(j, "results"), 0), 409,
                 "diverged", 1);
  ht_json_eq(json_array_get(json_object_get(j, "results"), 1),
             "{\"victims\":[0],\"slots\":[4],\"size\":4,\"newest\":10}");
  json_decref(j);
  ck_assert_int_gt(journal_bytes(dir), bytes);
  json_decref(before);
  ht_down(&t);
  rm_state_dir(dir);
}
END_TEST

Suite *adopt_suite(void) {
  Suite *s = suite_create("adopt");
  TCase *tc = tcase_create("adopt");

  tcase_set_timeout(tc, 60);
  tcase_add_test(tc, adopt_answers_and_what_they_journal);
  tcase_add_test(tc, adopt_bad_inputs_create_and_journal_nothing);
  tcase_add_test(tc, expect_newest_refuses_divergence);
  suite_add_tcase(s, tc);
  return s;
}

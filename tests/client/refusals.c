/* What the C client refuses before sending (URLs, options, arguments) and
 * the daemon's refusals of session configurations and ids as the client
 * reports them. Part of the "client" suite. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "common.h"

START_TEST(create_config_errors) {
  static const struct {
    evd_session_cfg_t cfg;
    const char *code;
  } bad[] = {{{0, -1, -1, -1}, "invalid_budget"},
             {{5, 5, -1, -1}, "invalid_sinks"},
             {{5, -1, 0, -1}, "invalid_lookahead"},
             {{5, -1, -1, 70000}, "invalid_page_size"}};
  evd_client_t *c;
  evd_step_t s;
  evd_view_t v;
  uint32_t one = 1;
  char longid[200];
  size_t i;

  tc_start(NULL);
  c = tc_client(NULL, 0);
  for (i = 0; i < sizeof bad / sizeof bad[0]; i++) {
    tc_expect_err(c, evd_client_create(c, "x", &bad[i].cfg, &v),
                  EVD_CLIENT_EAPI, bad[i].code, 400);
    s = tc_step("x", &one, 1);
    s.create = &bad[i].cfg;
    tc_expect_err(c, evd_client_step(c, &s, NULL), EVD_CLIENT_EAPI,
                  bad[i].code, 400);
  }
  /* Ids the daemon refuses: escaped on the way, never another path. */
  tc_expect_err(c, evd_client_create(c, "a/b", NULL, &v), EVD_CLIENT_EAPI,
                "invalid_session_id", 400);
  tc_expect_err(c, evd_client_get(c, "a?b", &v), EVD_CLIENT_EAPI,
                "invalid_session_id", 400);
  memset(longid, 'a', 129);
  longid[129] = '\0';
  tc_expect_err(c, evd_client_get(c, longid, &v), EVD_CLIENT_EAPI,
                "invalid_session_id", 400);
  /* "." and ".." are ids like others (no dot segments folded). */
  s = tc_step("..", &one, 1);
  ck_assert_int_eq(evd_client_step(c, &s, NULL), 0);
  ck_assert_int_eq(evd_client_get(c, "..", &v), 0);
  ck_assert_str_eq(v.id, "..");
  ck_assert_int_eq(evd_client_get(c, ".", &v), EVD_CLIENT_EAPI);
  /* An id too long for the HTTP layer's 8 KiB: libmicrohttpd's own HTML
   * answer, which is not the contract's JSON. */
  {
    char *huge = malloc(10001);
    memset(huge, 'h', 10000);
    huge[10000] = '\0';
    int rc = evd_client_get(c, huge, &v);
    tc_expect_err(c, rc, EVD_CLIENT_EPROTO, "protocol_error",
                  evd_client_error(c)->status);
    ck_assert_int_ge(evd_client_error(c)->status, 414);
    free(huge);
  }
  evd_client_free(c);
  tc_stop();
}
END_TEST

START_TEST(bad_arguments_are_refused_before_sending) {
  static const char *const bad_urls[] = {"ftp://x", "unix:", "http://",
                                         "http://h:1/?q=1", "http://u@h:1"};
  evd_client_opts_t o = {0};
  evd_client_t *c = NULL;
  evd_client_stats_t st;
  evd_step_t s = {0};
  uint32_t one = 1;
  char err[256];
  size_t i;

  for (i = 0; i < sizeof bad_urls / sizeof bad_urls[0]; i++) {
    o.url = bad_urls[i];
    ck_assert_int_eq(evd_client_new(&c, &o, err, sizeof err),
                     EVD_CLIENT_EINVAL);
    ck_assert_ptr_null(c);
    ck_assert_msg(strstr(err, bad_urls[i]) != NULL, "%s", err);
  }
  o.url = "http://127.0.0.1:1";
  o.cafile = "/etc/hostname";
  ck_assert_int_eq(evd_client_new(&c, &o, err, sizeof err),
                   EVD_CLIENT_EINVAL);
  o.cafile = NULL;
  o.token_file = "/nonexistent/token";
  ck_assert_int_eq(evd_client_new(&c, &o, NULL, 0), EVD_CLIENT_EINVAL);
  o.token_file = NULL;
  o.token = "two words";
  ck_assert_int_eq(evd_client_new(&c, &o, err, sizeof err),
                   EVD_CLIENT_EINVAL);
  ck_assert_int_eq(evd_client_new(NULL, &o, NULL, 0), EVD_CLIENT_EINVAL);
  /* $EVICTD_URL when opts has no url; a port where nothing listens. */
  setenv("EVICTD_URL", "127.0.0.1:1", 1);
  ck_assert_int_eq(evd_client_new(&c, NULL, err, sizeof err), 0);
  unsetenv("EVICTD_URL");
  s.session = "x";
  tc_expect_err(c, evd_client_step(c, &s, NULL), EVD_CLIENT_EINVAL,
                "invalid_argument", 0);
  s.n_positions = 1;
  tc_expect_err(c, evd_client_step(c, &s, NULL), EVD_CLIENT_EINVAL,
                "invalid_argument", 0);
  s.positions = &one;
  s.session = NULL;
  tc_expect_err(c, evd_client_step(c, &s, NULL), EVD_CLIENT_EINVAL,
                "invalid_argument", 0);
  tc_expect_err(c, evd_client_step(c, NULL, NULL), EVD_CLIENT_EINVAL,
                "invalid_argument", 0);
  tc_expect_err(c, evd_client_get(c, NULL, NULL), EVD_CLIENT_EINVAL,
                "invalid_argument", 0);
  tc_expect_err(c, evd_client_fork(c, "a", NULL, NULL), EVD_CLIENT_EINVAL,
                "invalid_argument", 0);
  tc_expect_err(c, evd_client_batch(c, NULL, 2, NULL), EVD_CLIENT_EINVAL,
                "invalid_argument", 0);
  evd_client_stats(c, &st);
  ck_assert_int_eq(st.connections, 0);
  ck_assert_int_eq(st.requests, 0);
  for (i = 0; i < 8; i++)
    ck_assert_ptr_nonnull(evd_client_strerror(-(int)i));
  ck_assert_str_eq(evd_client_strerror(EVD_CLIENT_EAPI),
                   "the daemon answered with an error");
  ck_assert_ptr_nonnull(evd_client_strerror(42));
  evd_client_free(c);
  evd_client_free(NULL);
}
END_TEST

/* Adds this file's tests to the "daemon" case, in this order. */
void tc_add_refusal_tests(TCase *tc) {
  tcase_add_test(tc, create_config_errors);
  tcase_add_test(tc, bad_arguments_are_refused_before_sending);
}

/* The state files, below the daemon: record.c (ops to bytes and back),
 * journal.c (recovery: torn tails cut, damage refused, adoptions,
 * sessions above --max-budget left out) and snapshot.c (write and load),
 * each driven through its public header alone. */
#include <check.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "check_main.h"
#include "state_files.h"

static char dir[512];
static evd_buf_t seg;

static void setup(void) {
  ck_assert_int_eq(sf_mkdtemp(dir, sizeof dir), 0);
  evd_buf_init(&seg);
}

static void teardown(void) {
  evd_buf_free(&seg);
  sf_rmtree(dir);
}

/* ---- record.c ----------------------------------------------------------- */

/* What an apply callback saw: the ops, copied. */
typedef struct {
  int n;
  evd_op_t ops[4];
  char ids[4][2][EVD_SESSION_ID_MAX + 1];
  uint32_t pos[4][16], slots[4][16];
} seen_t;

static int capture(void *ctx, const evd_op_t *op) {
  seen_t *s = ctx;
  evd_op_t *o;

  ck_assert_int_lt(s->n, 4);
  o = &s->ops[s->n];
  *o = *op;
  memcpy(s->ids[s->n][0], op->id, op->idlen);
  o->id = s->ids[s->n][0];
  if (op->type == EVD_OP_FORK) {
    memcpy(s->ids[s->n][1], op->child, op->childlen);
    o->child = s->ids[s->n][1];
  }
  ck_assert_uint_le(op->n, 16);
  if (op->n > 0)
    memcpy(s->pos[s->n], op->positions, 4 * (size_t)op->n);
  o->positions = s->pos[s->n];
  if (op->type == EVD_OP_ADOPT) {
    if (op->n > 0)
      memcpy(s->slots[s->n], op->slots, 4 * (size_t)op->n);
    o->slots = s->slots[s->n];
  }
  s->n++;
  return 0;
}

static int decode(const evd_buf_t *b, int version, seen_t *s) {
  memset(s, 0, sizeof *s);
  return sf_decode(b->data, b->len, version, capture, s);
}

static void assert_same_op(const evd_op_t *a, const evd_op_t *b) {
  ck_assert_int_eq(a->type, b->type);
  ck_assert_uint_eq(a->idlen, b->idlen);
  ck_assert(memcmp(a->id, b->id, a->idlen) == 0);
  switch (a->type) {
  case EVD_OP_CREATE2:
    ck_assert(memcmp(&a->cfg, &b->cfg, sizeof a->cfg) == 0);
    break;
  case EVD_OP_STEP2:
    ck_assert_uint_eq(a->flags, b->flags);
    ck_assert_uint_eq(a->arg, b->arg);
    ck_assert_uint_eq(a->n, b->n);
    ck_assert(a->n == 0 ||
              memcmp(a->positions, b->positions, 4 * (size_t)a->n) == 0);
    break;
  case EVD_OP_EVICT:
    ck_assert_uint_eq(a->budget, b->budget);
    break;
  case EVD_OP_COMMIT:
  case EVD_OP_TRUNCATE:
    ck_assert_uint_eq(a->arg, b->arg);
    break;
  case EVD_OP_FORK:
    ck_assert_uint_eq(a->childlen, b->childlen);
    ck_assert(memcmp(a->child, b->child, a->childlen) == 0);
    break;
  case EVD_OP_ADOPT:
    ck_assert(memcmp(&a->cfg, &b->cfg, sizeof a->cfg) == 0);
    ck_assert_uint_eq(a->flags, b->flags);
    ck_assert_uint_eq(a->arg, b->arg);
    ck_assert_uint_eq(a->n, b->n);
    ck_assert(memcmp(a->positions, b->positions, 4 * (size_t)a->n) == 0);
    ck_assert(memcmp(a->slots, b->slots, 4 * (size_t)a->n) == 0);
    break;
  default:
    break;
  }
}

/* Every op of the story, alone and as its record's batch, decodes to what
 * was encoded. */
START_TEST(record_round_trip_of_every_op) {
  evd_op_t ops[2];
  seen_t s;
  int k;
  size_t n, i;

  for (k = 0; k < SF_STORY; k++) {
    n = sf_story_ops(k, ops);
    evd_buf_reset(&seg, 0);
    for (i = 0; i < n; i++)
      evd_record_put_op(&seg, &ops[i]);
    ck_assert_int_eq(decode(&seg, 2, &s), 0);
    ck_assert_int_eq(s.n, (int)n);
    for (i = 0; i < n; i++)
      assert_same_op(&ops[i], &s.ops[i]);
  }
}
END_TEST

/* Version 1's ops (CREATE, STEP) decode in a version 1 segment. */
START_TEST(record_round_trip_of_version_1_ops) {
  static const uint32_t pos[] = {1, 2};
  evd_op_t c = {.type = EVD_OP_CREATE, .id = "v1", .idlen = 2,
                .cfg = {5, 1, 1, 0}};
  evd_op_t st = {.type = EVD_OP_STEP, .id = "v1", .idlen = 2,
                 .positions = pos, .n = 2};
  seen_t s;

  evd_record_put_op(&seg, &c);
  evd_record_put_op(&seg, &st);
  ck_assert_int_eq(decode(&seg, 1, &s), 0);
  ck_assert_int_eq(s.n, 2);
  assert_same_op(&st, &s.ops[1]);
  ck_assert_uint_eq(s.ops[0].cfg.budget, 5);
  ck_assert_uint_eq(s.ops[0].cfg.sinks, 1);
  ck_assert_uint_eq(s.ops[0].cfg.lookahead, 1); /* version 1's implied */
}
END_TEST

/* Every proper prefix of a one-op payload is refused, none applies. */
START_TEST(record_refuses_truncated_ops) {
  evd_op_t ops[2];
  evd_buf_t cut;
  seen_t s;
  size_t len;
  int k;

  evd_buf_init(&cut);
  for (k = 0; k < SF_STORY; k++) {
    if (sf_story_ops(k, ops) != 1)
      continue;
    evd_buf_reset(&seg, 0);
    evd_record_put_op(&seg, &ops[0]);
    for (len = 1; len < seg.len; len++) {
      evd_buf_reset(&cut, 0);
      evd_buf_add(&cut, seg.data, len);
      ck_assert_msg(decode(&cut, 2, &s) == EVD_ECORRUPT && s.n == 0,
                    "record %d cut at %zu of %zu decodes", k, len, seg.len);
    }
  }
  evd_buf_free(&cut);
}
END_TEST

/* Unknown op types, version 2 ops in a version 1 segment, bad ids and
 * unknown step flags are refused. */
START_TEST(record_refuses_unknown_types_and_fields) {
  static const unsigned char types[] = {0, 12, 99, 255};
  evd_op_t op = sf_create("a", 4, 0, 1, 0);
  seen_t s;
  size_t i;

  for (i = 0; i < sizeof types; i++) {
    evd_buf_reset(&seg, 0);
    evd_record_put_op(&seg, &op);
    seg.data[0] = (char)types[i];
    ck_assert_int_eq(decode(&seg, 2, &s), EVD_ECORRUPT);
  }
  evd_buf_reset(&seg, 0);
  evd_record_put_op(&seg, &op); /* CREATE2 */
  ck_assert_int_eq(decode(&seg, 1, &s), EVD_ECORRUPT);

  evd_buf_reset(&seg, 0);
  op = sf_create("a b", 4, 0, 1, 0); /* a space is not an id byte */
  evd_record_put_op(&seg, &op);
  ck_assert_int_eq(decode(&seg, 2, &s), EVD_ECORRUPT);

  evd_buf_reset(&seg, 0);
  op = sf_step("a", 8, 0, sf_p123, 3); /* flag 8 does not exist */
  evd_record_put_op(&seg, &op);
  ck_assert_int_eq(decode(&seg, 2, &s), EVD_ECORRUPT);

  evd_buf_reset(&seg, 0);
  op = sf_step("a", 0, 0, NULL, 0); /* a plain step of nothing */
  evd_record_put_op(&seg, &op);
  ck_assert_int_eq(decode(&seg, 2, &s), EVD_ECORRUPT);
}
END_TEST

/* ---- journal.c: recovery -------------------------------------------------- */

/* The state the story's records [0, k) make, applied directly. */
static evd_api_t *story_state(int k) {
  evd_api_t *api = sf_api();

  ck_assert_ptr_nonnull(api);
  ck_assert_int_eq(sf_story_apply(api, k), 0);
  return api;
}

/* Opens dir into a fresh API: the error, and the API (freed by the caller)
 * with the journal closed (which snapshots it) when it opened. */
static int recover(evd_api_t **out, char *why, size_t len) {
  evd_journal_t *j = NULL;
  evd_api_t *api = sf_api();
  int err;

  ck_assert_ptr_nonnull(api);
  err = sf_open(dir, api, &j, why, len);
  if (err == 0) {
    ck_assert_ptr_null(sf_table_bad(evd_api_table(api)));
    ck_assert_int_eq(evd_journal_close(j, evd_api_table(api)), 0);
  }
  *out = api;
  return err;
}

static void assert_state_is_story(evd_api_t *api, int k) {
  evd_api_t *want = story_state(k);

  ck_assert_msg(sf_same_tables(evd_api_table(api), evd_api_table(want)),
                "recovered state is not the first %d records'", k);
  evd_api_free(want);
}

START_TEST(journal_recovers_every_record) {
  char why[256];
  evd_api_t *api;

  sf_segment(&seg, 2);
  sf_story(&seg, 0, SF_STORY);
  ck_assert_int_eq(sf_put(dir, "journal.00000001", seg.data, seg.len), 0);
  ck_assert_int_eq(recover(&api, why, sizeof why), 0);
  ck_assert_uint_eq(evd_table_count(evd_api_table(api)), 4); /* a b c d */
  ck_assert_ptr_null(evd_table_find(evd_api_table(api), "gone", 4));
  assert_state_is_story(api, SF_STORY);
  evd_api_free(api);

  /* The close wrote a snapshot and removed the segment: again, from it. */
  ck_assert_int_eq(recover(&api, why, sizeof why), 0);
  assert_state_is_story(api, SF_STORY);
  evd_api_free(api);
}
END_TEST

/* Records split over two segments recover as one journal. */
START_TEST(journal_recovers_across_segments) {
  char why[256];
  evd_api_t *api;

  sf_segment(&seg, 2);
  sf_story(&seg, 0, 5);
  ck_assert_int_eq(sf_put(dir, "journal.00000001", seg.data, seg.len), 0);
  evd_buf_reset(&seg, 0);
  sf_segment(&seg, 2);
  sf_story(&seg, 5, SF_STORY);
  ck_assert_int_eq(sf_put(dir, "journal.00000002", seg.data, seg.len), 0);
  ck_assert_int_eq(recover(&api, why, sizeof why), 0);
  assert_state_is_story(api, SF_STORY);
  evd_api_free(api);
}
END_TEST

/* A last record cut anywhere (a crash mid-write) is dropped and cut off
 * the file; recovery ends at the record before it. */
START_TEST(journal_cuts_a_torn_tail) {
  char why[256];
  evd_api_t *api;
  size_t good, cut;
  evd_buf_t back;
  struct stat st;
  char path[600];

  evd_buf_init(&back);
  sf_segment(&seg, 2);
  sf_story(&seg, 0, SF_STORY - 1);
  good = seg.len;
  sf_story(&seg, SF_STORY - 1, SF_STORY);
  for (cut = good + 1; cut < seg.len; cut++) {
    sf_rmtree(dir);
    ck_assert_int_eq(mkdir(dir, 0700), 0);
    ck_assert_int_eq(sf_put(dir, "journal.00000001", seg.data, cut), 0);
    /* Open and keep the files: the torn segment is cut on disk. */
    api = sf_api();
    {
      evd_journal_t *j;
      ck_assert_int_eq(sf_open(dir, api, &j, why, sizeof why), 0);
      snprintf(path, sizeof path, "%s/journal.00000001", dir);
      ck_assert_int_eq(stat(path, &st), 0);
      ck_assert_uint_eq((size_t)st.st_size, good);
      assert_state_is_story(api, SF_STORY - 1);
      ck_assert_int_eq(evd_journal_close(j, evd_api_table(api)), 0);
    }
    evd_api_free(api);
  }
  evd_buf_free(&back);
}
END_TEST

/* A bad checksum on the last record is a torn tail; on any other, the file
 * is damaged in the middle and recovery refuses it. */
START_TEST(journal_bad_crc_last_dropped_middle_refused) {
  char why[256];
  evd_api_t *api;
  size_t third;

  sf_segment(&seg, 2);
  sf_story(&seg, 0, 2);
  third = seg.len;
  sf_story(&seg, 2, SF_STORY);
  seg.data[seg.len - 1] ^= 0x01; /* the last record's CRC */
  ck_assert_int_eq(sf_put(dir, "journal.00000001", seg.data, seg.len), 0);
  ck_assert_int_eq(recover(&api, why, sizeof why), 0);
  assert_state_is_story(api, SF_STORY - 1);
  evd_api_free(api);

  sf_rmtree(dir);
  ck_assert_int_eq(mkdir(dir, 0700), 0);
  seg.data[seg.len - 1] ^= 0x01;
  seg.data[third + SF_REC_HDR] ^= 0x40; /* the third record's payload */
  ck_assert_int_eq(sf_put(dir, "journal.00000001", seg.data, seg.len), 0);
  ck_assert_int_eq(recover(&api, why, sizeof why), EVD_ECORRUPT);
  ck_assert_msg(strstr(why, "damaged") != NULL, "why: %s", why);
  evd_api_free(api);
}
END_TEST

/* Foreign files, missing records and records out of order are refused. */
START_TEST(journal_refuses_foreign_and_gapped_files) {
  evd_op_t ops[2];
  char why[256];
  evd_api_t *api;

  ck_assert_int_eq(sf_put(dir, "journal.00000001", "EVDJRNL9xxxxxxxx", 16), 0);
  ck_assert_int_eq(recover(&api, why, sizeof why), EVD_ECORRUPT);
  evd_api_free(api);

  /* LSN 1, then 3. */
  sf_segment(&seg, 2);
  sf_record(&seg, 1, ops, sf_story_ops(0, ops));
  sf_record(&seg, 3, ops, sf_story_ops(1, ops));
  sf_record(&seg, 4, ops, sf_story_ops(2, ops));
  ck_assert_int_eq(sf_put(dir, "journal.00000001", seg.data, seg.len), 0);
  ck_assert_int_eq(recover(&api, why, sizeof why), EVD_ECORRUPT);
  ck_assert_msg(strstr(why, "missing or out of order") != NULL, "why: %s",
                why);
  evd_api_free(api);

  /* A well-framed record that does not apply (a step of no session). */
  evd_buf_reset(&seg, 0);
  sf_segment(&seg, 2);
  sf_record(&seg, 1, ops, sf_story_ops(1, ops));
  ck_assert_int_eq(sf_put(dir, "journal.00000001", seg.data, seg.len), 0);
  ck_assert_int_eq(recover(&api, why, sizeof why), EVD_ECORRUPT);
  evd_api_free(api);
}
END_TEST

/* Found by fuzz_journal: a CREATE2 with a page size the daemon never
 * takes reached the session table's assert and aborted start-up; it is
 * a corrupt record, and a journal holding one is refused. */
START_TEST(record_refuses_a_page_size_past_the_limit) {
  evd_op_t op = sf_create("a", 4, 0, 1, EVD_MAX_PAGE_SIZE + 1);
  evd_op_t ok = sf_create("a", 4, 0, 1, EVD_MAX_PAGE_SIZE);
  char why[256];
  evd_api_t *api;
  seen_t s;

  evd_buf_reset(&seg, 0);
  evd_record_put_op(&seg, &op);
  ck_assert_int_eq(decode(&seg, 2, &s), EVD_ECORRUPT);
  evd_buf_reset(&seg, 0);
  evd_record_put_op(&seg, &ok);
  ck_assert_int_eq(decode(&seg, 2, &s), 0);

  evd_buf_reset(&seg, 0);
  sf_segment(&seg, 2);
  sf_record(&seg, 1, &op, 1);
  ck_assert_int_eq(sf_put(dir, "journal.00000001", seg.data, seg.len), 0);
  ck_assert_int_eq(recover(&api, why, sizeof why), EVD_ECORRUPT);
  evd_api_free(api);
}
END_TEST

/* 1 when api's session id holds kept[0..n) in slots[0..n) with that
 * newest and budget, and no drafts. */
static int holds(evd_api_t *api, const char *id, uint32_t budget,
                 const uint32_t *kept, const uint32_t *slots, uint32_t n,
                 uint32_t newest) {
  evd_session_t *s = evd_table_find(evd_api_table(api), id, strlen(id));
  evd_window_state_t st = {kept, slots, n, newest};

  return s != NULL && evd_session_window(s)->budget == budget &&
         evd_window_is_state(evd_session_window(s), &st);
}

/* Adoptions recover to the states they name, in their slots; an adoption
 * of a state no window reaches, a replacement of a session that is not
 * there and a creation of one that is do not replay. */
START_TEST(journal_recovers_adoptions) {
  static const uint32_t bad[] = {0, 5, 5}, turned[] = {0, 3, 1};
  evd_op_t op;
  char why[256];
  evd_api_t *api;
  int k;

  sf_segment(&seg, 2);
  sf_story(&seg, 0, SF_STORY);
  ck_assert_int_eq(sf_put(dir, "journal.00000001", seg.data, seg.len), 0);
  ck_assert_int_eq(recover(&api, why, sizeof why), 0);
  ck_assert(holds(api, "d", 4, sf_d_kept, sf_d_slots, 3, 11));
  ck_assert(holds(api, "b", 6, sf_b_kept, sf_b_slots, 3, 8));
  evd_api_free(api);
  for (k = 0; k < 4; k++) {
    switch (k) {
    case 0: /* kept repeats a position */
      op = sf_adopt("e", 0, (evd_session_config_t){4, 1, 1, 0}, bad,
                    sf_d_slots, 3, 11);
      break;
    case 1: /* the ring turned further than the positions allow */
      op = sf_adopt("e", 0, (evd_session_config_t){4, 1, 1, 0}, sf_d_kept,
                    turned, 3, 11);
      break;
    case 2: /* a replacement of a session that is not there */
      op = sf_adopt("e", EVD_OP_REPLACED, (evd_session_config_t){4, 1, 1, 0},
                    sf_d_kept, sf_d_slots, 3, 11);
      break;
    default: /* a creation of one that is */
      op = sf_adopt("a", 0, (evd_session_config_t){4, 1, 1, 0}, sf_d_kept,
                    sf_d_slots, 3, 11);
      break;
    }
    sf_rmtree(dir);
    ck_assert_int_eq(mkdir(dir, 0700), 0);
    evd_buf_reset(&seg, 0);
    sf_segment(&seg, 2);
    sf_story(&seg, 0, 1); /* a exists */
    sf_record(&seg, 2, &op, 1);
    ck_assert_int_eq(sf_put(dir, "journal.00000001", seg.data, seg.len), 0);
    ck_assert_msg(recover(&api, why, sizeof why) == EVD_ECORRUPT,
                  "bad adoption %d replayed", k);
    evd_api_free(api);
  }
}
END_TEST

/* A session created above --max-budget is left out, with what the journal
 * does to it and to its forks, and the others are recovered; deleted, its
 * id may be made again. Making again a session that is left out, but for
 * a replacement, does not replay (it still exists). */
START_TEST(journal_leaves_out_sessions_above_max_budget) {
  static const uint32_t p5[] = {5}, p9[] = {9};
  evd_op_t ops[] = {
      sf_create("big", SF_MAX_BUDGET + 1, 0, 1, 0),
      sf_create("ok", 8, 0, 1, 0),
      sf_step("big", 0, 0, p5, 1),
      sf_fork("big", "kid"),
      sf_step("kid", 0, 0, p9, 1),
      sf_step("ok", 0, 0, p5, 1),
      sf_adopt("huge", 0, (evd_session_config_t){4000000000u, 0, 1, 0},
               sf_b_kept, sf_b_slots, 3, 8),
      sf_op(EVD_OP_DELETE, "big", 0),
      sf_create("big", 4, 0, 1, 0),
      sf_adopt("huge", EVD_OP_REPLACED, (evd_session_config_t){4, 1, 1, 0},
               sf_d_kept, sf_d_slots, 3, 11)};
  size_t n = sizeof ops / sizeof ops[0], i;
  evd_session_t *s;
  evd_op_t again;
  char why[256];
  evd_api_t *api;

  sf_segment(&seg, 2);
  for (i = 0; i < n; i++)
    sf_record(&seg, i + 1, &ops[i], 1);
  ck_assert_int_eq(sf_put(dir, "journal.00000001", seg.data, seg.len), 0);
  ck_assert_int_eq(recover(&api, why, sizeof why), 0);
  ck_assert_uint_eq(evd_table_count(evd_api_table(api)), 3);
  s = evd_table_find(evd_api_table(api), "ok", 2);
  ck_assert_ptr_nonnull(s);
  ck_assert_uint_eq(evd_window_newest(evd_session_window(s)), 5);
  s = evd_table_find(evd_api_table(api), "big", 3); /* the new one */
  ck_assert_ptr_nonnull(s);
  ck_assert_uint_eq(evd_session_window(s)->budget, 4);
  ck_assert_uint_eq(evd_window_newest(evd_session_window(s)), 0);
  ck_assert_ptr_null(evd_table_find(evd_api_table(api), "kid", 3));
  ck_assert(holds(api, "huge", 4, sf_d_kept, sf_d_slots, 3, 11));
  evd_api_free(api);
  /* The close wrote a snapshot without them: they are gone for good. */
  ck_assert_int_eq(recover(&api, why, sizeof why), 0);
  ck_assert_uint_eq(evd_table_count(evd_api_table(api)), 3);
  evd_api_free(api);

  /* A session left out, created again without a delete between. */
  sf_rmtree(dir);
  ck_assert_int_eq(mkdir(dir, 0700), 0);
  evd_buf_reset(&seg, 0);
  sf_segment(&seg, 2);
  sf_record(&seg, 1, &ops[0], 1);
  again = sf_create("big", 4, 0, 1, 0);
  sf_record(&seg, 2, &again, 1);
  ck_assert_int_eq(sf_put(dir, "journal.00000001", seg.data, seg.len), 0);
  ck_assert_int_eq(recover(&api, why, sizeof why), EVD_ECORRUPT);
  evd_api_free(api);
}
END_TEST

/* ---- snapshot.c ------------------------------------------------------------- */

START_TEST(snapshot_round_trip) {
  evd_api_t *api = story_state(SF_STORY);
  evd_table_t *t;
  uint64_t lsn = 0;
  char why[256];
  int dirfd = open(dir, O_RDONLY | O_DIRECTORY);

  ck_assert_int_ge(dirfd, 0);
  ck_assert_int_eq(evd_table_new(&t, 1000, 1 << 20), 0);
  ck_assert_int_eq(sf_snapshot_load(dirfd, t, &lsn, why, sizeof why),
                   EVD_ENOENT);
  ck_assert_int_eq(sf_snapshot_write(dirfd, evd_api_table(api), 42), 0);
  ck_assert_int_eq(sf_snapshot_load(dirfd, t, &lsn, why, sizeof why), 0);
  ck_assert_uint_eq(lsn, 42);
  ck_assert(sf_same_tables(evd_api_table(api), t));
  ck_assert_ptr_null(sf_table_bad(t));
  evd_table_free(t);
  evd_api_free(api);
  close(dirfd);
}
END_TEST

/* Every cut and every single-bit flip (one bit per byte, each byte) of a
 * snapshot is refused as corrupt, and leaves the table empty. */
START_TEST(snapshot_refuses_damage) {
  evd_api_t *api = story_state(SF_STORY);
  evd_buf_t good, bad;
  evd_table_t *t;
  uint64_t lsn;
  char why[256];
  size_t i;
  int dirfd = open(dir, O_RDONLY | O_DIRECTORY), err;

  ck_assert_int_ge(dirfd, 0);
  evd_buf_init(&good);
  evd_buf_init(&bad);
  ck_assert_int_eq(sf_snapshot_write(dirfd, evd_api_table(api), 7), 0);
  ck_assert_int_eq(sf_get(dir, "snapshot", &good), 0);
  for (i = 0; i < 2 * good.len; i++) {
    evd_buf_reset(&bad, 0);
    if (i < good.len) {
      if (i > 0) /* (evd_buf_add of nothing to an empty buffer: NULL + 0) */
        evd_buf_add(&bad, good.data, i); /* cut at i */
    } else {
      evd_buf_add(&bad, good.data, good.len);
      bad.data[i - good.len] ^= (char)(1u << (i % 8));
    }
    ck_assert_int_eq(sf_put(dir, "snapshot", bad.data, bad.len), 0);
    ck_assert_int_eq(evd_table_new(&t, 1000, 1 << 20), 0);
    err = sf_snapshot_load(dirfd, t, &lsn, why, sizeof why);
    ck_assert_msg(err == EVD_ECORRUPT,
                  "%s at byte %zu of %zu: load returned %d", i < good.len
                  ? "cut" : "bit flip", i % good.len, good.len, err);
    ck_assert_msg(why[0] != '\0', "refused without a reason");
    evd_table_free(t);
  }
  evd_buf_free(&good);
  evd_buf_free(&bad);
  evd_api_free(api);
  close(dirfd);
}
END_TEST

/* A snapshot plus the journal records after it recover as one history;
 * records the snapshot covers are skipped, not applied twice. */
START_TEST(snapshot_then_journal) {
  evd_api_t *api = story_state(6), *got;
  char why[256];
  int dirfd = open(dir, O_RDONLY | O_DIRECTORY);

  ck_assert_int_ge(dirfd, 0);
  ck_assert_int_eq(sf_snapshot_write(dirfd, evd_api_table(api), 6), 0);
  sf_segment(&seg, 2);
  sf_story(&seg, 3, SF_STORY); /* LSNs 4..12: 4..6 are in the snapshot */
  ck_assert_int_eq(sf_put(dir, "journal.00000002", seg.data, seg.len), 0);
  ck_assert_int_eq(recover(&got, why, sizeof why), 0);
  assert_state_is_story(got, SF_STORY);
  evd_api_free(got);
  evd_api_free(api);
  close(dirfd);
}
END_TEST

/* Sessions above --max-budget in a snapshot are left out before their
 * rings are allocated, each named in the log, and so is what the journal
 * after it does to them; the other sessions load. */
START_TEST(snapshot_leaves_out_sessions_above_max_budget) {
  static const uint32_t p5[] = {5};
  evd_op_t made[] = {sf_create("ok", 8, 0, 1, 0),
                     sf_create("big", SF_MAX_BUDGET + 1, 1, 1, 0),
                     sf_create("big2", 2 * SF_MAX_BUDGET, 0, 3, 4)};
  evd_op_t after[] = {sf_step("big", 0, 0, p5, 1), sf_step("ok", 0, 0, p5, 1),
                      sf_fork("big", "kid"), sf_op(EVD_OP_DELETE, "big2", 0),
                      sf_create("big2", 4, 0, 1, 0)};
  evd_api_t *api = sf_api(), *got;
  evd_buf_t p;
  evd_session_t *s;
  char why[256];
  size_t i;
  int dirfd = open(dir, O_RDONLY | O_DIRECTORY);

  ck_assert_int_ge(dirfd, 0);
  ck_assert_ptr_nonnull(api);
  evd_buf_init(&p);
  for (i = 0; i < 3; i++) {
    evd_buf_reset(&p, 0);
    evd_record_put_op(&p, &made[i]);
    ck_assert_int_eq(sf_apply_payload(api, p.data, p.len, 2), 0);
  }
  evd_buf_free(&p);
  ck_assert_int_eq(sf_snapshot_write(dirfd, evd_api_table(api), 3), 0);
  sf_segment(&seg, 2);
  for (i = 0; i < 5; i++)
    sf_record(&seg, 4 + i, &after[i], 1);
  ck_assert_int_eq(sf_put(dir, "journal.00000002", seg.data, seg.len), 0);
  ck_assert_int_eq(recover(&got, why, sizeof why), 0);
  ck_assert_uint_eq(evd_table_count(evd_api_table(got)), 2);
  s = evd_table_find(evd_api_table(got), "ok", 2);
  ck_assert_ptr_nonnull(s);
  ck_assert_uint_eq(evd_window_newest(evd_session_window(s)), 5);
  s = evd_table_find(evd_api_table(got), "big2", 4);
  ck_assert_ptr_nonnull(s);
  ck_assert_uint_eq(evd_session_window(s)->budget, 4);
  ck_assert_ptr_null(evd_table_find(evd_api_table(got), "big", 3));
  ck_assert_ptr_null(evd_table_find(evd_api_table(got), "kid", 3));
  evd_api_free(got);
  evd_api_free(api);
  close(dirfd);
}
END_TEST

static Suite *state_suite(void) {
  Suite *s = suite_create("state");
  TCase *rec = tcase_create("record"), *jr = tcase_create("journal"),
        *snap = tcase_create("snapshot");

  tcase_add_checked_fixture(rec, setup, teardown);
  tcase_add_test(rec, record_round_trip_of_every_op);
  tcase_add_test(rec, record_round_trip_of_version_1_ops);
  tcase_add_test(rec, record_refuses_truncated_ops);
  tcase_add_test(rec, record_refuses_unknown_types_and_fields);
  suite_add_tcase(s, rec);
  tcase_add_checked_fixture(jr, setup, teardown);
  tcase_set_timeout(jr, 60);
  tcase_add_test(jr, journal_recovers_every_record);
  tcase_add_test(jr, journal_recovers_across_segments);
  tcase_add_test(jr, journal_cuts_a_torn_tail);
  tcase_add_test(jr, journal_bad_crc_last_dropped_middle_refused);
  tcase_add_test(jr, journal_refuses_foreign_and_gapped_files);
  tcase_add_test(jr, record_refuses_a_page_size_past_the_limit);
  tcase_add_test(jr, journal_recovers_adoptions);
  tcase_add_test(jr, journal_leaves_out_sessions_above_max_budget);
  suite_add_tcase(s, jr);
  tcase_add_checked_fixture(snap, setup, teardown);
  tcase_set_timeout(snap, 60);
  tcase_add_test(snap, snapshot_round_trip);
  tcase_add_test(snap, snapshot_refuses_damage);
  tcase_add_test(snap, snapshot_then_journal);
  tcase_add_test(snap, snapshot_leaves_out_sessions_above_max_budget);
  suite_add_tcase(s, snap);
  return s;
}

EVD_CHECK_MAIN(state_suite())

/* libFuzzer target for snapshots (snapshot.c's format), under ASan and
 * UBSan: each input is one snapshot file, loaded by evd_snapshot_load into
 * an empty table with a --max-budget of MAX_BUDGET. The property: a
 * refusal (EVD_ECORRUPT, with a reason), or a table whose every window
 * keeps its invariants, holds no session above MAX_BUDGET (those are left
 * out, their ids noted) and which, written out again and loaded, is the
 * same table at the same LSN.
 *
 * Input: byte 0 is a mode, the rest the snapshot file.
 *   mode & 1  every session record's CRC and the trailer's are recomputed
 *             first, so that mutations reach the session decoder (both
 *             versions) rather than stopping at a checksum.
 * EVD_FUZZ_SEEDS=DIR writes the seed corpus to DIR and exits. */
#include <fcntl.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "fuzz_state.h"

/* Recomputes the CRCs the layout has: each session's, and the trailer's
 * over the 24-byte header. Stops where the framing stops making sense. */
static void fix_crcs(unsigned char *d, size_t size) {
  size_t at = 24;
  uint64_t n, i;
  uint32_t len;

  if (size < 24)
    return;
  n = evd_le64(d + 16);
  for (i = 0; i < n; i++) {
    if (size - at < 4)
      return;
    len = evd_le32(d + at);
    if (len > size - at - 4 || size - at - 4 - len < 4)
      return;
    evd_le32_set(d + at + 4 + len, evd_crc32c(0, d + at + 4, len));
    at += 8 + (size_t)len;
  }
  if (size - at >= 20)
    evd_le32_set(d + at + 16, evd_crc32c(0, d, 24));
}

/* Small enough that sessions of an input (4 KB at most) go past it. */
#define MAX_BUDGET 64u

static void fail(const char *what, const char *why) {
  fprintf(stderr, "*** invariant violated: %s (%s)\n", what, why);
  abort();
}

static void write_seeds(const char *dir) {
  static const int at[] = {0, 3, 6, 9, 12, SF_STORY, SF_STORY + 1};
  char name[64];
  evd_buf_t b;
  size_t a;
  int k, dirfd;

  evd_buf_init(&b);
  fs_fresh_dir();
  dirfd = open(fs_dir, O_RDONLY | O_DIRECTORY);
  if (dirfd < 0)
    abort();
  for (a = 0; a < sizeof at / sizeof at[0]; a++) {
    /* The story's states as snapshots, and the whole story with a session
     * above MAX_BUDGET (k = SF_STORY + 1). */
    evd_api_t *api = sf_api();
    k = at[a];
    if (sf_story_apply(api, k > SF_STORY ? SF_STORY : k) != 0)
      abort();
    if (k > SF_STORY) {
      evd_op_t big = sf_create("big", MAX_BUDGET + 1, 1, 1, 0);
      evd_buf_t p;
      evd_buf_init(&p);
      evd_record_put_op(&p, &big);
      if (sf_apply_payload(api, p.data, p.len, 2) != 0)
        abort();
      evd_buf_free(&p);
    }
    if (sf_snapshot_write(dirfd, evd_api_table(api), (uint64_t)k) != 0 ||
        sf_get(fs_dir, "snapshot", &b) != 0)
      abort();
    snprintf(name, sizeof name, "story-%02d", k);
    fs_seed(dir, name, 0, b.data, b.len);
    snprintf(name, sizeof name, "story-%02d-crc-fixed", k);
    fs_seed(dir, name, 1, b.data, b.len);
    evd_api_free(api);
  }
  fs_seed_file(dir, "v1-fixture", 0, "tests/durability/fixtures/v1/state",
               "snapshot");
  fs_seed_file(dir, "v1-fixture-crc-fixed", 1,
               "tests/durability/fixtures/v1/state", "snapshot");
  close(dirfd);
  evd_buf_free(&b);
}

static int dirfd_ = -1;

int LLVMFuzzerInitialize(int *argc, char ***argv);
int LLVMFuzzerInitialize(int *argc, char ***argv) {
  const char *seeds = getenv("EVD_FUZZ_SEEDS");

  (void)argc, (void)argv;
  evd_log_setup(EVD_LOG_ERROR, EVD_LOG_TEXT);
  if (seeds != NULL) {
    write_seeds(seeds);
    exit(0);
  }
  return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  evd_table_t *t = NULL, *again = NULL, *refused = NULL;
  evd_snapshot_load_t how = {.max_budget = MAX_BUDGET};
  uint64_t lsn = 0, lsn2 = 0, bytes;
  const evd_session_t *s;
  evd_buf_t file;
  char why[512];
  const char *bad;
  int err;

  if (size < 1)
    return 0;
  evd_buf_init(&file);
  if (size > 1) /* (evd_buf_add of nothing to an empty buffer: NULL + 0) */
    evd_buf_add(&file, data + 1, size - 1);
  if (data[0] & 1)
    fix_crcs((unsigned char *)file.data, file.len);
  fs_fresh_dir();
  if (dirfd_ < 0)
    dirfd_ = open(fs_dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (dirfd_ < 0 || sf_put(fs_dir, "snapshot", file.data, file.len) != 0 ||
      evd_table_new(&t, UINT32_MAX, 1 << 20) != 0 ||
      evd_table_new(&refused, UINT32_MAX, 0) != 0)
    abort();
  how.refused = refused;
  why[0] = '\0';
  err = evd_snapshot_load(dirfd_, t, &how, &lsn, &bytes, why, sizeof why);
  if (err != 0 && err != EVD_ECORRUPT && err != EVD_ENOMEM)
    fail("a load neither loads nor refuses as corrupt", evd_strerror(err));
  if (err == EVD_ECORRUPT && why[0] == '\0')
    fail("a refusal without a reason", "");
  if (err != 0)
    goto done;
  if ((bad = sf_table_bad(t)) != NULL)
    fail("a loaded window breaks its invariants", bad);
  if (how.nrefused != evd_table_count(refused))
    fail("the sessions left out are not the ones noted", "");
  for (s = evd_table_oldest(t); s != NULL; s = evd_table_younger(s))
    if (evd_session_window(s)->budget > MAX_BUDGET ||
        evd_table_find(refused, s->id, s->idlen) != NULL)
      fail("a session above the budget was loaded", "");
  /* What loaded writes out and loads back the same. */
  if (sf_snapshot_write(dirfd_, t, lsn) != 0 ||
      evd_table_new(&again, UINT32_MAX, 1 << 20) != 0)
    fail("cannot write a loaded table back", "");
  err = sf_snapshot_load(dirfd_, again, &lsn2, why, sizeof why);
  if (err == 0 && (lsn2 != lsn || !sf_same_tables(t, again)))
    fail("a loaded table, written and loaded again, differs", "");
  if (err != 0 && err != EVD_ENOMEM)
    fail("a loaded table, written again, is refused", why);
done:
  evd_table_free(again);
  evd_table_free(refused);
  evd_table_free(t);
  evd_buf_free(&file);
  return 0;
}

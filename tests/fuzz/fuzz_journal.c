/* libFuzzer target for journal segments (record.h's format), under ASan
 * and UBSan: each input is one segment, recovered by evd_journal_open as at
 * start-up. The property: a refusal with a reason, or a recovery to exactly
 * the state of the records before the first bad one, which the harness
 * works out itself from the format (its own framing, LSN and torn-tail
 * rules, its own reading of the sessions above --max-budget that recovery
 * leaves out; the ops applied through evd_api_apply). Recovered windows
 * keep their invariants, and the snapshot the close writes loads back the
 * same.
 *
 * Input: byte 0 is a mode, the rest the segment file.
 *   mode & 1  every record's CRC is recomputed first (so that mutations
 *             reach the payload decoder and the ops, not just the CRC);
 *   mode & 2  records i and j swap places first (i, j: byte 1's nibbles,
 *             which then is not part of the file): reordered records.
 * EVD_FUZZ_SEEDS=DIR writes the seed corpus to DIR and exits. */
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "fuzz_state.h"

#define REC_MAX (1u << 30)

typedef struct {
  size_t at, len; /* offset of a whole, checksummed record; payload len */
} frame_t;

/* A whole record at `at` whose CRC holds (or need not: check == 0). */
static int frame_at(const unsigned char *d, size_t size, size_t at,
                    int check, size_t *len) {
  uint32_t l;

  if (size - at < SF_REC_HDR + 4)
    return 0;
  l = evd_le32(d + at);
  if (l > REC_MAX || size - at - SF_REC_HDR - 4 < l)
    return 0;
  if (check && evd_crc32c(0, d + at + 4, 8 + (size_t)l) !=
                   evd_le32(d + at + SF_REC_HDR + l))
    return 0;
  *len = l;
  return 1;
}

/* Rewrites the file: CRCs fixed, records swapped, per the mode. */
static void prepare(unsigned char mode, unsigned char swap, evd_buf_t *f) {
  frame_t fr[16];
  size_t n = 0, at = EVD_SEG_MAGIC_LEN, len, i, j;
  evd_buf_t out;
  unsigned char *d = (unsigned char *)f->data;

  if (f->len < EVD_SEG_MAGIC_LEN)
    return;
  while (n < 16 && frame_at(d, f->len, at, 0, &len)) {
    if (mode & 1)
      evd_le32_set(d + at + SF_REC_HDR + len,
                   evd_crc32c(0, d + at + 4, 8 + len));
    fr[n].at = at;
    fr[n++].len = len;
    at += SF_REC_HDR + len + 4;
  }
  i = (size_t)(swap >> 4);
  j = (size_t)(swap & 15);
  if (!(mode & 2) || i >= n || j >= n || i == j)
    return;
  evd_buf_init(&out);
  evd_buf_add(&out, d, EVD_SEG_MAGIC_LEN);
  for (size_t k = 0; k < n; k++) {
    size_t s = k == i ? j : k == j ? i : k;
    evd_buf_add(&out, d + fr[s].at, SF_REC_HDR + fr[s].len + 4);
  }
  evd_buf_add(&out, d + at, f->len - at); /* whatever followed them */
  evd_buf_reset(f, 0);
  evd_buf_add(f, out.data, out.len);
  evd_buf_free(&out);
}

/* The harness's reading of recovery's --max-budget rule (journal.h): a
 * session made (created, adopted) above SF_MAX_BUDGET is left out with
 * everything later records do to it and to its forks, yet exists as far
 * as the records go (made again, it must be replaced; a delete or a reap
 * ends it). The ops of the others go to evd_api_apply. */
typedef struct {
  evd_api_t *api;
  int n, full;
  uint8_t len[128];
  char id[128][EVD_SESSION_ID_MAX];
} model_t;

static int out_at(const model_t *m, const char *id, size_t len) {
  int i;

  for (i = 0; i < m->n; i++)
    if (m->len[i] == len && memcmp(m->id[i], id, len) == 0)
      return i;
  return -1;
}

static void out_add(model_t *m, const char *id, size_t len) {
  if (m->n == 128) {
    m->full = 1; /* not comparable: the harness's room, not the format */
    return;
  }
  memcpy(m->id[m->n], id, len);
  m->len[m->n++] = (uint8_t)len;
}

static void out_drop(model_t *m, int i) {
  m->n--;
  memmove(m->id[i], m->id[m->n], m->len[m->n]);
  m->len[i] = m->len[m->n];
}

static int model_op(void *ctx, const evd_op_t *op) {
  model_t *m = ctx;
  evd_table_t *t = evd_api_table(m->api);
  int out = out_at(m, op->id, op->idlen), makes = 0, replaces = 0;
  evd_session_t *s;
  evd_op_t o = *op;

  makes = op->type == EVD_OP_CREATE || op->type == EVD_OP_CREATE2 ||
          op->type == EVD_OP_ADOPT;
  replaces = op->type == EVD_OP_ADOPT && (op->flags & EVD_OP_REPLACED);
  if (op->type == EVD_OP_FORK && out_at(m, op->child, op->childlen) >= 0)
    return EVD_ECORRUPT; /* the child exists */
  if (makes && op->cfg.budget > SF_MAX_BUDGET) {
    s = evd_table_find(t, op->id, op->idlen);
    if (replaces) {
      if (s == NULL && out < 0)
        return EVD_ECORRUPT;
    } else if (s != NULL || out >= 0) {
      return EVD_ECORRUPT;
    }
    if (s != NULL)
      evd_table_remove(t, s);
    if (out < 0)
      out_add(m, op->id, op->idlen);
    return 0;
  }
  if (out < 0)
    return evd_api_apply(m->api, op);
  if (makes) {
    if (!replaces)
      return EVD_ECORRUPT;
    out_drop(m, out);
    o.flags = 0; /* left out, so made afresh */
    return evd_api_apply(m->api, &o);
  }
  if (op->type == EVD_OP_FORK) {
    if (evd_table_find(t, op->child, op->childlen) != NULL)
      return EVD_ECORRUPT;
    out_add(m, op->child, op->childlen);
  } else if (op->type == EVD_OP_DELETE || op->type == EVD_OP_REAP) {
    out_drop(m, out);
  }
  return 0;
}

/* The harness's own reading of a lone segment (no snapshot): 0 with the
 * state in ref and the length the file is cut to, EVD_ECORRUPT when it
 * must be refused, EVD_ENOMEM when applying ran out (not comparable). */
static int expect(const unsigned char *d, size_t size, model_t *ref,
                  size_t *keep) {
  int version;
  size_t at, len, later;
  uint64_t lsn, last = 0;
  int err;

  *keep = size;
  if (size == 0)
    return 0; /* a crash right at creation: an empty segment */
  if (size < EVD_SEG_MAGIC_LEN)
    return memcmp(d, EVD_SEG_MAGIC_V2, size) == 0 ? 0 : EVD_ECORRUPT;
  version = memcmp(d, EVD_SEG_MAGIC_V2, EVD_SEG_MAGIC_LEN) == 0   ? 2
            : memcmp(d, EVD_SEG_MAGIC_V1, EVD_SEG_MAGIC_LEN) == 0 ? 1
                                                                  : 0;
  if (version == 0)
    return EVD_ECORRUPT;
  for (at = EVD_SEG_MAGIC_LEN; at < size; at += SF_REC_HDR + len + 4) {
    if (!frame_at(d, size, at, 1, &len)) {
      /* Torn only if no whole record follows: else damage mid-file. */
      for (later = at + 1; later + SF_REC_HDR + 4 <= size; later++)
        if (frame_at(d, size, later, 1, &len))
          return EVD_ECORRUPT;
      *keep = at;
      return 0;
    }
    lsn = evd_le64(d + at + 4);
    if (lsn != last + 1) /* no snapshot: LSNs run 1, 2, 3, ... */
      return EVD_ECORRUPT;
    last = lsn;
    err = sf_decode(d + at + SF_REC_HDR, len, version, model_op, ref);
    if (err != 0)
      return err == EVD_ENOMEM ? err : EVD_ECORRUPT;
  }
  return 0;
}

/* Ring words the sessions a segment creates could take: every CREATE's
 * and ADOPT's budget + lookahead (those recovery does not leave out),
 * times the forks + 1 (a fork copies its parent). */
typedef struct {
  uint64_t words, forks;
} peek_t;

static int peek_op(void *ctx, const evd_op_t *op) {
  peek_t *p = ctx;

  if ((op->type == EVD_OP_CREATE || op->type == EVD_OP_CREATE2 ||
       op->type == EVD_OP_ADOPT) && op->cfg.budget <= SF_MAX_BUDGET)
    p->words += (uint64_t)op->cfg.budget + op->cfg.lookahead;
  else if (op->type == EVD_OP_FORK)
    p->forks++;
  return 0;
}

/* 1 when the segment's sessions would take more than 16 MB of rings. The
 * daemon allocates whatever lookahead a record names within
 * --max-budget's budgets (it trusts its own files' sizes: --max-lookahead
 * is not checked on recovery), so such inputs test the machine's memory,
 * not the format: they are skipped. */
static int too_big(const unsigned char *d, size_t size) {
  peek_t p = {0, 0};
  size_t at, len;
  int version;

  if (size < EVD_SEG_MAGIC_LEN)
    return 0;
  version = memcmp(d, EVD_SEG_MAGIC_V1, EVD_SEG_MAGIC_LEN) == 0 ? 1 : 2;
  for (at = EVD_SEG_MAGIC_LEN; frame_at(d, size, at, 0, &len);
       at += SF_REC_HDR + len + 4)
    (void)sf_decode(d + at + SF_REC_HDR, len, version, peek_op, &p);
  return p.words * (p.forks + 1) > (4u << 20);
}

static void fail(const char *what, const char *why) {
  fprintf(stderr, "*** invariant violated: %s (%s)\n", what, why);
  abort();
}

static void write_seeds(const char *dir) {
  evd_buf_t b;
  char name[64];
  int k;

  evd_buf_init(&b);
  for (k = 0; k <= SF_STORY; k++) { /* every prefix of the story */
    evd_buf_reset(&b, 0);
    sf_segment(&b, 2);
    sf_story(&b, 0, k);
    snprintf(name, sizeof name, "story-%02d", k);
    fs_seed(dir, name, 0, b.data, b.len);
    if (k == SF_STORY) {
      fs_seed(dir, "story-crc-fixed", 1, b.data, b.len);
      fs_seed(dir, "story-torn", 0, b.data, b.len - 5);
      b.data[b.len / 2] ^= 4;
      fs_seed(dir, "story-damaged", 0, b.data, b.len);
      b.data[b.len / 2] ^= 4;
      evd_buf_reset(&b, 0);
      evd_buf_chr(&b, (char)0x45); /* records 4 and 5 swapped */
      sf_segment(&b, 2);
      sf_story(&b, 0, k);
      fs_seed(dir, "story-swapped", 3, b.data, b.len);
    }
  }
  { /* sessions above --max-budget, left out with their ops and forks */
    static const uint32_t p5[] = {5};
    evd_op_t ops[] = {sf_create("big", SF_MAX_BUDGET + 1, 0, 1, 0),
                      sf_create("ok", 8, 0, 1, 0),
                      sf_step("big", 0, 0, p5, 1),
                      sf_fork("big", "kid"),
                      sf_step("ok", 0, 0, p5, 1),
                      sf_op(EVD_OP_DELETE, "big", 0),
                      sf_adopt("big", 0, (evd_session_config_t){4, 1, 1, 0},
                               sf_d_kept, sf_d_slots, 3, 11)};
    size_t i;
    evd_buf_reset(&b, 0);
    sf_segment(&b, 2);
    for (i = 0; i < sizeof ops / sizeof ops[0]; i++)
      sf_record(&b, i + 1, &ops[i], 1);
    fs_seed(dir, "max-budget", 0, b.data, b.len);
  }
  fs_seed_file(dir, "v1-fixture", 0, "tests/durability/fixtures/v1/state",
               "journal.00000001");
  fs_seed(dir, "empty", 0, "", 0);
  evd_buf_free(&b);
}

int LLVMFuzzerInitialize(int *argc, char ***argv);
int LLVMFuzzerInitialize(int *argc, char ***argv) {
  const char *seeds = getenv("EVD_FUZZ_SEEDS");

  (void)argc, (void)argv;
  if (seeds != NULL) {
    write_seeds(seeds);
    exit(0);
  }
  evd_log_setup(EVD_LOG_ERROR, EVD_LOG_TEXT);
  return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  unsigned char mode, swap = 0;
  evd_buf_t file, cut;
  evd_api_t *api, *ref, *again;
  model_t *model = NULL;
  evd_journal_t *j = NULL;
  char why[512];
  size_t keep;
  int want, got;

  if (size < 1)
    return 0;
  mode = data[0];
  data++, size--;
  if ((mode & 2) && size > 0)
    swap = data[0], data++, size--;
  evd_buf_init(&file);
  evd_buf_init(&cut);
  if (size > 0) /* (evd_buf_add of nothing to an empty buffer: NULL + 0) */
    evd_buf_add(&file, data, size);
  prepare(mode, swap, &file);
  if (too_big((const unsigned char *)file.data, file.len)) {
    evd_buf_free(&file);
    return 0;
  }
  fs_fresh_dir();
  if (sf_put(fs_dir, "journal.00000001", file.data, file.len) != 0)
    abort();

  api = sf_api();
  ref = sf_api();
  if (api == NULL || ref == NULL)
    abort();
  evd_table_set_max(evd_api_table(ref), UINT32_MAX);
  model = calloc(1, sizeof *model);
  if (model == NULL)
    abort();
  model->api = ref;
  want = expect((const unsigned char *)file.data, file.len, model, &keep);
  got = sf_open(fs_dir, api, &j, why, sizeof why);
  if (got != 0 && why[0] == '\0')
    fail("a refusal without a reason", evd_strerror(got));
  if (got == EVD_ENOMEM || want == EVD_ENOMEM || model->full)
    goto done; /* the cap on allocations, not the format */
  if ((got == 0) != (want == 0))
    fail(got == 0 ? "recovered a segment that must be refused"
                  : "refused a segment that recovers",
         got == 0 ? "" : why);
  if (got != 0)
    goto done;
  if (sf_table_bad(evd_api_table(api)) != NULL)
    fail("a recovered window breaks its invariants",
         sf_table_bad(evd_api_table(api)));
  if (!sf_same_tables(evd_api_table(api), evd_api_table(ref)))
    fail("recovered state is not that of the records before the first bad "
         "one", "");
  if (file.len >= EVD_SEG_MAGIC_LEN &&
      (sf_get(fs_dir, "journal.00000001", &cut) != 0 || cut.len != keep))
    fail("the torn tail was not cut where the good records end", "");
  /* The close snapshots the state; it must load back the same. */
  if (evd_journal_close(j, evd_api_table(api)) != 0)
    fail("close failed", "");
  j = NULL;
  again = sf_api();
  if (again == NULL)
    abort();
  got = sf_open(fs_dir, again, &j, why, sizeof why);
  if (got == 0) {
    if (!sf_same_tables(evd_api_table(again), evd_api_table(ref)))
      fail("the snapshot of a recovered state loads back different", "");
    evd_journal_close(j, evd_api_table(again));
    j = NULL;
  } else if (got != EVD_ENOMEM) {
    fail("the snapshot of a recovered state is refused", why);
  }
  evd_api_free(again);
done:
  if (j != NULL)
    evd_journal_close(j, evd_api_table(api));
  evd_api_free(api);
  evd_api_free(ref);
  free(model);
  evd_buf_free(&file);
  evd_buf_free(&cut);
  return 0;
}

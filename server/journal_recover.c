/* Opening the state directory: lock it, load the snapshot, recover the
 * journal segments after it through the apply function (cutting off a torn
 * last record, leaving out sessions above --max-budget), and open a fresh
 * segment for the writer (journal.c). */
#include "journal_int.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "log.h"
#include "record.h"
#include "snapshot.h"

/* Where a recovery stands, from one segment to the next. */
typedef struct {
  uint64_t snap_lsn, last_lsn; /* last_lsn 0: no record seen yet */
  uint64_t records, applied;
  evd_apply_fn apply;
  void *ctx;
  evd_table_t *table;
  uint32_t *scratch;
  size_t cap;
  /* Sessions left out (budget above max_budget), by id: the snapshot's
   * and the journal's, so that later ops on them are left out too. */
  evd_snapshot_load_t load;
} recovery_t;

/* The refused table's stand-in configuration: an id is all it keeps. */
static const evd_session_config_t refused_cfg = {1, 0, 1, 0};

/* 1 when session id is left out (it exists, but is not recovered). */
static int left_out(const recovery_t *r, const char *id, size_t idlen) {
  return evd_table_count(r->load.refused) > 0 &&
         evd_table_find(r->load.refused, id, idlen) != NULL;
}

/* Leaves session id out from now on (it is not left out yet). */
static int leave_out(recovery_t *r, const char *id, size_t idlen,
                     const char *why) {
  evd_session_t *stand_in;

  evd_log(EVD_LOG_WARN, "journal: session %.*s %s: not recovered (the "
          "other sessions are)", (int)idlen, id, why);
  r->load.nrefused++;
  return evd_table_add(r->load.refused, id, idlen, &refused_cfg, 0,
                       &stand_in);
}

/* evd_record_apply's function during recovery: the op goes to the API's
 * apply, unless it makes a session above --max-budget or concerns one
 * left out. A session left out still exists as far as the records go: an
 * op that creates it again without replacing it does not replay. */
static int recover_op(void *ctx, const evd_op_t *op) {
  recovery_t *r = ctx;
  int out = left_out(r, op->id, op->idlen), replace;
  evd_session_t *s;
  evd_op_t plain;
  char why[96];

  switch (op->type) {
  case EVD_OP_CREATE:
  case EVD_OP_CREATE2:
  case EVD_OP_ADOPT:
    replace = op->type == EVD_OP_ADOPT && (op->flags & EVD_OP_REPLACED);
    if (op->cfg.budget <= r->load.max_budget) {
      if (!out)
        return r->apply(r->ctx, op);
      if (!replace)
        return EVD_ECORRUPT;
      /* A session left out, replaced within the budget: recovered from
       * here on, made as if it were new. */
      evd_table_remove(r->load.refused,
                       evd_table_find(r->load.refused, op->id, op->idlen));
      plain = *op;
      plain.flags &= ~EVD_OP_REPLACED;
      return r->apply(r->ctx, &plain);
    }
    s = evd_table_find(r->table, op->id, op->idlen);
    if (replace ? s == NULL && !out : s != NULL || out)
      return EVD_ECORRUPT;
    if (s != NULL) /* replaced by the session left out */
      evd_table_remove(r->table, s);
    if (out)
      return 0;
    snprintf(why, sizeof why, "has budget %u, above --max-budget %u",
             op->cfg.budget, r->load.max_budget);
    return leave_out(r, op->id, op->idlen, why);
  case EVD_OP_FORK:
    if (left_out(r, op->child, op->childlen))
      return EVD_ECORRUPT; /* a fork into a session that exists */
    if (!out)
      break;
    if (evd_table_find(r->table, op->child, op->childlen) != NULL)
      return EVD_ECORRUPT;
    snprintf(why, sizeof why, "is a fork of %.*s, which is left out",
             (int)op->idlen, op->id);
    return leave_out(r, op->child, op->childlen, why);
  default:
    if (!out)
      break;
    if (op->type == EVD_OP_DELETE || op->type == EVD_OP_REAP)
      evd_table_remove(r->load.refused,
                       evd_table_find(r->load.refused, op->id, op->idlen));
    return 0;
  }
  return r->apply(r->ctx, op);
}

/* After a bad record: does any whole record follow? Then the file was
 * damaged in the middle, which must not pass for a torn end. */
static int record_follows(const unsigned char *d, size_t size, size_t at) {
  uint64_t lsn;
  uint32_t len;

  for (at++; at + EVD__REC_HDR + EVD__REC_TAIL <= size; at++)
    if (evd__frame_at(d, size, at, &len, &lsn))
      return 1;
  return 0;
}

/* Cuts a torn last record off segment `name` at byte `at` (and syncs), so
 * that records appended later never sit behind garbage. */
static int cut_torn_end(int dirfd, const char *name, size_t at, size_t size,
                        char *why, size_t wlen) {
  int fd;

  evd_log(EVD_LOG_WARN, "%s: dropping a torn record at byte %zu "
          "(%zu bytes)", name, at, size - at);
  fd = openat(dirfd, name, O_WRONLY | O_CLOEXEC);
  if (fd < 0 || ftruncate(fd, (off_t)at) != 0 || fsync(fd) != 0) {
    snprintf(why, wlen, "cannot truncate %s: %s", name, strerror(errno));
    if (fd >= 0)
      close(fd);
    return EVD_EIO;
  }
  close(fd);
  return 0;
}

/* The format version of a segment from its header, 0 when it has none. */
static int seg_version(const unsigned char *d, size_t size) {
  if (size < EVD__SEG_HDR)
    return 0;
  if (memcmp(d, EVD_SEG_MAGIC_V2, EVD__SEG_HDR) == 0)
    return 2;
  if (memcmp(d, EVD_SEG_MAGIC_V1, EVD__SEG_HDR) == 0)
    return 1;
  return 0;
}

/* Recovers one segment; a torn end is cut off when it is the last. */
static int recover_segment(int dirfd, uint32_t seg, int last, recovery_t *r,
                           uint64_t *bytes, char *why, size_t wlen) {
  char name[32];
  unsigned char *d = NULL;
  size_t size, at;
  int err, version;

  evd__seg_name(name, sizeof name, seg);
  err = evd__slurp(dirfd, name, &d, &size);
  if (err != 0) {
    snprintf(why, wlen, "cannot read %s: %s", name, strerror(errno));
    return err;
  }
  version = seg_version(d, size);
  if (version == 0) {
    /* A segment's header is synced before any record goes in, so only a
     * crash at its creation leaves it short. */
    if (last && size < EVD__SEG_HDR &&
        memcmp(d, EVD_SEG_MAGIC_V2, size) == 0) {
      free(d);
      *bytes += size;
      return 0;
    }
    free(d);
    snprintf(why, wlen, "%s is not an evictd journal segment", name);
    return EVD_ECORRUPT;
  }
  for (at = EVD__SEG_HDR; at < size;) {
    uint64_t lsn;
    uint32_t len;
    if (!evd__frame_at(d, size, at, &len, &lsn)) {
      if (!last || record_follows(d, size, at)) {
        snprintf(why, wlen, "%s is damaged at byte %zu", name, at);
        free(d);
        return EVD_ECORRUPT;
      }
      err = cut_torn_end(dirfd, name, at, size, why, wlen);
      if (err != 0) {
        free(d);
        return err;
      }
      size = at;
      break;
    }
    if (lsn == 0 || (r->last_lsn != 0 && lsn != r->last_lsn + 1)) {
      snprintf(why, wlen, "%s: LSN %llu follows LSN %llu: records are "
               "missing or out of order", name, (unsigned long long)lsn,
               (unsigned long long)r->last_lsn);
      free(d);
      return EVD_ECORRUPT;
    }
    if (r->last_lsn == 0 && lsn > r->snap_lsn + 1) {
      snprintf(why, wlen, "the journal starts at LSN %llu but the snapshot "
               "ends at %llu: records are missing", (unsigned long long)lsn,
               (unsigned long long)r->snap_lsn);
      free(d);
      return EVD_ECORRUPT;
    }
    r->last_lsn = lsn;
    r->records++;
    if (lsn > r->snap_lsn) { /* older records are in the snapshot */
      err = evd_record_apply(d + at + EVD__REC_HDR, len, version, recover_op,
                             r, &r->scratch, &r->cap);
      if (err != 0) {
        snprintf(why, wlen, "%s: record LSN %llu does not replay (%s)", name,
                 (unsigned long long)lsn, evd_strerror(err));
        free(d);
        return err == EVD_ENOMEM ? err : EVD_ECORRUPT;
      }
      r->applied++;
    }
    at += EVD__REC_HDR + len + EVD__REC_TAIL;
  }
  *bytes += size;
  free(d);
  return 0;
}

/* Takes the directory: creates it if needed, opens it and locks it against
 * a second daemon. Fills j->dirfd and j->lockfd (closed again on failure). */
static int take_dir(evd_journal_t *j, const char *dir, char *why,
                    size_t len) {
  int err;

  if (mkdir(dir, 0700) != 0 && errno != EEXIST) {
    snprintf(why, len, "cannot create %s: %s", dir, strerror(errno));
    return EVD_EIO;
  }
  j->dirfd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (j->dirfd < 0) {
    snprintf(why, len, "cannot open %s: %s", dir, strerror(errno));
    return EVD_EIO;
  }
  j->lockfd = openat(j->dirfd, "lock", O_RDWR | O_CREAT | O_CLOEXEC, 0600);
  if (j->lockfd < 0 && (errno == EACCES || errno == EROFS)) {
    snprintf(why, len, "cannot write in %s (%s): evictd runs as uid %u; "
             "make the directory writable by it (chown) or choose another",
             dir, strerror(errno), (unsigned)geteuid());
    err = EVD_EIO;
    goto fail;
  }
  if (j->lockfd < 0 || flock(j->lockfd, LOCK_EX | LOCK_NB) != 0) {
    err = errno == EWOULDBLOCK ? EVD_EEXIST : EVD_EIO;
    snprintf(why, len, err == EVD_EEXIST
                           ? "%s is in use by another evictd"
                           : "cannot lock %s: %s",
             dir, strerror(errno));
    goto fail;
  }
  return 0;
fail:
  if (j->lockfd >= 0)
    close(j->lockfd);
  close(j->dirfd);
  return err;
}

int evd_journal_open(evd_journal_t **out, const char *dir, evd_fsync_t mode,
                     uint64_t compact_after, uint32_t max_budget,
                     evd_table_t *table, evd_apply_fn apply, void *ctx,
                     char *why, size_t len) {
  evd_journal_t *j = calloc(1, sizeof *j);
  recovery_t r = {.apply = apply, .ctx = ctx, .table = table,
                  .load = {.max_budget = max_budget}};
  uint32_t *segs = NULL, old_max;
  size_t nseg = 0, i;
  struct timespec t0, t1;
  int err;

  if (j == NULL || evd_table_new(&r.load.refused, UINT32_MAX, 0) != 0) {
    free(j);
    return EVD_ENOMEM;
  }
  clock_gettime(CLOCK_MONOTONIC, &t0);
  j->mode = mode;
  j->compact_after = compact_after;
  j->table = table;
  j->fd = j->lockfd = j->close_fd = -1;
  evd_buf_init(&j->pending);
  evd_buf_init(&j->inflight);
  err = take_dir(j, dir, why, len);
  if (err != 0) {
    evd_table_free(r.load.refused);
    free(j);
    return err;
  }
  unlinkat(j->dirfd, "snapshot.tmp", 0); /* from a snapshot cut short */

  /* Saved state may exceed today's --max-sessions; load it all anyway. */
  old_max = evd_table_set_max(table, UINT32_MAX);
  err = evd_snapshot_load(j->dirfd, table, &r.load, &r.snap_lsn,
                          &j->snapshot_bytes, why, len);
  if (err == EVD_ENOENT)
    err = 0;
  if (err == 0)
    err = evd__seg_list(j->dirfd, &segs, &nseg);
  for (i = 0; i < nseg && err == 0; i++)
    err = recover_segment(j->dirfd, segs[i], i + 1 == nseg, &r,
                          &j->journal_bytes, why, len);
  evd_table_set_max(table, old_max);
  free(r.scratch);
  evd_table_free(r.load.refused);
  if (err != 0)
    goto fail;

  j->next_lsn = (r.last_lsn > r.snap_lsn ? r.last_lsn : r.snap_lsn) + 1;
  j->written_lsn = j->durable_lsn = j->next_lsn - 1;
  j->seg = nseg > 0 ? segs[nseg - 1] + 1 : 1;
  j->child_seg = j->seg;
  free(segs);
  segs = NULL;
  j->fd = evd__seg_create(j->dirfd, j->seg);
  j->seg_len = EVD__SEG_HDR;
  if (j->fd < 0) {
    snprintf(why, len, "cannot create a journal segment in %s: %s", dir,
             strerror(errno));
    err = EVD_EIO;
    goto fail;
  }
  clock_gettime(CLOCK_MONOTONIC, &t1);
  evd_log(EVD_LOG_INFO, "state: %u session%s from %s in %.3f s (snapshot "
          "LSN %llu, %llu journal records replayed); fsync %s",
          evd_table_count(table), evd_table_count(table) == 1 ? "" : "s", dir,
          (double)(t1.tv_sec - t0.tv_sec) + (t1.tv_nsec - t0.tv_nsec) / 1e9,
          (unsigned long long)r.snap_lsn, (unsigned long long)r.applied,
          mode == EVD_FSYNC_ALWAYS ? "always"
          : mode == EVD_FSYNC_EVERYSEC ? "everysec" : "no");
  if (r.load.nrefused > 0)
    evd_log(EVD_LOG_WARN, "state: %llu session%s left out for a budget "
            "above --max-budget %u (named above); the next snapshot drops "
            "them for good", (unsigned long long)r.load.nrefused,
            r.load.nrefused == 1 ? "" : "s", max_budget);
  *out = j;
  return 0;
fail:
  free(segs);
  close(j->lockfd);
  close(j->dirfd);
  free(j);
  return err;
}

/* Snapshots under --state-dir: the whole session table in one file, written
 * atomically (by the compaction child, at shutdown) and loaded at start-up
 * before the journal is recovered. The layout is described in snapshot.c. */
#ifndef EVICTD_SNAPSHOT_H
#define EVICTD_SNAPSHOT_H

#include <stddef.h>
#include <stdint.h>

#include "replay.h"
#include "session.h"

#define EVD_SNAP_MAGIC_V1 "EVDSNAP1"
#define EVD_SNAP_MAGIC_V2 "EVDSNAP2"
#define EVD_SNAP_TRAILER "EVDSEND1"

/* A session's retry record in a version 2 snapshot is tagged by a u32: its
 * form in the low 4 bits, and for arrays the request (EVD_SNAP_OP_*) in
 * bits 4-7, its flags (EVD_SNAP_*) in bits 8-15 and which of its edge
 * victim pages are transient (EVD_SNAP_*_TRANSIENT) in bits 16-17. These
 * are the file's
 * values; they equal the retry record's in memory (EVD_RP_*, session.h),
 * which the asserts hold to, so that a change of the memory layout fails
 * to compile instead of silently changing the files. */
#define EVD_SNAP_RP_NONE 0u   /* no record */
#define EVD_SNAP_RP_RUNS 1u   /* the session's replay area as it is */
#define EVD_SNAP_RP_ARRAYS 2u /* the record's lists, spelled out */
#define EVD_SNAP_RP_GONE 3u   /* let go: only the request's hash */
#define EVD_SNAP_OP_STEP 1u
#define EVD_SNAP_OP_COMMIT 2u
#define EVD_SNAP_OP_TRUNCATE 3u
#define EVD_SNAP_TENTATIVE 1u
#define EVD_SNAP_COMMIT_ARG 2u
#define EVD_SNAP_FIRST_TRANSIENT 1u
#define EVD_SNAP_LAST_TRANSIENT 2u
_Static_assert(EVD_SNAP_OP_STEP == EVD_RP_STEP &&
                   EVD_SNAP_OP_COMMIT == EVD_RP_COMMIT &&
                   EVD_SNAP_OP_TRUNCATE == EVD_RP_TRUNCATE,
               "snapshot op codes are on disk: keep EVD_RP_* 1, 2, 3");
_Static_assert(EVD_SNAP_TENTATIVE == EVD_RP_TENTATIVE &&
                   EVD_SNAP_COMMIT_ARG == EVD_RP_COMMIT_ARG,
               "snapshot step flags are on disk: keep EVD_RP_* 1 and 2");
/* The runs form writes the session's replay area word for word (see
 * replay.c for its layout): its size is part of the format too. */
_Static_assert(EVD__RP_WORDS == 7 && EVD__RP_WORDS_PAGED == 11,
               "a snapshot's runs form is 7 or 11 area words: a new layout "
               "needs a new snapshot version");
_Static_assert(EVD_SNAP_FIRST_TRANSIENT == EVD_RP_FIRST_TRANSIENT &&
                   EVD_SNAP_LAST_TRANSIENT == EVD_RP_LAST_TRANSIENT,
               "transient page bits are on disk: keep EVD_RP_* 1 and 2");

/* Writes `table` as of `lsn` to dir/snapshot atomically (snapshot.tmp,
 * fsync, rename, fsync of the directory), the bytes written in *bytes
 * (may be NULL). Allocates nothing: it may run in a forked child. Returns
 * 0, or EVD_EIO with errno set (no snapshot.tmp is left behind). */
int evd_snapshot_write(int dirfd, const evd_table_t *table, uint64_t lsn,
                       uint64_t *bytes);

/* How a snapshot is loaded: sessions whose budget is above max_budget
 * (saved before --max-budget was lowered, or damaged but checksum-valid)
 * are left out, each logged, and their ids added to `refused` (a table
 * whose sessions only stand for ids; NULL: not kept), so that recovery
 * also leaves out what the journal does to them; their count goes to
 * *nrefused. */
typedef struct evd_snapshot_load_s {
  uint32_t max_budget;
  evd_table_t *refused;
  uint64_t nrefused;
} evd_snapshot_load_t;

/* Loads dir/snapshot into `table`, its LSN in *lsn and its size in *bytes
 * (may be NULL), as `how` says (NULL: every session, whatever its budget).
 * Returns 0, EVD_ENOENT (no snapshot), EVD_ENOMEM, or EVD_ECORRUPT /
 * EVD_EIO with a sentence in why[0..len). */
int evd_snapshot_load(int dirfd, evd_table_t *table,
                      evd_snapshot_load_t *how, uint64_t *lsn,
                      uint64_t *bytes, char *why, size_t len);

#endif

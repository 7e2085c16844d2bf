/* Persistence under --state-dir: one checksummed record per change, written
 * and fsynced off the loop thread (group commit), compacted into a snapshot
 * (snapshot.h) by a forked child; start-up recovers snapshot + journal. */
#ifndef EVICTD_JOURNAL_H
#define EVICTD_JOURNAL_H

#include <stddef.h>
#include <stdint.h>

#include "histogram.h"
#include "record.h"
#include "session.h"

typedef enum { EVD_FSYNC_NO, EVD_FSYNC_EVERYSEC, EVD_FSYNC_ALWAYS } evd_fsync_t;

typedef struct evd_journal_s evd_journal_t;
struct uv_loop_s;

/* The journal's figures, which GET /metrics reads (evd_journal_stats). */
typedef struct evd_journal_stats_s {
  evd_histogram_t fsync; /* the time each fsync took */
  int failing;           /* 1 while changes are refused until a write
                            succeeds */
  uint64_t write_errors; /* failed writes and syncs, ever */
} evd_journal_stats_t;

/* Takes the directory (creating it if needed, locking it against a second
 * daemon), loads the snapshot into `table` and recovers the journal through
 * `apply`, dropping a torn last record, and opens a new journal segment.
 * A session whose budget is above max_budget (--max-budget; saved before
 * the flag was lowered, or damaged but checksum-valid) is not recovered:
 * it is logged by name and left out with everything the journal does to it
 * (and to its forks), and the other sessions are recovered.
 * On failure returns EVD_EIO (errno set), EVD_ECORRUPT, EVD_EEXIST (the
 * directory is locked by another process) or EVD_ENOMEM, with a sentence
 * in why[0..len). */
int evd_journal_open(evd_journal_t **out, const char *dir, evd_fsync_t mode,
                     uint64_t compact_after, uint32_t max_budget,
                     evd_table_t *table, evd_apply_fn apply, void *ctx,
                     char *why, size_t len);

/* Attaches the journal to the loop (its thread pool writes and syncs) and
 * names the function told, with evd_journal_acked(), when records may be
 * acknowledged. */
void evd_journal_start(evd_journal_t *j, struct uv_loop_s *loop,
                       void (*on_durable)(void *arg, uint64_t lsn),
                       void *arg);

/* Makes room for n more bytes of records, so that adding them cannot fail.
 * Returns 0, or EVD_ENOMEM (nothing else changes). */
int evd_journal_room(evd_journal_t *j, size_t n);

/* Adds an op to the record being built (one record per request). */
void evd_journal_add(evd_journal_t *j, const evd_op_t *op);

/* Closes the record being built, if any, and queues it for writing.
 * Returns its log sequence number, or 0 when nothing was added. */
uint64_t evd_journal_commit(evd_journal_t *j);

/* The LSN of the last record committed (0 when none yet). */
uint64_t evd_journal_last(const evd_journal_t *j);

/* The LSN up to which answers may go out: durable with --fsync always,
 * written to the file (handed to the kernel) in the other modes. */
uint64_t evd_journal_acked(const evd_journal_t *j);

/* Nonzero while the journal cannot take changes: a write or sync failed
 * (it is retried from memory every half second; changes are refused until
 * one succeeds, and nothing acknowledged is lost), or a record could not be
 * built for lack of memory (until a restart). */
int evd_journal_failed(const evd_journal_t *j);

/* The errno of the failure evd_journal_failed reports, else 0. */
int evd_journal_error(const evd_journal_t *j);

/* The journal's figures, borrowed for as long as the journal lives. */
const evd_journal_stats_t *evd_journal_stats(const evd_journal_t *j);

/* Detaches from the loop (no more jobs are started; one in the pool must
 * have finished: the loop keeps running until it has). */
void evd_journal_stop(evd_journal_t *j);

/* Final shutdown: writes whatever is pending, snapshots `table`, removes
 * the journal segments the snapshot covers, unlocks and frees. Returns 0,
 * or a negative EVD_E* (the journal then stays, so nothing is lost). */
int evd_journal_close(evd_journal_t *j, evd_table_t *table);

/* Called by the loop when a child process ended (SIGCHLD). */
void evd_journal_reap_child(evd_journal_t *j);

#endif

/* The journal's state, shared by journal_recover.c (which opens and
 * recovers it) and journal.c (the writer); journal_file.h has the files and
 * framing. Not for anything else. */
#ifndef EVICTD_JOURNAL_INT_H
#define EVICTD_JOURNAL_INT_H

#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>
#include <uv.h>

#include "buf.h"
#include "journal.h"
#include "journal_file.h"

struct evd_journal_s {
  int dirfd, lockfd;
  evd_fsync_t mode;
  uint64_t compact_after;
  evd_table_t *table;

  int fd;        /* the segment being appended to */
  uint32_t seg;  /* its number */
  uint64_t seg_len; /* its bytes known written in full */
  uint64_t next_lsn, written_lsn, durable_lsn;
  uint64_t journal_bytes;  /* in segments not covered by a snapshot */
  uint64_t snapshot_bytes; /* size of the last snapshot */
  int failed;   /* a write or sync failed: changes wait for a retry */
  int fail_err; /* its errno */
  int broken;   /* a record could not even be built: restart to recover */

  evd_buf_t pending; /* records not handed to a write yet */
  uint64_t pending_last;
  size_t rec_start;  /* the record being built starts here */
  int rec_open;

  uv_loop_t *loop;
  uv_work_t work;
  uv_timer_t sync_timer;
  uv_timer_t retry_timer;
  int started, stopping, job_running;
  evd_buf_t inflight; /* what the job in the pool writes */
  uint64_t inflight_last, last_sync_ms;
  uint64_t job_off; /* where in job_fd's segment the job writes */
  int job_fd, job_sync, job_err, job_torn, close_fd;
  double job_secs;

  pid_t child; /* the snapshot writer, when one runs */
  uint64_t child_lsn, next_compact_ms;
  uint32_t child_seg;

  evd_journal_stats_t stats; /* read by GET /metrics */
  void (*on_durable)(void *arg, uint64_t lsn);
  void *arg;
};

#endif

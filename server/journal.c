/* The journal's writer: records written and synced in libuv's thread pool
 * (group commit, retried from memory after a failure), compaction by a
 * forked snapshot writer (its protocol is numbered below), and shutdown. */
#include "journal_int.h"

#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "log.h"
#include "record.h"
#include "snapshot.h"
#include "fault.h"

#define SYNC_EVERY_MS 1000
#define COMPACT_RETRY_MS 30000
#define WRITE_RETRY_MS 500

/* ---- building records --------------------------------------------------- */

/* A request's ops go into one record at the end of `pending`; records
 * queue up there while a write is in flight and go out together with the
 * next one (the group commit), so that the loop never waits for the disk.
 * Opening and recovery are in journal_recover.c, the files and the record
 * framing in journal_file.c. */

int evd_journal_room(evd_journal_t *j, size_t n) {
  return evd_buf_room(&j->pending, n);
}

void evd_journal_add(evd_journal_t *j, const evd_op_t *op) {
  if (!j->rec_open) {
    j->rec_start = evd__frame_open(&j->pending);
    j->rec_open = 1;
  }
  evd_record_put_op(&j->pending, op);
}

/* ---- writing ------------------------------------------------------------ */

static uint64_t now_ms(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (uint64_t)ts.tv_sec * 1000 + (uint64_t)ts.tv_nsec / 1000000;
}

/* In the pool: write the batch, sync when asked, close a retired segment.
 * A batch that failed before is written again from where it started: the
 * segment is first cut back there, so that no torn write stays behind it. */
static void job_work(uv_work_t *w) {
  evd_journal_t *j = w->data;
  struct timespec t0, t1;

  j->job_err = 0;
  if (j->job_torn && ftruncate(j->job_fd, (off_t)j->job_off) != 0) {
    j->job_err = errno;
    return;
  }
  j->job_torn = 1; /* until the whole batch is in */
  if (j->inflight.len > 0) /* (nothing when only closing a segment) */
    j->job_err = EVD_FAULT("evictd/journal/write")
                     ? ENOSPC
                     : evd__write_all(j->job_fd, j->inflight.data,
                                      j->inflight.len);
  if (j->job_err != 0)
    return;
  j->job_torn = 0;
  if (j->close_fd >= 0) { /* the segment before a rotation */
    if (j->mode != EVD_FSYNC_NO && fdatasync(j->close_fd) != 0) {
      j->job_err = errno;
      return;
    }
    close(j->close_fd);
    j->close_fd = -1;
  }
  if (j->job_sync) {
    clock_gettime(CLOCK_MONOTONIC, &t0);
    if (EVD_FAULT("evictd/journal/sync") ? (errno = EIO, 1)
                                         : fdatasync(j->job_fd) != 0) {
      /* Whether the pages reached the disk is unknown: write them again. */
      j->job_err = errno;
      j->job_torn = 1;
    }
    clock_gettime(CLOCK_MONOTONIC, &t1);
    j->job_secs = (double)(t1.tv_sec - t0.tv_sec) +
                  (double)(t1.tv_nsec - t0.tv_nsec) * 1e-9;
  }
}

static void kick(evd_journal_t *j);
static void maybe_compact(evd_journal_t *j);
static void on_retry_timer(uv_timer_t *t);

/* The LSN up to which answers may go out: on stable storage with --fsync
 * always, handed to the kernel otherwise (a process crash loses nothing
 * acknowledged). */
uint64_t evd_journal_acked(const evd_journal_t *j) {
  return j->mode == EVD_FSYNC_ALWAYS ? j->durable_lsn : j->written_lsn;
}

static void set_failing(evd_journal_t *j, int failing) {
  j->stats.failing = failing;
}

/* After a failed job: its batch goes back in front of what is pending (in
 * LSN order), to be written again by the retry timer; changes are refused
 * meanwhile, and reads go on. */
static void job_failed(evd_journal_t *j, int err) {
  if (!j->failed)
    evd_log(EVD_LOG_ERROR, "journal write failed (%s): refusing changes "
            "until a retry succeeds (every %d ms); nothing acknowledged is "
            "lost", strerror(err), WRITE_RETRY_MS);
  j->failed = 1;
  j->fail_err = err;
  set_failing(j, 1);
  j->stats.write_errors++;
  evd_buf_add(&j->inflight, j->pending.data, j->pending.len);
  if (j->inflight.oom) {
    /* Nowhere to keep the batch: the records are gone from memory. */
    evd_log(EVD_LOG_ERROR, "journal: out of memory keeping a failed batch; "
            "restart to recover from what is on disk");
    j->broken = 1;
    return;
  }
  {
    evd_buf_t t = j->pending;
    j->pending = j->inflight;
    j->inflight = t;
    j->inflight.len = 0;
  }
  if (j->started && !uv_is_active((uv_handle_t *)&j->retry_timer))
    uv_timer_start(&j->retry_timer, on_retry_timer, WRITE_RETRY_MS,
                   WRITE_RETRY_MS);
}

static void job_done(uv_work_t *w, int status) {
  evd_journal_t *j = w->data;

  j->job_running = 0;
  if (status != 0 || j->job_err != 0) {
    job_failed(j, status != 0 ? ECANCELED : j->job_err);
  } else {
    if (j->failed)
      evd_log(EVD_LOG_INFO, "journal writes succeed again: taking changes");
    j->failed = 0;
    j->fail_err = 0;
    set_failing(j, 0);
    j->written_lsn = j->inflight_last;
    j->journal_bytes += j->inflight.len;
    j->seg_len = j->job_off + j->inflight.len;
    if (j->job_sync) {
      j->durable_lsn = j->inflight_last;
      j->last_sync_ms = now_ms();
      evd_histogram_observe(&j->stats.fsync, j->job_secs);
    }
    evd_buf_reset(&j->inflight, 1u << 20);
  }
  if (j->on_durable != NULL && !j->failed)
    j->on_durable(j->arg, evd_journal_acked(j));
  kick(j);
  maybe_compact(j);
}

/* Hands what is pending to the pool, unless a write is already there (then
 * it goes with the next one: that is the group commit). */
static void start_job(evd_journal_t *j, int sync) {
  evd_buf_t t = j->inflight;

  j->inflight = j->pending;
  j->pending = t;
  j->pending.len = 0;
  j->inflight_last = j->pending_last > j->written_lsn ? j->pending_last
                                                      : j->written_lsn;
  if (j->job_fd != j->fd) /* a new segment since the last job */
    j->job_torn = 0;
  j->job_fd = j->fd;
  j->job_off = j->seg_len;
  j->job_sync = sync;
  j->job_running = 1;
  j->work.data = j;
  if (uv_queue_work(j->loop, &j->work, job_work, job_done) != 0) {
    j->job_running = 0;
    job_failed(j, EAGAIN);
  }
}

static int sync_due(const evd_journal_t *j) {
  return j->mode == EVD_FSYNC_ALWAYS ||
         (j->mode == EVD_FSYNC_EVERYSEC &&
          now_ms() - j->last_sync_ms >= SYNC_EVERY_MS);
}

static void kick(evd_journal_t *j) {
  if (!j->started || j->job_running || j->failed || j->broken || j->rec_open)
    return;
  if (j->pending.len == 0 && j->close_fd < 0)
    return;
  start_job(j, sync_due(j));
}

static void on_retry_timer(uv_timer_t *t) {
  evd_journal_t *j = t->data;

  if (!j->failed || j->broken) {
    uv_timer_stop(t);
    return;
  }
  if (!j->job_running && !j->rec_open)
    start_job(j, sync_due(j) || j->written_lsn > j->durable_lsn);
}

static void on_sync_timer(uv_timer_t *t) {
  evd_journal_t *j = t->data;

  /* everysec: sync what was written without a sync since. */
  if (!j->job_running && !j->failed && !j->broken &&
      j->written_lsn > j->durable_lsn)
    start_job(j, 1);
  else
    kick(j);
}

uint64_t evd_journal_commit(evd_journal_t *j) {
  uint64_t lsn;

  if (!j->rec_open)
    return 0;
  j->rec_open = 0;
  if (j->pending.oom) {
    /* The change is in memory but cannot be journaled. */
    evd_log(EVD_LOG_ERROR, "journal: out of memory; refusing changes until "
            "a restart");
    j->broken = 1;
    set_failing(j, 1);
    return 0;
  }
  lsn = j->next_lsn++;
  evd__frame_close(&j->pending, j->rec_start, lsn);
  j->pending_last = lsn;
  kick(j);
  maybe_compact(j);
  return lsn;
}

uint64_t evd_journal_last(const evd_journal_t *j) {
  return j->next_lsn - 1;
}

int evd_journal_failed(const evd_journal_t *j) {
  return j->failed || j->broken;
}

int evd_journal_error(const evd_journal_t *j) {
  return j->broken ? ENOMEM : j->failed ? j->fail_err : 0;
}

const evd_journal_stats_t *evd_journal_stats(const evd_journal_t *j) {
  return &j->stats;
}

void evd_journal_start(evd_journal_t *j, uv_loop_t *loop,
                       void (*on_durable)(void *arg, uint64_t lsn),
                       void *arg) {
  j->loop = loop;
  j->on_durable = on_durable;
  j->arg = arg;
  j->started = 1;
  j->last_sync_ms = now_ms();
  uv_timer_init(loop, &j->sync_timer);
  j->sync_timer.data = j;
  uv_timer_init(loop, &j->retry_timer);
  j->retry_timer.data = j;
  if (j->mode == EVD_FSYNC_EVERYSEC)
    uv_timer_start(&j->sync_timer, on_sync_timer, SYNC_EVERY_MS,
                   SYNC_EVERY_MS);
  kick(j);
}

void evd_journal_stop(evd_journal_t *j) {
  if (!j->started)
    return;
  j->started = 0;
  uv_close((uv_handle_t *)&j->sync_timer, NULL);
  uv_close((uv_handle_t *)&j->retry_timer, NULL);
}

/* ---- compaction --------------------------------------------------------- */

/* The fork-and-compact protocol, the one place it is written down. Once
 * the journal has grown past --compact-after and past the last snapshot's
 * size, and no write job, record being built, failure or earlier child is
 * in the way (maybe_compact):
 *   1. The parent creates segment seg+1, header synced (evd__seg_create).
 *      If that fails, nothing changed: retry after COMPACT_RETRY_MS.
 *   2. It forks. If that fails, segment seg+1 is unlinked again and the
 *      same retry follows.
 *   3. The child, holding a copy-on-write view of the table as of LSN L
 *      (the last committed), dies with the parent, closes every fd above
 *      stderr but the directory's (no socket stays open), writes the snapshot of L through
 *      snapshot.tmp, fsync, rename and directory fsync, and exits 0 or 1.
 *   4. The parent at once appends to seg+1; the old segment is synced and
 *      closed by the next write job (close_fd), and the journal's byte count
 *      starts again from zero.
 *   5. On SIGCHLD (evd_journal_reap_child), exit 0 means every record up to
 *      L is in the snapshot: segments below seg+1 are deleted. Any other end
 *      keeps them all (recovery applies them over the older snapshot) and
 *      retries after COMPACT_RETRY_MS.
 *   6. At shutdown (evd_journal_close) a running child is killed: the final
 *      snapshot supersedes it; a snapshot.tmp it leaves is removed at the
 *      next open.
 * A crash anywhere leaves a snapshot and segments that recover to the same
 * state: the old snapshot plus all segments, or the new one plus the
 * segments after it (records at or below its LSN are skipped). */
static void maybe_compact(evd_journal_t *j) {
  uint64_t lsn = j->next_lsn - 1;
  int fd;
  pid_t pid;

  if (!j->started || j->child != 0 || j->failed || j->broken ||
      j->job_running ||
      j->rec_open || j->journal_bytes + j->pending.len < j->compact_after ||
      j->journal_bytes + j->pending.len < j->snapshot_bytes ||
      now_ms() < j->next_compact_ms)
    return;
  fd = evd__seg_create(j->dirfd, j->seg + 1);
  if (fd < 0) {
    evd_log(EVD_LOG_WARN, "journal: cannot start a new segment (%s); will "
            "retry", strerror(errno));
    j->next_compact_ms = now_ms() + COMPACT_RETRY_MS;
    return;
  }
  pid = EVD_FAULT("evictd/snapshot/fork") ? (errno = EAGAIN, -1) : fork();
  if (pid < 0) {
    evd_log(EVD_LOG_WARN, "journal: cannot fork the snapshot writer (%s)",
            strerror(errno));
    close(fd);
    /* Leave no empty segment behind: the next try creates it again. */
    {
      char name[32];
      evd__seg_name(name, sizeof name, j->seg + 1);
      unlinkat(j->dirfd, name, 0);
    }
    j->next_compact_ms = now_ms() + COMPACT_RETRY_MS;
    return;
  }
  if (pid == 0) {
    /* The child: die with the parent, hold no socket open, write, leave. */
    prctl(PR_SET_PDEATHSIG, SIGKILL);
    if (getppid() == 1)
      _exit(1);
    if (j->dirfd > 3)
      close_range(3, (unsigned)j->dirfd - 1, 0);
    close_range((unsigned)j->dirfd + 1, ~0u, 0);
    _exit(evd_snapshot_write(j->dirfd, j->table, lsn, NULL) == 0 ? 0 : 1);
  }
  /* The parent: later records go to the new segment; the old one is
   * synced and closed by the next write job. */
  j->close_fd = j->fd;
  j->fd = fd;
  j->seg++;
  j->seg_len = EVD__SEG_HDR;
  j->child = pid;
  j->child_lsn = lsn;
  j->child_seg = j->seg;
  j->journal_bytes = 0;
  evd_log(EVD_LOG_INFO, "journal: writing a snapshot at LSN %llu (pid %d)",
          (unsigned long long)lsn, (int)pid);
  kick(j);
}

void evd_journal_reap_child(evd_journal_t *j) {
  int status;
  struct stat st;

  if (j->child == 0 || waitpid(j->child, &status, WNOHANG) != j->child)
    return;
  j->child = 0;
  if (WIFEXITED(status) && WEXITSTATUS(status) == 0) {
    evd__seg_drop(j->dirfd, j->child_seg);
    if (fstatat(j->dirfd, "snapshot", &st, 0) == 0)
      j->snapshot_bytes = (uint64_t)st.st_size;
    evd_log(EVD_LOG_INFO, "journal: snapshot at LSN %llu written (%llu "
            "bytes); older segments removed",
            (unsigned long long)j->child_lsn,
            (unsigned long long)j->snapshot_bytes);
  } else {
    evd_log(EVD_LOG_WARN, "journal: the snapshot writer failed (status %d); "
            "keeping the journal, retrying later", status);
    j->next_compact_ms = now_ms() + COMPACT_RETRY_MS;
  }
}

/* ---- shutdown ----------------------------------------------------------- */

int evd_journal_close(evd_journal_t *j, evd_table_t *table) {
  uint64_t lsn = j->next_lsn - 1;
  int err = 0, status;

  if (j->child != 0) { /* a final snapshot supersedes it */
    kill(j->child, SIGKILL);
    waitpid(j->child, &status, 0);
    j->child = 0;
  }
  if (j->close_fd >= 0) {
    close(j->close_fd);
    j->close_fd = -1;
  }
  /* First make the journal complete, so that a failing snapshot loses
   * nothing; then the snapshot makes all segments redundant. After a
   * failed write, this is one more try (from where that write started). */
  j->failed = j->broken ||
              (j->failed && ftruncate(j->fd, (off_t)j->seg_len) != 0);
  if (!j->failed && j->pending.len > 0 &&
      (EVD_FAULT("evictd/journal/write")
           ? (errno = ENOSPC, 1)
           : evd__write_all(j->fd, j->pending.data, j->pending.len) != 0))
    j->failed = 1;
  if (!j->failed &&
      (EVD_FAULT("evictd/journal/sync") ? (errno = EIO, 1)
                                        : fdatasync(j->fd) != 0))
    j->failed = 1;
  close(j->fd);
  if (j->failed) {
    uint64_t lost = lsn - evd_journal_acked(j);
    evd_log(EVD_LOG_ERROR, "journal: not writing a snapshot over a failed "
            "journal; the files on disk are kept as they are");
    if (lost > 0)
      evd_log(EVD_LOG_ERROR, "journal: %llu change%s never written (none "
              "was acknowledged: each was answered 503 or not at all)",
              (unsigned long long)lost, lost == 1 ? " was" : "s were");
    err = EVD_EIO;
  } else if (evd_snapshot_write(j->dirfd, table, lsn, NULL) != 0) {
    evd_log(EVD_LOG_ERROR, "journal: final snapshot failed (%s); the "
            "journal is kept and replays on start", strerror(errno));
    err = EVD_EIO;
  } else {
    evd__seg_drop(j->dirfd, UINT32_MAX);
    evd_log(EVD_LOG_INFO, "state: snapshot of %u session%s at LSN %llu",
            evd_table_count(table), evd_table_count(table) == 1 ? "" : "s",
            (unsigned long long)lsn);
  }
  evd_buf_free(&j->pending);
  evd_buf_free(&j->inflight);
  close(j->lockfd);
  close(j->dirfd);
  free(j);
  return err;
}

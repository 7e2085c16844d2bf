/* The journal: one record per state-changing request, appended to numbered
 * segment files in the state directory, written and synced in libuv's
 * thread pool so that the loop never waits for the disk. Records queue up
 * while a write is in flight and go out together in the next one (group
 * commit). A forked child writes a snapshot when the journal has grown; the
 * segments it covers are then deleted.
 *
 * The segment and record format is described in record.h. */
#include "evictd/journal.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>
#include <uv.h>

#include "evictd/buf.h"
#include "evictd/crc.h"
#include "fault.h"
#include "evictd/log.h"
#include "evictd/metrics.h"

#define SEG_HDR EVD_SEG_MAGIC_LEN
#define REC_HDR 12 /* u32 len + u64 lsn */
#define REC_MAX (1u << 30)
#define SYNC_EVERY_MS 1000
#define COMPACT_RETRY_MS 30000
#define WRITE_RETRY_MS 500

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

  evd_metrics_t *metrics;
  void (*on_durable)(void *arg, uint64_t lsn);
  void *arg;
};

/* ---- encoding ----------------------------------------------------------- */

int evd_journal_room(evd_journal_t *j, size_t n) {
  return evd_buf_room(&j->pending, n);
}

void evd_journal_add(evd_journal_t *j, const evd_op_t *op) {
  if (!j->rec_open) {
    static const unsigned char zero[REC_HDR];
    j->rec_start = j->pending.len;
    evd_buf_add(&j->pending, zero, REC_HDR); /* length and LSN, at commit */
    j->rec_open = 1;
  }
  evd_record_put_op(&j->pending, op);
}

/* ---- loading ------------------------------------------------------------ */

static int cmp_u32(const void *a, const void *b) {
  uint32_t x = *(const uint32_t *)a, y = *(const uint32_t *)b;
  return (x > y) - (x < y);
}

/* The numbers of the journal.NNNNNNNN files, ascending. */
static int list_segments(int dirfd, uint32_t **out, size_t *n) {
  int fd = dup(dirfd);
  DIR *d = fd >= 0 ? fdopendir(fd) : NULL;
  struct dirent *e;
  uint32_t *v = NULL;
  size_t cap = 0;

  *n = 0;
  if (d == NULL) {
    if (fd >= 0)
      close(fd);
    return EVD_EIO;
  }
  rewinddir(d);
  while ((e = readdir(d)) != NULL) {
    unsigned long num;
    char *end;
    if (strncmp(e->d_name, "journal.", 8) != 0)
      continue;
    num = strtoul(e->d_name + 8, &end, 10);
    if (*end != '\0' || end == e->d_name + 8 || num == 0 || num > UINT32_MAX)
      continue;
    if (*n == cap) {
      uint32_t *q = realloc(v, (cap ? cap * 2 : 16) * sizeof *v);
      if (q == NULL) {
        free(v);
        closedir(d);
        return EVD_ENOMEM;
      }
      v = q;
      cap = cap ? cap * 2 : 16;
    }
    v[(*n)++] = (uint32_t)num;
  }
  closedir(d);
  if (*n > 1) /* (v may be NULL when there is none) */
    qsort(v, *n, sizeof *v, cmp_u32);
  *out = v;
  return 0;
}

static void seg_name(char *name, size_t len, uint32_t seg) {
  snprintf(name, len, "journal.%08u", seg);
}

/* Reads a whole file into memory. */
static int slurp(int dirfd, const char *name, unsigned char **data,
                 size_t *size) {
  int fd = openat(dirfd, name, O_RDONLY | O_CLOEXEC);
  struct stat st;
  size_t got = 0;

  if (fd < 0 || fstat(fd, &st) != 0) {
    if (fd >= 0)
      close(fd);
    return EVD_EIO;
  }
  *data = malloc((size_t)st.st_size + 1);
  if (*data == NULL) {
    close(fd);
    return EVD_ENOMEM;
  }
  while (got < (size_t)st.st_size) {
    ssize_t r = read(fd, *data + got, (size_t)st.st_size - got);
    if (r <= 0) {
      if (r < 0 && errno == EINTR)
        continue;
      break;
    }
    got += (size_t)r;
  }
  close(fd);
  *size = got;
  return 0;
}

/* A whole, checksummed record at `at`: its payload length and LSN. */
static int record_at(const unsigned char *d, size_t size, size_t at,
                     uint32_t *len, uint64_t *lsn) {
  uint32_t l;

  if (size - at < REC_HDR + 4)
    return 0;
  l = evd_le32(d + at);
  if (l > REC_MAX || size - at - REC_HDR - 4 < l)
    return 0;
  if (evd_crc32c(0, d + at + 4, 8 + (size_t)l) !=
      evd_le32(d + at + REC_HDR + l))
    return 0;
  *len = l;
  *lsn = evd_le64(d + at + 4);
  return 1;
}

/* After a bad record: does any whole record follow? Then the file was
 * damaged in the middle, which must not pass for a torn end. */
static int record_follows(const unsigned char *d, size_t size, size_t at) {
  uint64_t lsn;
  uint32_t len;

  for (at++; at + REC_HDR + 4 <= size; at++)
    if (record_at(d, size, at, &len, &lsn))
      return 1;
  return 0;
}

typedef struct {
  uint64_t snap_lsn, last_lsn; /* last_lsn 0: no record seen yet */
  uint64_t records, applied;
  evd_apply_fn apply;
  void *ctx;
  uint32_t *scratch;
  size_t cap;
} replay_t;

/* Replays one segment; a torn end is cut off when it is the last. */
static int replay_segment(int dirfd, uint32_t seg, int last, replay_t *r,
                          uint64_t *bytes, char *why, size_t wlen) {
  char name[32];
  unsigned char *d = NULL;
  size_t size, at;
  int err, version;

  seg_name(name, sizeof name, seg);
  err = slurp(dirfd, name, &d, &size);
  if (err != 0) {
    snprintf(why, wlen, "cannot read %s: %s", name, strerror(errno));
    return err;
  }
  version = size < SEG_HDR                                  ? 0
            : memcmp(d, EVD_SEG_MAGIC_V2, SEG_HDR) == 0 ? 2
            : memcmp(d, EVD_SEG_MAGIC_V1, SEG_HDR) == 0 ? 1
                                                      : 0;
  if (version == 0) {
    /* A segment is created with its header in one write and synced before
     * any record goes in, so only a crash at creation leaves it short. */
    if (last && size < SEG_HDR && memcmp(d, EVD_SEG_MAGIC_V2, size) == 0) {
      free(d);
      *bytes += size;
      return 0;
    }
    free(d);
    snprintf(why, wlen, "%s is not an evictd journal segment", name);
    return EVD_ECORRUPT;
  }
  for (at = SEG_HDR; at < size;) {
    uint64_t lsn;
    uint32_t len;
    if (!record_at(d, size, at, &len, &lsn)) {
      if (!last || record_follows(d, size, at)) {
        snprintf(why, wlen, "%s is damaged at byte %zu", name, at);
        free(d);
        return EVD_ECORRUPT;
      }
      /* A torn last record: drop it, and cut it off so that records
       * appended later never sit behind garbage. */
      evd_log(EVD_LOG_WARN, "%s: dropping a torn record at byte %zu "
              "(%zu bytes)", name, at, size - at);
      int fd = openat(dirfd, name, O_WRONLY | O_CLOEXEC);
      if (fd < 0 || ftruncate(fd, (off_t)at) != 0 || fsync(fd) != 0) {
        snprintf(why, wlen, "cannot truncate %s: %s", name, strerror(errno));
        if (fd >= 0)
          close(fd);
        free(d);
        return EVD_EIO;
      }
      close(fd);
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
    if (lsn > r->snap_lsn) {
      err = evd_record_replay(d + at + REC_HDR, len, version, r->apply,
                              r->ctx, &r->scratch, &r->cap);
      if (err != 0) {
        snprintf(why, wlen, "%s: record LSN %llu does not replay (%s)", name,
                 (unsigned long long)lsn, evd_strerror(err));
        free(d);
        return err == EVD_ENOMEM ? err : EVD_ECORRUPT;
      }
      r->applied++;
    }
    at += REC_HDR + len + 4;
  }
  *bytes += size;
  free(d);
  return 0;
}

/* Creates segment `seg` with its header, durably. Returns the fd or -1. */
static int create_segment(int dirfd, uint32_t seg) {
  char name[32];
  int fd;

  seg_name(name, sizeof name, seg);
  if (EVD_FAULT("evictd/journal/open")) {
    errno = EIO;
    return -1;
  }
  fd = openat(dirfd, name, O_WRONLY | O_CREAT | O_EXCL | O_APPEND | O_CLOEXEC,
              0600);
  if (fd < 0)
    return -1;
  if (write(fd, EVD_SEG_MAGIC_V2, SEG_HDR) != SEG_HDR || fsync(fd) != 0 ||
      fsync(dirfd) != 0) {
    int e = errno ? errno : EIO;
    close(fd);
    unlinkat(dirfd, name, 0);
    errno = e;
    return -1;
  }
  return fd;
}

int evd_journal_open(evd_journal_t **out, const char *dir, evd_fsync_t mode,
                     uint64_t compact_after, evd_table_t *table,
                     evd_apply_fn apply, void *ctx, char *why, size_t len) {
  evd_journal_t *j = calloc(1, sizeof *j);
  replay_t r = {.apply = apply, .ctx = ctx};
  uint32_t *segs = NULL, old_max;
  size_t nseg = 0, i;
  struct timespec t0, t1;
  int err;

  if (j == NULL)
    return EVD_ENOMEM;
  clock_gettime(CLOCK_MONOTONIC, &t0);
  j->mode = mode;
  j->compact_after = compact_after;
  j->table = table;
  j->fd = j->lockfd = j->close_fd = -1;
  evd_buf_init(&j->pending);
  evd_buf_init(&j->inflight);
  if (mkdir(dir, 0700) != 0 && errno != EEXIST) {
    snprintf(why, len, "cannot create %s: %s", dir, strerror(errno));
    free(j);
    return EVD_EIO;
  }
  j->dirfd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (j->dirfd < 0) {
    snprintf(why, len, "cannot open %s: %s", dir, strerror(errno));
    free(j);
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
  unlinkat(j->dirfd, "snapshot.tmp", 0); /* from a snapshot cut short */

  /* Saved state may exceed today's --max-sessions; load it all anyway. */
  old_max = evd_table_set_max(table, UINT32_MAX);
  err = evd_snapshot_load(j->dirfd, table, &r.snap_lsn, &j->snapshot_bytes,
                          why, len);
  if (err == EVD_ENOENT)
    err = 0;
  if (err == 0)
    err = list_segments(j->dirfd, &segs, &nseg);
  for (i = 0; i < nseg && err == 0; i++)
    err = replay_segment(j->dirfd, segs[i], i + 1 == nseg, &r,
                         &j->journal_bytes, why, len);
  evd_table_set_max(table, old_max);
  free(r.scratch);
  if (err != 0)
    goto fail;

  j->next_lsn = (r.last_lsn > r.snap_lsn ? r.last_lsn : r.snap_lsn) + 1;
  j->written_lsn = j->durable_lsn = j->next_lsn - 1;
  j->seg = nseg > 0 ? segs[nseg - 1] + 1 : 1;
  j->child_seg = j->seg;
  free(segs);
  segs = NULL;
  j->fd = create_segment(j->dirfd, j->seg);
  j->seg_len = SEG_HDR;
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
  *out = j;
  return 0;
fail:
  free(segs);
  if (j->lockfd >= 0)
    close(j->lockfd);
  close(j->dirfd);
  free(j);
  return err;
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
  size_t off = 0;
  struct timespec t0, t1;

  j->job_err = 0;
  if (j->job_torn && ftruncate(j->job_fd, (off_t)j->job_off) != 0) {
    j->job_err = errno;
    return;
  }
  j->job_torn = 1; /* until the whole batch is in */
  while (off < j->inflight.len) {
    ssize_t n = EVD_FAULT("evictd/journal/write")
                    ? (errno = ENOSPC, -1)
                    : write(j->job_fd, j->inflight.data + off,
                            j->inflight.len - off);
    if (n < 0 && errno == EINTR)
      continue;
    if (n <= 0) {
      j->job_err = n < 0 ? errno : EIO;
      return;
    }
    off += (size_t)n;
  }
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
  if (j->metrics != NULL)
    j->metrics->journal_failing = failing;
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
  if (j->metrics != NULL)
    j->metrics->journal_errors++;
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
      if (j->metrics != NULL)
        evd_metrics_observe(&j->metrics->fsync, j->job_secs);
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
  unsigned char *rec;
  uint64_t lsn;
  uint32_t len;

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
  rec = (unsigned char *)j->pending.data + j->rec_start;
  len = (uint32_t)(j->pending.len - j->rec_start - REC_HDR);
  evd_le32_set(rec, len);
  evd_le32_set(rec + 4, (uint32_t)lsn);
  evd_le32_set(rec + 8, (uint32_t)(lsn >> 32));
  evd_record_put32(&j->pending, evd_crc32c(0, rec + 4, 8 + (size_t)len));
  j->pending_last = lsn;
  kick(j);
  maybe_compact(j);
  return lsn;
}

uint64_t evd_journal_last(const evd_journal_t *j) {
  return j->next_lsn - 1;
}

uint64_t evd_journal_durable(const evd_journal_t *j) {
  return j->durable_lsn;
}

evd_fsync_t evd_journal_mode(const evd_journal_t *j) {
  return j->mode;
}

int evd_journal_failed(const evd_journal_t *j) {
  return j->failed || j->broken;
}

int evd_journal_error(const evd_journal_t *j) {
  return j->broken ? ENOMEM : j->failed ? j->fail_err : 0;
}

void evd_journal_start(evd_journal_t *j, uv_loop_t *loop,
                       evd_metrics_t *metrics,
                       void (*on_durable)(void *arg, uint64_t lsn),
                       void *arg) {
  j->loop = loop;
  j->metrics = metrics;
  j->on_durable = on_durable;
  j->arg = arg;
  j->started = 1;
  j->last_sync_ms = now_ms();
  if (metrics != NULL)
    metrics->journal = 1;
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

/* Deletes segments numbered below `below`. */
static void drop_segments(evd_journal_t *j, uint32_t below) {
  uint32_t *segs = NULL;
  size_t n = 0, i;
  char name[32];

  if (list_segments(j->dirfd, &segs, &n) != 0)
    return;
  for (i = 0; i < n; i++)
    if (segs[i] < below) {
      seg_name(name, sizeof name, segs[i]);
      unlinkat(j->dirfd, name, 0);
    }
  free(segs);
  fsync(j->dirfd);
}

/* Once the journal has grown past --compact-after and past the last
 * snapshot's size, a forked child writes a new snapshot from its
 * copy-on-write view of memory while the parent goes on in a new segment. */
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
  fd = create_segment(j->dirfd, j->seg + 1);
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
      seg_name(name, sizeof name, j->seg + 1);
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
  j->seg_len = SEG_HDR;
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
    drop_segments(j, j->child_seg);
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
  size_t off = 0;
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
  while (!j->failed && off < j->pending.len) {
    ssize_t n = EVD_FAULT("evictd/journal/write")
                    ? (errno = ENOSPC, -1)
                    : write(j->fd, j->pending.data + off, j->pending.len - off);
    if (n < 0 && errno == EINTR)
      continue;
    if (n <= 0) {
      j->failed = 1;
      break;
    }
    off += (size_t)n;
  }
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
    drop_segments(j, UINT32_MAX);
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

/* --cache-dir's writer (disk.h): a queue of writes and removals, first in
 * first out, and the thread that makes them. */
#include "serve/engine/disk.h"

#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#define say(...) fprintf(stderr, "evictd-llama serve: " __VA_ARGS__)

/* How long a failed write waits before it is tried again. */
#define RETRY_S 2

typedef struct job_s {
  struct job_s *next;
  bool remove;
  char name[64];
  disk_parts_t parts;     /* a write's */
} job_t;

struct disk_s {
  pthread_mutex_t mu;
  pthread_cond_t work;
  pthread_t thread;
  job_t *head, *tail;
  job_t *failed;          /* writes that failed, tried again RETRY_S
                             after the first of them (the newest of each
                             file) */
  struct timespec retry;  /* when (CLOCK_REALTIME, the condition's) */
  bool stopping;
  bool failing;           /* the last write failed (told once) */
  disk_counts_t n;
  char dir[4096];
};

uint64_t disk_sum(uint64_t h, const void *p, size_t len) {
  const uint64_t prime = 0x100000001b3ull;
  const unsigned char *b = p;
  size_t i = 0;
  h ^= 0xcbf29ce484222325ull;
  for (; i + 8 <= len; i += 8) {
    uint64_t w;
    memcpy(&w, b + i, 8);
    h = (h ^ w) * prime;
    h ^= h >> 29;
  }
  for (; i < len; i++)
    h = (h ^ b[i]) * prime;
  return (h ^ len) * prime;
}

static void job_free(job_t *j) {
  if (!j->remove && j->parts.free_fn != NULL)
    j->parts.free_fn(j->parts.ud);
  free(j);
}

/* Writes all of len bytes at p to fd. 0, or -1 (errno). */
static int write_all(int fd, const void *p, size_t len) {
  const char *c = p;
  while (len > 0) {
    ssize_t w = write(fd, c, len);
    if (w < 0 && errno == EINTR)
      continue;
    if (w <= 0)
      return -1;
    c += w;
    len -= (size_t)w;
  }
  return 0;
}

/* One write: the head's checksum filled in, every part written under the
 * temporary name, fsynced, renamed, the folder fsynced. 0, or -1 (errno
 * kept for the message; the temporary file removed). */
static int put_file(disk_t *d, const job_t *j, size_t *bytes) {
  char path[4200], tmp[4300];
  const disk_parts_t *pt = &j->parts;
  snprintf(path, sizeof(path), "%s/%s", d->dir, j->name);
  snprintf(tmp, sizeof(tmp), "%s.tmp", path);
  unsigned char head[1024];
  if (pt->len[0] > sizeof(head) || pt->sum_at + 8 > pt->len[0]) {
    errno = EINVAL;
    return -1;
  }
  memcpy(head, pt->p[0], pt->len[0]);
  memset(head + pt->sum_at, 0, 8);
  uint64_t sum = disk_sum(0, head, pt->len[0]);
  *bytes = pt->len[0];
  for (int k = 1; k < 4; k++) {
    sum = disk_sum(sum, pt->p[k], pt->len[k]);
    *bytes += pt->len[k];
  }
  memcpy(head + pt->sum_at, &sum, 8);
  int fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
  if (fd < 0)
    return -1;
  int rc = write_all(fd, head, pt->len[0]);
  for (int k = 1; k < 4 && rc == 0; k++)
    rc = write_all(fd, pt->p[k], pt->len[k]);
  if (rc == 0)
    rc = fsync(fd);
  int err = errno;
  if (close(fd) != 0 && rc == 0) {
    rc = -1;
    err = errno;
  }
  if (rc == 0 && rename(tmp, path) != 0) {
    rc = -1;
    err = errno;
  }
  if (rc != 0) {
    unlink(tmp);
    errno = err;
    return -1;
  }
  /* The rename itself made durable. */
  int dfd = open(d->dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (dfd >= 0) {
    fsync(dfd);
    close(dfd);
  }
  return 0;
}

/* Puts j at the queue's end (under d->mu). */
static void append(disk_t *d, job_t *j) {
  j->next = NULL;
  if (d->tail != NULL)
    d->tail->next = j;
  else
    d->head = j;
  d->tail = j;
}

/* The failed writes queued again (under d->mu; still pending). */
static void requeue(disk_t *d) {
  while (d->failed != NULL) {
    job_t *j = d->failed;
    d->failed = j->next;
    append(d, j);
  }
}

static bool due(const struct timespec *at) {
  struct timespec now;
  clock_gettime(CLOCK_REALTIME, &now);
  return now.tv_sec > at->tv_sec ||
         (now.tv_sec == at->tv_sec && now.tv_nsec >= at->tv_nsec);
}

/* Waits (under d->mu) for work, or till the failed writes are due. */
static void await(disk_t *d) {
  if (d->failed == NULL)
    pthread_cond_wait(&d->work, &d->mu);
  else
    pthread_cond_timedwait(&d->work, &d->mu, &d->retry);
}

static void *writer(void *arg) {
  disk_t *d = arg;
  pthread_mutex_lock(&d->mu);
  bool last_try = false;
  for (;;) {
    if (d->failed != NULL && due(&d->retry))
      requeue(d);
    while (d->head == NULL && !d->stopping) {
      await(d);
      if (d->failed != NULL && due(&d->retry))
        requeue(d);
    }
    if (d->head == NULL && d->failed != NULL && !last_try) {
      last_try = true; /* stopping: the failed ones tried once more */
      requeue(d);
    }
    job_t *j = d->head;
    if (j == NULL)
      break; /* stopping, and nothing left */
    d->head = j->next;
    if (d->head == NULL)
      d->tail = NULL;
    pthread_mutex_unlock(&d->mu);
    size_t bytes = 0;
    int rc = 0;
    char path[4200];
    if (j->remove) {
      snprintf(path, sizeof(path), "%s/%s", d->dir, j->name);
      unlink(path);
    } else {
      rc = put_file(d, j, &bytes);
    }
    int err = errno;
    pthread_mutex_lock(&d->mu);
    if (!j->remove && rc == 0) {
      d->n.pending--;
      d->n.writes++;
      d->n.bytes += bytes;
      if (d->failing)
        say("writing %s again\n", d->dir);
      d->failing = false;
    } else if (rc != 0) {
      d->n.errors++;
      if (!d->failing)
        say("cannot write %s/%s: %s (conversations are kept in memory, "
            "their writes tried again every %d s)\n", d->dir, j->name,
            strerror(err), RETRY_S);
      d->failing = true;
      if (!d->stopping || !last_try) {
        if (d->failed == NULL) {
          clock_gettime(CLOCK_REALTIME, &d->retry);
          d->retry.tv_sec += RETRY_S;
        }
        j->next = d->failed; /* still pending: kept to try again */
        d->failed = j;
        continue;
      }
      d->n.pending--;
    } else {
      d->n.pending--;
    }
    pthread_mutex_unlock(&d->mu);
    job_free(j);
    pthread_mutex_lock(&d->mu);
  }
  pthread_mutex_unlock(&d->mu);
  return NULL;
}

int disk_open(disk_t **out, const char *dir) {
  disk_t *d = calloc(1, sizeof(*d));
  *out = NULL;
  if (d == NULL)
    return -1;
  snprintf(d->dir, sizeof(d->dir), "%s", dir);
  pthread_mutex_init(&d->mu, NULL);
  pthread_cond_init(&d->work, NULL);
  if (pthread_create(&d->thread, NULL, writer, d) != 0) {
    pthread_cond_destroy(&d->work);
    pthread_mutex_destroy(&d->mu);
    free(d);
    return -1;
  }
  *out = d;
  return 0;
}

void disk_close(disk_t *d) {
  if (d == NULL)
    return;
  pthread_mutex_lock(&d->mu);
  d->stopping = true;
  pthread_cond_signal(&d->work);
  pthread_mutex_unlock(&d->mu);
  pthread_join(d->thread, NULL);
  pthread_cond_destroy(&d->work);
  pthread_mutex_destroy(&d->mu);
  free(d);
}

/* Drops the failed writes of `name` (under d->mu). */
static void drop_failed(disk_t *d, const char *name) {
  for (job_t **p = &d->failed; *p != NULL;) {
    job_t *j = *p;
    if (strcmp(j->name, name) != 0) {
      p = &j->next;
      continue;
    }
    *p = j->next;
    d->n.pending--;
    job_free(j);
  }
}

/* Drops the writes of `name` still waiting, failed ones included (under
 * d->mu). */
static void drop_waiting(disk_t *d, const char *name) {
  drop_failed(d, name);
  job_t *prev = NULL;
  for (job_t *j = d->head, *next; j != NULL; j = next) {
    next = j->next;
    if (j->remove || strcmp(j->name, name) != 0) {
      prev = j;
      continue;
    }
    if (prev != NULL)
      prev->next = next;
    else
      d->head = next;
    if (d->tail == j)
      d->tail = prev;
    d->n.pending--;
    job_free(j);
  }
}

static void enqueue(disk_t *d, job_t *j) {
  append(d, j);
  d->n.pending++;
  pthread_cond_signal(&d->work);
}

void disk_write(disk_t *d, const char *name, const disk_parts_t *parts) {
  job_t *j = calloc(1, sizeof(*j));
  if (j == NULL) {
    if (parts->free_fn != NULL)
      parts->free_fn(parts->ud);
    return;
  }
  snprintf(j->name, sizeof(j->name), "%s", name);
  j->parts = *parts;
  pthread_mutex_lock(&d->mu);
  drop_waiting(d, name);
  enqueue(d, j);
  pthread_mutex_unlock(&d->mu);
}

void disk_remove(disk_t *d, const char *name) {
  job_t *j = calloc(1, sizeof(*j));
  pthread_mutex_lock(&d->mu);
  drop_waiting(d, name);
  if (j != NULL) {
    j->remove = true;
    snprintf(j->name, sizeof(j->name), "%s", name);
    enqueue(d, j);
  }
  pthread_mutex_unlock(&d->mu);
  if (j == NULL) { /* out of memory: removed here and now */
    char path[4200];
    snprintf(path, sizeof(path), "%s/%s", d->dir, name);
    unlink(path);
  }
}

void disk_counts(disk_t *d, disk_counts_t *out) {
  if (d == NULL) {
    memset(out, 0, sizeof(*out));
    return;
  }
  pthread_mutex_lock(&d->mu);
  *out = d->n;
  pthread_mutex_unlock(&d->mu);
}

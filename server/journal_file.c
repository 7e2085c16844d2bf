/* The journal's files: naming, listing, creating and dropping segments,
 * framing records (u32 len, u64 lsn, payload, u32 crc32c; see record.h),
 * and the one write loop that every writer of the state directory uses. */
#include "journal_file.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "crc.h"
#include "record.h"
#include "fault.h"

int evd__write_all(int fd, const void *p, size_t n) {
  const unsigned char *b = p;
  size_t off = 0;

  while (off < n) {
    ssize_t k = write(fd, b + off, n - off);
    if (k < 0 && errno == EINTR)
      continue;
    if (k <= 0) {
      if (k == 0)
        errno = EIO;
      return errno;
    }
    off += (size_t)k;
  }
  return 0;
}

int evd__slurp(int dirfd, const char *name, unsigned char **data,
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

void evd__seg_name(char *name, size_t len, uint32_t seg) {
  snprintf(name, len, "journal.%08u", seg);
}

static int cmp_u32(const void *a, const void *b) {
  uint32_t x = *(const uint32_t *)a, y = *(const uint32_t *)b;
  return (x > y) - (x < y);
}

int evd__seg_list(int dirfd, uint32_t **out, size_t *n) {
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

int evd__seg_create(int dirfd, uint32_t seg) {
  char name[32];
  int fd;

  evd__seg_name(name, sizeof name, seg);
  if (EVD_FAULT("evictd/journal/open")) {
    errno = EIO;
    return -1;
  }
  fd = openat(dirfd, name, O_WRONLY | O_CREAT | O_EXCL | O_APPEND | O_CLOEXEC,
              0600);
  if (fd < 0)
    return -1;
  /* The header is synced before any record goes in: recovery relies on
   * that to tell a segment cut short at its creation. */
  if (evd__write_all(fd, EVD_SEG_MAGIC_V2, EVD__SEG_HDR) != 0 ||
      fsync(fd) != 0 || fsync(dirfd) != 0) {
    int e = errno ? errno : EIO;
    close(fd);
    unlinkat(dirfd, name, 0);
    errno = e;
    return -1;
  }
  return fd;
}

void evd__seg_drop(int dirfd, uint32_t below) {
  uint32_t *segs = NULL;
  size_t n = 0, i;
  char name[32];

  if (evd__seg_list(dirfd, &segs, &n) != 0)
    return;
  for (i = 0; i < n; i++)
    if (segs[i] < below) {
      evd__seg_name(name, sizeof name, segs[i]);
      unlinkat(dirfd, name, 0);
    }
  free(segs);
  fsync(dirfd);
}

size_t evd__frame_open(evd_buf_t *b) {
  static const unsigned char zero[EVD__REC_HDR];
  size_t start = b->len;

  evd_buf_add(b, zero, EVD__REC_HDR); /* length and LSN, at close */
  return start;
}

void evd__frame_close(evd_buf_t *b, size_t start, uint64_t lsn) {
  unsigned char *rec = (unsigned char *)b->data + start;
  uint32_t len = (uint32_t)(b->len - start - EVD__REC_HDR);

  evd_le32_set(rec, len);
  evd_le32_set(rec + 4, (uint32_t)lsn);
  evd_le32_set(rec + 8, (uint32_t)(lsn >> 32));
  evd_record_put32(b, evd_crc32c(0, rec + 4, 8 + (size_t)len));
}

int evd__frame_at(const unsigned char *d, size_t size, size_t at,
                  uint32_t *len, uint64_t *lsn) {
  uint32_t l;

  if (size - at < EVD__REC_HDR + EVD__REC_TAIL)
    return 0;
  l = evd_le32(d + at);
  if (l > EVD__REC_MAX || size - at - EVD__REC_HDR - EVD__REC_TAIL < l)
    return 0;
  if (evd_crc32c(0, d + at + 4, 8 + (size_t)l) !=
      evd_le32(d + at + EVD__REC_HDR + l))
    return 0;
  *len = l;
  *lsn = evd_le64(d + at + 4);
  return 1;
}

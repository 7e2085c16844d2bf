/* Snapshots: the whole session table in one file, written atomically.
 *
 * Layout (integers little-endian):
 *   header   "EVDSNAP1", u64 lsn, u64 sessions
 *   session  u32 length, payload, u32 crc32c(payload), where payload is
 *              u8 idlen, id, u32 budget, sinks, size, head, tail, newest,
 *              u32 replay (0, or npos), then if npos: u32 nvictims, u32
 *              size, positions[npos], victims[nvictims], slots[npos],
 *              then the ring: u32 pos[budget + 1]
 *   trailer  "EVDSEND1", u64 sessions, u32 crc32c(header)
 * Writing may run in a forked child, so it allocates nothing: one static
 * buffer is filled and written out. */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "evictd/crc.h"
#include "evictd/journal.h"

#define TMP_NAME "snapshot.tmp"
#define NAME "snapshot"
#define OUT_BUF (1u << 20)

typedef struct {
  int fd, err;
  size_t len;
  uint64_t total;
  unsigned char *buf;
} writer_t;

static void flush_out(writer_t *w) {
  size_t off = 0;

  while (!w->err && off < w->len) {
    ssize_t n = write(w->fd, w->buf + off, w->len - off);
    if (n < 0 && errno == EINTR)
      continue;
    if (n <= 0)
      w->err = errno ? errno : EIO;
    else
      off += (size_t)n;
  }
  w->total += w->len;
  w->len = 0;
}

static void put(writer_t *w, const void *p, size_t n) {
  const unsigned char *b = p;

  while (n > 0) {
    size_t room = OUT_BUF - w->len, k = n < room ? n : room;
    memcpy(w->buf + w->len, b, k);
    w->len += k;
    b += k;
    n -= k;
    if (w->len == OUT_BUF)
      flush_out(w);
  }
}

static void le32(unsigned char *p, uint32_t v) {
  p[0] = (unsigned char)v;
  p[1] = (unsigned char)(v >> 8);
  p[2] = (unsigned char)(v >> 16);
  p[3] = (unsigned char)(v >> 24);
}

static void le64(unsigned char *p, uint64_t v) {
  le32(p, (uint32_t)v);
  le32(p + 4, (uint32_t)(v >> 32));
}

static uint32_t get32(const unsigned char *p) {
  return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 |
         (uint32_t)p[3] << 24;
}

static uint64_t get64(const unsigned char *p) {
  return (uint64_t)get32(p) | (uint64_t)get32(p + 4) << 32;
}

/* Feeds a run of uint32 into both the output and the record's CRC. */
static void put32s(writer_t *w, uint32_t *crc, const uint32_t *v, size_t n) {
  unsigned char tmp[4 * 64];

  while (n > 0) {
    size_t k = n < 64 ? n : 64, i;
    for (i = 0; i < k; i++)
      le32(tmp + 4 * i, v[i]);
    put(w, tmp, 4 * k);
    *crc = evd_crc32c(*crc, tmp, 4 * k);
    v += k;
    n -= k;
  }
}

static void write_session(writer_t *w, const evd_session_t *s) {
  const evd_window_t *win = evd_session_window(s);
  evd_replay_t rp;
  int has_rp = evd_session_replay_get(s, &rp);
  uint32_t fields[7], crc = 0, len;
  unsigned char b[4];

  len = 1 + s->idlen + 4 * 7 + 4 * (win->budget + 1);
  if (has_rp)
    len += 4 * (2 + 2 * rp.npos + rp.nvictims);
  le32(b, len);
  put(w, b, 4);
  b[0] = s->idlen;
  put(w, b, 1);
  crc = evd_crc32c(crc, b, 1);
  put(w, s->id, s->idlen);
  crc = evd_crc32c(crc, s->id, s->idlen);
  fields[0] = win->budget;
  fields[1] = win->sinks;
  fields[2] = win->size;
  fields[3] = win->head;
  fields[4] = win->tail;
  fields[5] = win->newest;
  fields[6] = has_rp ? rp.npos : 0;
  put32s(w, &crc, fields, 7);
  if (has_rp) {
    fields[0] = rp.nvictims;
    fields[1] = rp.size;
    put32s(w, &crc, fields, 2);
    put32s(w, &crc, rp.positions, rp.npos);
    put32s(w, &crc, rp.victims, rp.nvictims);
    put32s(w, &crc, rp.slots, rp.npos);
  }
  put32s(w, &crc, win->pos, (size_t)win->budget + 1);
  le32(b, crc);
  put(w, b, 4);
}

int evd_snapshot_write(int dirfd, const evd_table_t *table, uint64_t lsn,
                       uint64_t *bytes) {
  static unsigned char buf[OUT_BUF];
  writer_t w = {.buf = buf};
  const evd_session_t *s;
  unsigned char hdr[24], tail[20];
  uint64_t n = evd_table_count(table);

  w.fd = openat(dirfd, TMP_NAME, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC,
                0600);
  if (w.fd < 0)
    return EVD_EIO;
  memcpy(hdr, "EVDSNAP1", 8);
  le64(hdr + 8, lsn);
  le64(hdr + 16, n);
  put(&w, hdr, sizeof hdr);
  for (s = evd_table_oldest(table); s != NULL; s = evd_table_younger(s))
    write_session(&w, s);
  memcpy(tail, "EVDSEND1", 8);
  le64(tail + 8, n);
  le32(tail + 16, evd_crc32c(0, hdr, sizeof hdr));
  put(&w, tail, sizeof tail);
  flush_out(&w);
  if (w.err == 0 && fsync(w.fd) != 0)
    w.err = errno;
  if (close(w.fd) != 0 && w.err == 0)
    w.err = errno;
  if (w.err == 0 && renameat(dirfd, TMP_NAME, dirfd, NAME) != 0)
    w.err = errno;
  if (w.err == 0 && fsync(dirfd) != 0)
    w.err = errno;
  if (w.err != 0) {
    unlinkat(dirfd, TMP_NAME, 0);
    errno = w.err;
    return EVD_EIO;
  }
  if (bytes != NULL)
    *bytes = w.total;
  return 0;
}

/* ---- loading ------------------------------------------------------------ */

static int corrupt(char *why, size_t len, const char *what) {
  snprintf(why, len, "snapshot is corrupt or not an evictd snapshot: %s",
           what);
  return EVD_ECORRUPT;
}

/* Reads exactly n bytes; returns 1, or 0 at a short read. */
static int get(FILE *f, void *p, size_t n) {
  return fread(p, 1, n, f) == n;
}

static int load_session(const unsigned char *p, uint32_t len,
                        evd_table_t *table, char *why, size_t wlen) {
  const unsigned char *end = p + len;
  uint32_t f[7], i, nrp, nv = 0, rsize = 0;
  const unsigned char *rp = NULL;
  evd_session_t *s;
  evd_window_t *w;
  size_t idlen;
  const char *id;

  if (len < 1)
    return corrupt(why, wlen, "empty session record");
  idlen = p[0];
  id = (const char *)p + 1;
  p += 1 + idlen;
  if (p + 28 > end || !evd_session_id_valid(id, idlen))
    return corrupt(why, wlen, "bad session id");
  for (i = 0; i < 7; i++, p += 4)
    f[i] = get32(p);
  nrp = f[6];
  if (nrp > 0) {
    if (p + 8 > end)
      return corrupt(why, wlen, "truncated replay record");
    nv = get32(p);
    rsize = get32(p + 4);
    rp = p + 8;
    if ((uint64_t)(end - rp) < 4 * (2 * (uint64_t)nrp + nv))
      return corrupt(why, wlen, "truncated replay record");
    p = rp + 4 * (2 * (size_t)nrp + nv);
  }
  if (f[0] == 0 || f[0] > EVD_WINDOW_MAX_BUDGET || f[1] >= f[0] ||
      (uint64_t)(end - p) != 4 * ((uint64_t)f[0] + 1))
    return corrupt(why, wlen, "bad window size");
  if (evd_table_find(table, id, idlen) != NULL)
    return corrupt(why, wlen, "a session appears twice");
  if (evd_table_add(table, id, idlen, f[0], f[1], 0, &s) != 0) {
    snprintf(why, wlen, "out of memory loading the snapshot");
    return EVD_ENOMEM;
  }
  w = evd_session_window(s);
  for (i = 0; i <= f[0]; i++, p += 4)
    w->pos[i] = get32(p);
  if (evd_window_restore(w, f[2], f[3], f[4], f[5]) != 0)
    return corrupt(why, wlen, "a window state that cannot happen");
  if (nrp > 0) {
    uint32_t *v = malloc(4 * (2 * (size_t)nrp + nv));
    if (v == NULL)
      return EVD_ENOMEM;
    for (i = 0; i < 2 * nrp + nv; i++)
      v[i] = get32(rp + 4 * i);
    evd_session_replay_set(s, v, nrp, v + nrp, nv, v + nrp + nv, rsize);
    free(v);
  }
  return 0;
}

int evd_snapshot_load(int dirfd, evd_table_t *table, uint64_t *lsn,
                      uint64_t *bytes, char *why, size_t len) {
  unsigned char hdr[24], tail[20], rec[4];
  unsigned char *payload = NULL;
  size_t cap = 0;
  uint64_t n, i, total = sizeof hdr + sizeof tail;
  int fd, err = 0;
  FILE *f;

  fd = openat(dirfd, NAME, O_RDONLY | O_CLOEXEC);
  if (fd < 0) {
    if (errno == ENOENT)
      return EVD_ENOENT;
    snprintf(why, len, "cannot open the snapshot: %s", strerror(errno));
    return EVD_EIO;
  }
  f = fdopen(fd, "rb");
  if (f == NULL) {
    close(fd);
    return EVD_ENOMEM;
  }
  if (!get(f, hdr, sizeof hdr) || memcmp(hdr, "EVDSNAP1", 8) != 0) {
    err = corrupt(why, len, "bad header");
    goto done;
  }
  *lsn = get64(hdr + 8);
  n = get64(hdr + 16);
  for (i = 0; i < n && err == 0; i++) {
    uint32_t rlen;
    if (!get(f, rec, sizeof rec)) {
      err = corrupt(why, len, "truncated");
      break;
    }
    rlen = get32(rec);
    /* A bound that a damaged length field cannot talk us past: the ring of
     * a budget of 2^28 positions, far above any sane --max-budget. */
    if (rlen > (1u << 30)) {
      err = corrupt(why, len, "a session record over 1 GiB");
      break;
    }
    if (rlen > cap) {
      unsigned char *q = realloc(payload, rlen);
      if (q == NULL) {
        err = EVD_ENOMEM;
        break;
      }
      payload = q;
      cap = rlen;
    }
    if (!get(f, payload, rlen) || !get(f, rec, sizeof rec)) {
      err = corrupt(why, len, "truncated");
      break;
    }
    if (evd_crc32c(0, payload, rlen) != get32(rec)) {
      err = corrupt(why, len, "checksum mismatch in a session record");
      break;
    }
    err = load_session(payload, rlen, table, why, len);
    total += 2 * sizeof rec + rlen;
  }
  if (err == 0 &&
      (!get(f, tail, sizeof tail) || memcmp(tail, "EVDSEND1", 8) != 0 ||
       get64(tail + 8) != n ||
       get32(tail + 16) != evd_crc32c(0, hdr, sizeof hdr) ||
       fgetc(f) != EOF))
    err = corrupt(why, len, "bad or missing trailer");
done:
  free(payload);
  fclose(f);
  if (err == 0 && bytes != NULL)
    *bytes = total;
  return err;
}

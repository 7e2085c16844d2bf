/* Snapshots: the whole session table in one file, written atomically.
 *
 * Layout (integers little-endian), version 2:
 *   header   "EVDSNAP2", u64 lsn, u64 sessions
 *   session  u32 length, payload, u32 crc32c(payload), where payload is
 *              u8 idlen, id, u32 budget, sinks, lookahead, page_size, size,
 *              head, tail, newest, tentative, committed,
 *              u32 replay tag (values EVD_SNAP_*, snapshot.h),
 *              low 4 bits: 0 none; 1 runs, followed by the
 *              session's replay area (7 words, 11 with pages, see
 *              replay.c); 2 arrays, with op << 4 | flags << 8 |
 *              ends << 16 (which edge pages are transient), followed
 *              by u32 arg, npos, nvictims, ngone, npages_new,
 *              npages_freed, size, newest and the arrays positions,
 *              victims, gone, slots, pages_new, pages_freed (see
 *              evd_replay_t); 3 let go, followed by the request's u64
 *              hash as two u32,
 *              then the ring: u32 pos[budget + lookahead]
 *   trailer  "EVDSEND1", u64 sessions, u32 crc32c(header)
 * Version 1 ("EVDSNAP1", still loaded) had lookahead 1, page size 0 and no
 * drafts: u8 idlen, id, u32 budget, sinks, size, head, tail, newest, u32
 * replay (0, or npos, then u32 nvictims, u32 size, positions[npos],
 * victims[nvictims], slots[npos]: a step), ring u32 pos[budget + 1].
 * Writing may run in a forked child, so it allocates nothing: one static
 * buffer is filled and written out. */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "crc.h"
#include "log.h"
#include "record.h"
#include "replay.h"
#include "snapshot.h"
#include "fault.h"
#include "journal_file.h"

/* The tag's forms (snapshot.h), short. */
enum {
  RP_NONE = EVD_SNAP_RP_NONE,
  RP_RUNS = EVD_SNAP_RP_RUNS,
  RP_ARRAYS = EVD_SNAP_RP_ARRAYS,
  RP_GONE = EVD_SNAP_RP_GONE
};

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
  if (!w->err && w->len > 0)
    w->err = evd__write_all(w->fd, w->buf, w->len);
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

static void le64(unsigned char *p, uint64_t v) {
  evd_le32_set(p, (uint32_t)v);
  evd_le32_set(p + 4, (uint32_t)(v >> 32));
}

/* Feeds a run of uint32 into both the output and the record's CRC. */
#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__
#define HOST_IS_LE 1 /* the file's byte order: rings go out as they are */
#else
#define HOST_IS_LE 0
#endif

static void put32s(writer_t *w, uint32_t *crc, const uint32_t *v, size_t n) {
  unsigned char tmp[4 * 64];

  if (HOST_IS_LE) {
    put(w, v, 4 * n);
    *crc = evd_crc32c(*crc, v, 4 * n);
    return;
  }
  while (n > 0) {
    size_t k = n < 64 ? n : 64, i;
    for (i = 0; i < k; i++)
      evd_le32_set(tmp + 4 * i, v[i]);
    put(w, tmp, 4 * k);
    *crc = evd_crc32c(*crc, tmp, 4 * k);
    v += k;
    n -= k;
  }
}

/* Feeds a list of a replay record, run or array, to the output. */
static void put_list(writer_t *w, uint32_t *crc, const evd_replay_t *rp,
                     const evd_u32s_t *l) {
  uint32_t tmp[64], i, k;

  for (i = 0; i < l->n; i += k) {
    for (k = 0; k < 64 && i + k < l->n; k++)
      tmp[k] = evd_replay_at(rp, l, i + k);
    put32s(w, crc, tmp, k);
  }
}

static void write_session(writer_t *w, const evd_session_t *s) {
  const evd_window_t *win = evd_session_window(s);
  evd_session_config_t cfg;
  evd_replay_t rp;
  unsigned words;
  const uint32_t *area = evd_replay_area(s, &words);
  int has_rp = words == 0 && evd_replay_get(s, &rp);
  uint64_t hash;
  int gone = evd_replay_gone(s, &hash);
  uint32_t f[11], crc = 0, len, ring;
  unsigned char b[4];

  evd_session_config(s, &cfg);
  ring = cfg.budget + cfg.lookahead;
  len = 1 + s->idlen + 4 * 11 + 4 * ring;
  if (words > 0)
    len += 4 * words;
  else if (has_rp)
    len += 4 * (8 + 2 * rp.positions.n + rp.victims.n + rp.gone.n +
                rp.pages_new.n + rp.pages_freed.n);
  else if (gone)
    len += 8;
  evd_le32_set(b, len);
  put(w, b, 4);
  b[0] = s->idlen;
  put(w, b, 1);
  crc = evd_crc32c(crc, b, 1);
  put(w, s->id, s->idlen);
  crc = evd_crc32c(crc, s->id, s->idlen);
  f[0] = cfg.budget;
  f[1] = cfg.sinks;
  f[2] = cfg.lookahead;
  f[3] = cfg.page_size;
  f[4] = win->size;
  f[5] = win->head;
  f[6] = win->tail;
  f[7] = win->newest;
  f[8] = evd_window_tentative(win);
  f[9] = evd_window_committed(win);
  /* rp.op and rp.flags are the file's EVD_SNAP_OP_* and EVD_SNAP_* as they
   * are: snapshot.h asserts that they are equal. */
  f[10] = words > 0 ? RP_RUNS
          : has_rp  ? RP_ARRAYS | (uint32_t)rp.op << 4 |
                         (uint32_t)rp.flags << 8 | (uint32_t)rp.ends << 16
          : gone    ? RP_GONE
                    : RP_NONE;
  put32s(w, &crc, f, 11);
  if (words > 0) {
    put32s(w, &crc, area, words);
  } else if (has_rp) {
    f[0] = rp.arg;
    f[1] = rp.positions.n;
    f[2] = rp.victims.n;
    f[3] = rp.gone.n;
    f[4] = rp.pages_new.n;
    f[5] = rp.pages_freed.n;
    f[6] = rp.size;
    f[7] = rp.newest;
    put32s(w, &crc, f, 8);
    put_list(w, &crc, &rp, &rp.positions);
    put_list(w, &crc, &rp, &rp.victims);
    put_list(w, &crc, &rp, &rp.gone);
    put_list(w, &crc, &rp, &rp.slots);
    put_list(w, &crc, &rp, &rp.pages_new);
    put_list(w, &crc, &rp, &rp.pages_freed);
  } else if (gone) {
    f[0] = (uint32_t)hash;
    f[1] = (uint32_t)(hash >> 32);
    put32s(w, &crc, f, 2);
  }
  put32s(w, &crc, win->pos, ring);
  evd_le32_set(b, crc);
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
  memcpy(hdr, EVD_SNAP_MAGIC_V2, 8);
  le64(hdr + 8, lsn);
  le64(hdr + 16, n);
  put(&w, hdr, sizeof hdr);
  for (s = evd_table_oldest(table); s != NULL; s = evd_table_younger(s))
    write_session(&w, s);
  memcpy(tail, EVD_SNAP_TRAILER, 8);
  le64(tail + 8, n);
  evd_le32_set(tail + 16, evd_crc32c(0, hdr, sizeof hdr));
  put(&w, tail, sizeof tail);
  flush_out(&w);
  if (w.err == 0 && fsync(w.fd) != 0)
    w.err = errno;
  if (close(w.fd) != 0 && w.err == 0)
    w.err = errno;
  if (w.err == 0 && EVD_FAULT("evictd/snapshot/rename"))
    w.err = EIO;
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

/* The snapshot being loaded, mapped whole: records are read in place. */
typedef struct {
  const unsigned char *at, *end;
} source_t;

/* Points *p at the next n bytes; returns 1, or 0 when they are not there. */
static int get(source_t *f, const unsigned char **p, size_t n) {
  if ((size_t)(f->end - f->at) < n)
    return 0;
  *p = f->at;
  f->at += n;
  return 1;
}

/* Reads k u32 at *p (advancing it) into out; 0 when they are not there. */
static int take(const unsigned char **p, const unsigned char *end,
                uint32_t *out, uint64_t k) {
  uint64_t i;

  if ((uint64_t)(end - *p) < 4 * k)
    return 0;
  if (k == 0) /* (out may be NULL then) */
    return 1;
  if (HOST_IS_LE) {
    memcpy(out, *p, 4 * k);
    *p += 4 * k;
    return 1;
  }
  for (i = 0; i < k; i++, *p += 4)
    out[i] = evd_le32(*p);
  return 1;
}

/* A session record's fields before its arrays, in version 2's terms
 * (version 1 is converted into them by head_v1, in that one place). */
typedef struct {
  uint32_t f[11]; /* budget, sinks, lookahead, page_size, size, head, tail,
                     newest, tentative, committed, replay tag */
  uint32_t r[8];  /* arrays: arg, npos, nvictims, ngone, npages_new,
                     npages_freed, size, newest; let go: the hash, low
                     half first */
  uint32_t area[EVD__RP_WORDS_PAGED]; /* runs: the replay area */
  unsigned nextra; /* its words */
} head_t;

/* Version 1: lookahead 1, page size 0, no drafts, and a replay record that
 * is a step's arrays (nothing gone, no pages), its newest position the last
 * of its positions, which follow. Returns NULL, or what is wrong. */
static const char *head_v1(const unsigned char **p, const unsigned char *end,
                           head_t *h) {
  uint32_t g[7]; /* budget, sinks, size, head, tail, newest, npos */
  uint32_t n[2]; /* the step's nvictims and size */

  if (!take(p, end, g, 7))
    return "truncated session record";
  memcpy(h->f, (uint32_t[11]){g[0], g[1], 1, 0, g[2], g[3], g[4], g[5], 0,
                              0, RP_NONE},
         sizeof h->f);
  if (g[6] == 0)
    return NULL;
  if (!take(p, end, n, 2) || (uint64_t)(end - *p) / 4 < g[6])
    return "truncated replay record";
  memcpy(h->r, (uint32_t[8]){0, g[6], n[0], 0, 0, 0, n[1],
                             evd_le32(*p + 4 * ((size_t)g[6] - 1))},
         sizeof h->r);
  h->f[10] = RP_ARRAYS | EVD_SNAP_OP_STEP << 4;
  return NULL;
}

/* Version 2. Returns NULL, or what is wrong. */
static const char *head_v2(const unsigned char **p, const unsigned char *end,
                           head_t *h) {
  if (!take(p, end, h->f, 11))
    return "truncated session record";
  switch (h->f[10] & 0xf) {
  case RP_NONE:
    return NULL;
  case RP_RUNS:
    h->nextra = h->f[3] != 0 ? EVD__RP_WORDS_PAGED : EVD__RP_WORDS;
    return take(p, end, h->area, h->nextra) ? NULL
                                            : "truncated replay record";
  case RP_ARRAYS:
    return take(p, end, h->r, 8) ? NULL : "truncated replay record";
  case RP_GONE:
    return take(p, end, h->r, 2) ? NULL : "truncated replay record";
  default:
    return "a replay record of no known form";
  }
}

/* Gives session s the replay record of arrays that h and the lists at
 * v describe. Returns NULL, or what is wrong. */
static const char *set_arrays(evd_table_t *table, evd_session_t *s,
                              const head_t *h, const uint32_t *v) {
  const evd_window_t *w = evd_session_window(s);
  const uint32_t *r = h->r, tag = h->f[10];
  evd_replay_t rp = {0};

  rp.op = (uint8_t)(tag >> 4 & 0xf);
  rp.flags = (uint8_t)(tag >> 8);
  rp.ends = (uint8_t)(tag >> 16);
  if (rp.op < EVD_SNAP_OP_STEP || rp.op > EVD_SNAP_OP_TRUNCATE ||
      tag > 0x3ffff ||
      (rp.op == EVD_SNAP_OP_STEP && r[1] == 0 &&
       !(rp.flags & EVD_SNAP_COMMIT_ARG)))
    return "a replay record of no known request";
  rp.arg = r[0];
  rp.size = r[6];
  rp.newest = r[7];
  rp.positions = evd_u32s(v, r[1]);
  rp.victims = evd_u32s(rp.positions.v + r[1], r[2]);
  rp.gone = evd_u32s(rp.victims.v + r[2], r[3]);
  rp.slots = evd_u32s(rp.gone.v + r[3], r[1]);
  rp.pages_new = evd_u32s(rp.slots.v + r[1], r[4]);
  rp.pages_freed = evd_u32s(rp.pages_new.v + r[4], r[5]);
  rp.sinks = evd_window_sinks(w);
  rp.last = evd_window_last_slot(w);
  evd_replay_set(table, s, &rp);
  return NULL;
}

/* The refused table's stand-in configuration: an id is all it keeps. */
static const evd_session_config_t refused_cfg = {1, 0, 1, 0};

static int load_session(const unsigned char *p, uint32_t len, int version,
                        evd_table_t *table, evd_snapshot_load_t *how,
                        uint32_t **scratch, size_t *cap, char *why,
                        size_t wlen) {
  const unsigned char *end = p + len;
  evd_session_config_t cfg;
  head_t h = {0};
  const uint32_t *f = h.f, *r = h.r;
  uint64_t narr;
  evd_session_t *s;
  evd_window_t *w;
  const char *bad;
  size_t idlen;
  const char *id;

  if (len < 1)
    return corrupt(why, wlen, "empty session record");
  idlen = p[0];
  id = (const char *)p + 1;
  p += 1 + idlen;
  if (p > end || !evd_session_id_valid(id, idlen))
    return corrupt(why, wlen, "bad session id");
  bad = version == 1 ? head_v1(&p, end, &h) : head_v2(&p, end, &h);
  if (bad != NULL)
    return corrupt(why, wlen, bad);
  /* From here on, one path for both versions. */
  cfg = (evd_session_config_t){f[0], f[1], f[2], f[3]};
  narr = (f[10] & 0xf) == RP_ARRAYS
             ? 2 * (uint64_t)r[1] + r[2] + r[3] + r[4] + r[5]
             : 0;
  if (narr > (uint64_t)(end - p) / 4)
    return corrupt(why, wlen, "truncated replay record");
  if (!evd_window_config_valid(cfg.budget, cfg.sinks, cfg.lookahead) ||
      cfg.page_size > EVD_MAX_PAGE_SIZE ||
      (uint64_t)(end - p) != 4 * (narr + cfg.budget + cfg.lookahead))
    return corrupt(why, wlen, "bad window size");
  if (evd_table_find(table, id, idlen) != NULL ||
      (how != NULL && how->refused != NULL &&
       evd_table_find(how->refused, id, idlen) != NULL))
    return corrupt(why, wlen, "a session appears twice");
  if (how != NULL && cfg.budget > how->max_budget) {
    /* Its ring alone could take gigabytes: leave it out, keep the rest. */
    evd_session_t *stand_in;
    evd_log(EVD_LOG_WARN, "snapshot: session %.*s has budget %u, above "
            "--max-budget %u: not recovered (the other sessions are)",
            (int)idlen, id, cfg.budget, how->max_budget);
    how->nrefused++;
    if (how->refused != NULL &&
        evd_table_add(how->refused, id, idlen, &refused_cfg, 0,
                      &stand_in) != 0) {
      snprintf(why, wlen, "out of memory loading the snapshot");
      return EVD_ENOMEM;
    }
    return 0;
  }
  if (narr > *cap) {
    uint32_t *q = realloc(*scratch, 4 * narr);
    if (q == NULL)
      return EVD_ENOMEM;
    *scratch = q;
    *cap = narr;
  }
  take(&p, end, *scratch, narr);
  if (evd_table_add_prepared(table, id, idlen, &cfg, 0, &s) != 0) {
    snprintf(why, wlen, "out of memory loading the snapshot");
    return EVD_ENOMEM;
  }
  w = evd_session_window(s);
  take(&p, end, w->pos, (uint64_t)cfg.budget + cfg.lookahead);
  if (evd_window_restore(w, f[4], f[5], f[6], f[7], f[8], f[9]) != 0)
    return corrupt(why, wlen, "a window state that cannot happen");
  switch (f[10] & 0xf) {
  case RP_RUNS:
    if (evd_replay_load_area(s, h.area, h.nextra) != 0)
      return corrupt(why, wlen, "a replay record of no known request");
    break;
  case RP_GONE:
    evd_replay_set_gone(table, s, (uint64_t)r[0] | (uint64_t)r[1] << 32);
    break;
  case RP_ARRAYS:
    bad = set_arrays(table, s, &h, *scratch);
    if (bad != NULL)
      return corrupt(why, wlen, bad);
    break;
  }
  return 0;
}

/* Prefetches (see evd_table_prefetch) for the session record at `at`, if
 * it is whole and looks like one, and returns where the next one starts
 * (NULL when it cannot tell). Checks nothing: the record is checked when
 * its turn comes. */
static const unsigned char *prefetch(evd_table_t *table,
                                     const unsigned char *at,
                                     const unsigned char *end, int deep) {
  uint32_t rlen;

  if (at == NULL || end - at < 9)
    return NULL;
  rlen = evd_le32(at);
  if (rlen < 1 || rlen > (size_t)(end - at) - 8 || at[4] >= rlen)
    return NULL;
  evd_table_prefetch(table, (const char *)at + 5, at[4], deep);
  return at + 8 + rlen;
}

int evd_snapshot_load(int dirfd, evd_table_t *table,
                      evd_snapshot_load_t *how, uint64_t *lsn,
                      uint64_t *bytes, char *why, size_t len) {
  const unsigned char *hdr = NULL, *tail, *rec, *payload;
  uint32_t *scratch = NULL;
  size_t scap = 0;
  uint64_t n, i;
  int fd, err = 0, version = 0;
  struct stat st;
  void *map = MAP_FAILED;
  source_t f;

  fd = openat(dirfd, NAME, O_RDONLY | O_CLOEXEC);
  if (fd < 0) {
    if (errno == ENOENT)
      return EVD_ENOENT;
    snprintf(why, len, "cannot open the snapshot: %s", strerror(errno));
    return EVD_EIO;
  }
  /* Mapped rather than read: the bytes are checked and copied into the
   * sessions straight from the page cache, without a copy in between.
   * The state directory is locked, so nobody truncates it meanwhile. */
  if (fstat(fd, &st) != 0) {
    snprintf(why, len, "cannot stat the snapshot: %s", strerror(errno));
    close(fd);
    return EVD_EIO;
  }
  if (st.st_size > 0 && (uint64_t)st.st_size <= SIZE_MAX) {
    map = mmap(NULL, (size_t)st.st_size, PROT_READ, MAP_PRIVATE | MAP_POPULATE,
               fd, 0);
    if (map == MAP_FAILED) {
      snprintf(why, len, "cannot map the snapshot: %s", strerror(errno));
      close(fd);
      return EVD_EIO;
    }
    (void)madvise(map, (size_t)st.st_size, MADV_SEQUENTIAL);
  }
  close(fd);
  f.at = map == MAP_FAILED ? NULL : map;
  f.end = map == MAP_FAILED ? NULL : f.at + st.st_size;
  if (get(&f, &hdr, 24))
    version = memcmp(hdr, EVD_SNAP_MAGIC_V2, 8) == 0   ? 2
              : memcmp(hdr, EVD_SNAP_MAGIC_V1, 8) == 0 ? 1
                                                       : 0;
  if (version == 0) {
    err = corrupt(why, len, "bad header");
    goto done;
  }
  *lsn = evd_le64(hdr + 8);
  n = evd_le64(hdr + 16);
  /* Each record takes at least 9 bytes: a count past that is damage. */
  if (n > (uint64_t)(f.end - f.at) / 9) {
    err = corrupt(why, len, "a session count larger than the file");
    goto done;
  }
  /* The sessions take about the file's bytes, and malloc's 16 each. */
  evd_table_reserve(table, (size_t)n, (size_t)st.st_size + 16 * (size_t)n);
  for (i = 0; i < n && err == 0; i++) {
    uint32_t rlen;
    /* The table's memory, a record or two ahead: it is not in any cache.
     * The record after next is only asked for here (its header is read
     * at the next turn): it often starts a page the CPU would otherwise
     * wait for, TLB walk and all (a fifth of loading, measured). */
    const unsigned char *next = prefetch(table, f.at, f.end, 1);
    const unsigned char *after = prefetch(table, next, f.end, 0);
    if (after != NULL && after < f.end) {
      __builtin_prefetch(after);
      __builtin_prefetch(after + 64);
    }
    if (!get(&f, &rec, 4)) {
      err = corrupt(why, len, "truncated");
      break;
    }
    rlen = evd_le32(rec);
    /* A bound that a damaged length field cannot talk us past: the ring of
     * a budget of 2^28 positions, far above any sane --max-budget. */
    if (rlen > (1u << 30)) {
      err = corrupt(why, len, "a session record over 1 GiB");
      break;
    }
    if (!get(&f, &payload, rlen) || !get(&f, &rec, 4)) {
      err = corrupt(why, len, "truncated");
      break;
    }
    if (evd_crc32c(0, payload, rlen) != evd_le32(rec)) {
      err = corrupt(why, len, "checksum mismatch in a session record");
      break;
    }
    err = load_session(payload, rlen, version, table, how, &scratch, &scap,
                       why, len);
  }
  if (err == 0 &&
      (!get(&f, &tail, 20) || memcmp(tail, EVD_SNAP_TRAILER, 8) != 0 ||
       evd_le64(tail + 8) != n ||
       evd_le32(tail + 16) != evd_crc32c(0, hdr, 24) || f.at != f.end))
    err = corrupt(why, len, "bad or missing trailer");
done:
  evd_table_reserve_done();
  free(scratch);
  if (map != MAP_FAILED)
    munmap(map, (size_t)st.st_size);
  if (err == 0 && bytes != NULL)
    *bytes = (uint64_t)st.st_size;
  return err;
}

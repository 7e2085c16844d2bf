/* Saved conversations (store.h): a list, most recently used first, of
 * what parked slots held, and with --cache-dir a file each. */
#include "serve/engine/store.h"

#include <dirent.h>
#include <stdatomic.h>
#include <stddef.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "common/grow.h"
#include "serve/engine/disk.h"
#include "serve/engine/hist.h"

#define say(...) fprintf(stderr, "evictd-llama serve: " __VA_ARGS__)

struct store_s {
  saved_t *head, *tail;
  size_t bytes, limit;      /* limit SIZE_MAX: none; bytes: all held */
  uint32_t count;           /* conversations held (checkpoints apart) */
  uint64_t dropped;
  uint32_t ck_count;        /* checkpoints held, and their bytes */
  size_t ck_bytes;
  uint64_t ck_dropped;
  const char *dir;
  uint64_t next_file;
  char model[160];
  lanes_t *lanes;
  disk_t *disk;             /* the folder's writer (disk.h), or NULL */
};

/* ---- the list ------------------------------------------------------------ */

static void unlink_saved(store_t *cv, saved_t *s) {
  if (s->prev != NULL)
    s->prev->next = s->next;
  else
    cv->head = s->next;
  if (s->next != NULL)
    s->next->prev = s->prev;
  else
    cv->tail = s->prev;
  s->prev = s->next = NULL;
  cv->bytes -= s->bytes;
  if (s->ckpt) {
    cv->ck_count--;
    cv->ck_bytes -= s->bytes;
  } else {
    cv->count--;
  }
}

static void push_front(store_t *cv, saved_t *s) {
  s->prev = NULL;
  s->next = cv->head;
  if (cv->head != NULL)
    cv->head->prev = s;
  cv->head = s;
  if (cv->tail == NULL)
    cv->tail = s;
  cv->bytes += s->bytes;
  if (s->ckpt) {
    cv->ck_count++;
    cv->ck_bytes += s->bytes;
  } else {
    cv->count++;
  }
}

void saved_free(saved_t *s) {
  /* The writer may hold it still (write_saved): the last one frees. */
  if (atomic_fetch_sub_explicit(&s->refs, 1, memory_order_acq_rel) > 0)
    return;
  free(s->hist);
  free(s->map);
  free(s->state);
  free(s);
}

/* The path of s's file in the store's folder. */
static void path_of(const store_t *cv, const saved_t *s, char *out,
                    size_t len) {
  snprintf(out, len, "%s/%s", cv->dir, s->file);
}

/* Removes s's file, if it has one (after the writes before it). */
static void remove_file(const store_t *cv, const saved_t *s) {
  if (cv->dir == NULL || s->file[0] == '\0')
    return;
  if (cv->disk != NULL) {
    disk_remove(cv->disk, s->file);
  } else { /* loading, before the writer starts */
    char path[4096];
    path_of(cv, s, path, sizeof(path));
    unlink(path);
  }
}

void store_drop(store_t *cv, saved_t *s) {
  unlink_saved(cv, s);
  remove_file(cv, s);
  /* A checkpoint has no session of its own (store.h). */
  if (s->ckpt) {
    cv->ck_dropped++;
  } else {
    lanes_delete(cv->lanes, s->session, 0);
    cv->dropped++;
  }
  saved_free(s);
}

/* Drops the least recently used checkpoints until need more bytes fit;
 * whether they do. */
static bool room_from_ckpt(store_t *cv, size_t need) {
  for (saved_t *s = cv->tail, *prev; s != NULL && cv->bytes + need >
                                                      cv->limit; s = prev) {
    prev = s->prev;
    if (s->ckpt)
      store_drop(cv, s);
  }
  return cv->bytes + need <= cv->limit;
}

bool store_room(store_t *cv, size_t need) {
  if (need > cv->limit)
    return false;
  /* Checkpoints go first: they never push a conversation out. */
  room_from_ckpt(cv, need);
  while (cv->tail != NULL && cv->bytes + need > cv->limit)
    store_drop(cv, cv->tail);
  return true;
}

bool store_room_ckpt(store_t *cv, size_t need) {
  return need <= cv->limit && room_from_ckpt(cv, need);
}

/* ---- files (--cache-dir) ------------------------------------------------- */

#define MAGIC "evictd-llama conversation 3\n"

/* A file: this head, then the tokens of positions hbase..n-1, the cells'
 * positions, llama.cpp's state of the sequence; sum, the checksum of all
 * of it (disk_sum, the head's with sum 0, then each part). Host byte
 * order: a cache folder is the machine's own. */
typedef struct file_head_s {
  char magic[32];
  char model[160];
  char session[SEQ_ID_MAX + 1];
  int64_t cfg[4];
  uint32_t held, newest, committed, n, n_map, hbase;
  uint64_t hdig;
  uint64_t n_state;
  uint32_t ckpt;            /* a checkpoint (store.h) */
  uint64_t sum;
} file_head_t;

/* What the writer holds of a write: the head, and s (a reference). */
typedef struct writing_s {
  file_head_t h;
  saved_t *s;
} writing_t;

static void written(void *ud) {
  writing_t *w = ud;
  saved_free(w->s);
  free(w);
}

/* Has s written to its file by the folder's writer (disk.h: whole, then
 * renamed; a newer write of the file replaces one still waiting), which
 * holds a reference to s till then. */
static void write_saved(store_t *cv, saved_t *s) {
  if (cv->disk == NULL)
    return;
  if (s->file[0] == '\0')
    store_name(cv, s->file, sizeof(s->file));
  writing_t *w = calloc(1, sizeof(*w));
  if (w == NULL)
    return;
  file_head_t *h = &w->h;
  memcpy(h->magic, MAGIC, sizeof(MAGIC) - 1);
  snprintf(h->model, sizeof(h->model), "%s", cv->model);
  snprintf(h->session, sizeof(h->session), "%s", s->session);
  int64_t cfg[4] = {s->cfg.budget, s->cfg.sinks, s->cfg.lookahead,
                    s->cfg.page_size};
  memcpy(h->cfg, cfg, sizeof(cfg));
  h->held = s->held;
  h->newest = s->newest;
  h->committed = s->committed;
  h->n = s->n;
  h->n_map = s->n_map;
  h->hbase = s->hbase;
  h->hdig = s->hdig;
  h->n_state = s->n_state;
  h->ckpt = s->ckpt;
  atomic_fetch_add_explicit(&s->refs, 1, memory_order_relaxed);
  w->s = s;
  disk_parts_t pt = {
      .p = {h, s->hist, s->map, s->state},
      .len = {sizeof(*h), (s->n - s->hbase) * sizeof(*s->hist),
              s->n_map * sizeof(*s->map), s->n_state},
      .sum_at = offsetof(file_head_t, sum), .free_fn = written, .ud = w};
  disk_write(cv->disk, s->file, &pt);
}

/* Reads one file of the folder into a saved conversation, or NULL (a file
 * of another model or cache type, or damaged: removed). */
static saved_t *read_saved(store_t *cv, const char *name) {
  char path[4096];
  snprintf(path, sizeof(path), "%s/%s", cv->dir, name);
  FILE *f = fopen(path, "rb");
  file_head_t h;
  memset(&h, 0, sizeof(h));
  saved_t *s = calloc(1, sizeof(*s));
  bool ok = f != NULL && s != NULL && fread(&h, sizeof(h), 1, f) == 1 &&
            memcmp(h.magic, MAGIC, sizeof(MAGIC) - 1) == 0 &&
            strncmp(h.model, cv->model, sizeof(h.model)) == 0 &&
            h.n_map <= h.n && h.hbase <= h.n &&
            h.hbase % HIST_BLOCK == 0 && h.n_state < ((uint64_t)1 << 40);
  uint64_t sum = h.sum;
  if (ok) {
    s->hist = malloc((h.n - h.hbase + 1) * sizeof(*s->hist));
    s->map = malloc((h.n_map + 1) * sizeof(*s->map));
    s->state = malloc(h.n_state + 1);
    ok = s->hist && s->map && s->state &&
         fread(s->hist, sizeof(*s->hist), h.n - h.hbase, f) ==
             h.n - h.hbase &&
         fread(s->map, sizeof(*s->map), h.n_map, f) == h.n_map &&
         fread(s->state, 1, h.n_state, f) == h.n_state &&
         fgetc(f) == EOF;
  }
  /* Its bytes as written, or nothing of it. */
  if (ok) {
    h.sum = 0;
    uint64_t got = disk_sum(0, &h, sizeof(h));
    got = disk_sum(got, s->hist, (h.n - h.hbase) * sizeof(*s->hist));
    got = disk_sum(got, s->map, h.n_map * sizeof(*s->map));
    got = disk_sum(got, s->state, h.n_state);
    ok = got == sum;
  }
  if (f != NULL)
    fclose(f);
  if (!ok) {
    if (s != NULL)
      saved_free(s);
    say("%s is not a whole conversation of this model and cache: "
        "removed\n", path);
    unlink(path);
    return NULL;
  }
  h.session[SEQ_ID_MAX] = '\0';
  /* A checkpoint's name in --dump's record: its file's, unique. */
  s->ckpt = h.ckpt != 0;
  snprintf(s->session, sizeof(s->session), "%.*s", SEQ_ID_MAX,
           s->ckpt ? name : h.session);
  s->cfg = (evd_session_cfg_t){h.cfg[0], h.cfg[1], h.cfg[2], h.cfg[3]};
  s->held = h.held;
  s->newest = h.newest;
  s->committed = h.committed;
  s->n = h.n;
  s->n_map = h.n_map;
  s->hbase = h.hbase;
  s->hdig = h.hdig;
  s->n_state = h.n_state;
  s->bytes = sizeof(*s) + (h.n - h.hbase) * sizeof(*s->hist) +
             h.n_map * sizeof(*s->map) + h.n_state;
  /* load_dir reads names that fit alone. */
  snprintf(s->file, sizeof(s->file), "%.*s", (int)sizeof(s->file) - 1,
           name);
  s->loaded = true;
  struct stat st;
  s->used_at = stat(path, &st) == 0 ? (double)st.st_mtime : 0;
  return s;
}

/* Loads the folder's conversations, most recently used first, as many as
 * --cache-ram holds (the rest are removed, their sessions deleted). */
static void load_dir(store_t *cv) {
  DIR *d = opendir(cv->dir);
  if (d == NULL)
    return;
  saved_t **all = NULL;
  size_t n = 0, cap = 0;
  struct dirent *de;
  while ((de = readdir(d)) != NULL) {
    unsigned long long k;
    if ((sscanf(de->d_name, "conv-%llu.bin", &k) != 1 &&
         sscanf(de->d_name, "ckpt-%llu.bin", &k) != 1) ||
        strlen(de->d_name) >= sizeof(((saved_t *)0)->file) + 4)
      continue;
    if (strstr(de->d_name, ".tmp") != NULL) {
      /* A write a crash cut short: never read. */
      char path[4096];
      snprintf(path, sizeof(path), "%s/%s", cv->dir, de->d_name);
      unlink(path);
      continue;
    }
    if (k > cv->next_file)
      cv->next_file = k;
    saved_t *s = read_saved(cv, de->d_name);
    if (s != NULL && grow(&all, &cap, n + 1, sizeof(*all)) == 0)
      all[n++] = s;
    else if (s != NULL)
      saved_free(s);
  }
  closedir(d);
  /* Oldest first, each pushed to the front: the newest ends first. */
  for (size_t i = 0; i < n; i++)
    for (size_t j = i + 1; j < n; j++)
      if (all[j]->used_at < all[i]->used_at) {
        saved_t *x = all[i];
        all[i] = all[j];
        all[j] = x;
      }
  for (size_t i = 0; i < n; i++) {
    if (store_room(cv, all[i]->bytes)) {
      push_front(cv, all[i]);
    } else {
      char path[4096];
      path_of(cv, all[i], path, sizeof(path));
      unlink(path);
      if (!all[i]->ckpt)
        lanes_delete(cv->lanes, all[i]->session, 0);
      saved_free(all[i]);
    }
  }
  free(all);
  if (cv->count > 0)
    say("%u conversations found in %s (%zu bytes)\n", cv->count, cv->dir,
        cv->bytes);
}

/* The digests' key of the folder (its file "key"), so that the
 * conversations kept there match their prompts after a restart: read, or
 * the caller's random one written. 0, or -1 with err set. */
static int folder_key(store_t *cv, uint64_t key[2], char *err,
                      size_t errlen) {
  char path[4096];
  snprintf(path, sizeof(path), "%s/key", cv->dir);
  FILE *f = fopen(path, "rb");
  if (f != NULL) {
    uint64_t k[2];
    bool ok = fread(k, sizeof(k), 1, f) == 1;
    fclose(f);
    if (ok) {
      memcpy(key, k, sizeof(k));
      return 0;
    }
  }
  char tmp[4200];
  snprintf(tmp, sizeof(tmp), "%s.tmp", path);
  int fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC, 0600);
  bool ok = fd >= 0 && write(fd, key, 2 * sizeof(*key)) ==
                           (ssize_t)(2 * sizeof(*key));
  if (fd >= 0 && close(fd) != 0)
    ok = false;
  if (!ok || rename(tmp, path) != 0)
    return snprintf(err, errlen, "cannot write %s: %s", path,
                    strerror(errno)), -1;
  return 0;
}


/* ---- the store's life ----------------------------------------------------- */

int store_open(store_t **out, const store_cfg_t *cfg, uint64_t key[2],
               char *err, size_t errlen) {
  store_t *cv = calloc(1, sizeof(*cv));
  *out = cv;
  if (cv == NULL)
    return snprintf(err, errlen, "out of memory"), -1;
  cv->limit = cfg->cache_ram < 0 ? SIZE_MAX : (size_t)cfg->cache_ram << 20;
  cv->dir = cfg->dir;
  cv->lanes = cfg->lanes;
  snprintf(cv->model, sizeof(cv->model), "%s", cfg->model);
  if (cv->dir != NULL) {
    if (mkdir(cv->dir, 0700) != 0 && errno != EEXIST)
      return snprintf(err, errlen, "cannot make --cache-dir %s: %s",
                      cv->dir, strerror(errno)), -1;
    if (access(cv->dir, W_OK | X_OK) != 0)
      return snprintf(err, errlen, "cannot write in --cache-dir %s: %s",
                      cv->dir, strerror(errno)), -1;
    if (folder_key(cv, key, err, errlen) != 0)
      return -1;
    load_dir(cv);
    if (disk_open(&cv->disk, cv->dir) != 0)
      return snprintf(err, errlen, "cannot start --cache-dir's writer "
                      "thread"), -1;
  }
  return 0;
}

void store_close(store_t *cv) {
  if (cv == NULL)
    return;
  for (saved_t *s = cv->head, *next; s != NULL; s = next) {
    next = s->next;
    /* Without --cache-dir nothing outlives the process: the sessions go. */
    if (cv->dir == NULL && !s->ckpt)
      lanes_delete(cv->lanes, s->session, 0);
    saved_free(s);
  }
  disk_close(cv->disk); /* every write made first */
  free(cv);
}

bool store_enabled(const store_t *cv) { return cv != NULL && cv->limit > 0; }

saved_t *store_head(store_t *cv) { return cv != NULL ? cv->head : NULL; }

void store_put(store_t *cv, saved_t *s) {
  if (cv->dir != NULL && !s->ckpt)
    write_saved(cv, s);
  push_front(cv, s);
}

void store_trim_ckpt(store_t *cv, uint32_t max) {
  if (cv == NULL)
    return;
  for (saved_t *s = cv->tail, *prev; s != NULL && cv->ck_count > max;
       s = prev) {
    prev = s->prev;
    if (s->ckpt)
      store_drop(cv, s);
  }
}

void store_take(store_t *cv, saved_t *s) { unlink_saved(cv, s); }

void store_untake(store_t *cv, saved_t *s) { push_front(cv, s); }

void store_restored(store_t *cv, saved_t *s) {
  (void)cv; /* its file stays: the slot's (store_write) */
  saved_free(s);
}

bool store_durable(const store_t *cv) {
  return cv != NULL && cv->disk != NULL;
}

void store_name(store_t *cv, char *file, size_t len) {
  snprintf(file, len, "conv-%llu.bin", (unsigned long long)++cv->next_file);
}

void store_write(store_t *cv, saved_t *s) {
  write_saved(cv, s);
  saved_free(s);
}

void store_write_ckpt(store_t *cv, const char *key, const char *file) {
  if (cv == NULL || cv->disk == NULL || file[0] == '\0' ||
      strncmp(file, "conv-", 5) != 0)
    return;
  char name[sizeof(((saved_t *)0)->file)];
  snprintf(name, sizeof(name), "ckpt-%s", file + 5);
  saved_t *ck = NULL;
  for (saved_t *s = cv->head; s != NULL; s = s->next) {
    if (!s->ckpt)
      continue;
    if (strcmp(s->session, key) == 0)
      ck = s;
    else if (strcmp(s->file, name) == 0)
      s->file[0] = '\0'; /* an older one: the file is the new one's */
  }
  if (ck == NULL || strcmp(ck->file, name) == 0)
    return; /* gone, or written there already */
  remove_file(cv, ck); /* beside another conversation's before */
  snprintf(ck->file, sizeof(ck->file), "%s", name);
  write_saved(cv, ck);
}

void store_unlink(store_t *cv, const char *file) {
  if (cv != NULL && cv->disk != NULL && file[0] != '\0')
    disk_remove(cv->disk, file);
}

void store_disk(store_t *cv, uint64_t *writes, uint64_t *bytes,
                uint64_t *errors, uint32_t *pending) {
  disk_counts_t n;
  disk_counts(cv != NULL ? cv->disk : NULL, &n);
  *writes = n.writes;
  *bytes = n.bytes;
  *errors = n.errors;
  *pending = n.pending;
}

uint32_t store_count(const store_t *cv) { return cv ? cv->count : 0; }

size_t store_bytes(const store_t *cv) {
  return cv ? cv->bytes - cv->ck_bytes : 0;
}

void store_ckpt(const store_t *cv, uint32_t *count, size_t *bytes,
                uint64_t *dropped) {
  *count = cv ? cv->ck_count : 0;
  *bytes = cv ? cv->ck_bytes : 0;
  *dropped = cv ? cv->ck_dropped : 0;
}

uint64_t store_dropped(const store_t *cv) { return cv ? cv->dropped : 0; }

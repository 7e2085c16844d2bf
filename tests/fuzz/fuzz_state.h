/* What the two on-disk fuzz targets (fuzz_journal.c, fuzz_snapshot.c)
 * share: one scratch state directory per process, emptied before each
 * input, and seeds written by the target itself (EVD_FUZZ_SEEDS=DIR) from tests/unit/state_files.h's story. */
#ifndef EVICTD_FUZZ_STATE_H
#define EVICTD_FUZZ_STATE_H

#include <dirent.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

#include "state_files.h"

static char fs_dir[512];

static void fs_remove_dir(void) {
  sf_rmtree(fs_dir);
}

/* Creates the scratch directory once, empties it otherwise. */
static void fs_fresh_dir(void) {
  DIR *d;
  struct dirent *e;
  char path[800];

  if (fs_dir[0] == '\0') {
    if (sf_mkdtemp(fs_dir, sizeof fs_dir) != 0)
      abort();
    atexit(fs_remove_dir);
    return;
  }
  d = opendir(fs_dir);
  if (d == NULL)
    abort();
  while ((e = readdir(d)) != NULL)
    if (e->d_name[0] != '.') {
      snprintf(path, sizeof path, "%s/%s", fs_dir, e->d_name);
      unlink(path);
    }
  closedir(d);
}

/* Writes one seed file DIR/name of mode byte + data[0..n). */
static void fs_seed(const char *dir, const char *name, unsigned char mode,
                    const void *data, size_t n) {
  evd_buf_t b;

  evd_buf_init(&b);
  evd_buf_add(&b, &mode, 1);
  if (n > 0)
    evd_buf_add(&b, data, n);
  if (sf_put(dir, name, b.data, b.len) != 0) {
    perror(name);
    exit(1);
  }
  evd_buf_free(&b);
}

/* Copies a real file (the v1 fixture's) in as a seed, when it is there. */
static void fs_seed_file(const char *dir, const char *name, unsigned char mode,
                         const char *from_dir, const char *from) {
  evd_buf_t b;

  evd_buf_init(&b);
  if (sf_get(from_dir, from, &b) == 0)
    fs_seed(dir, name, mode, b.data, b.len);
  evd_buf_free(&b);
}

#endif

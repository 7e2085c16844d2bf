/* --cache-dir's writer (disk.c): a thread of its own that writes the
 * saved and parked conversations' files, off the engine's thread. Each
 * file is written whole under a temporary name, fsynced, renamed over the
 * old one and the folder fsynced, so a crash (SIGKILL, power) leaves the
 * old file or the new one, never a torn one; a checksum of its bytes is in
 * its head, and a file whose bytes do not match it is never read back
 * (store.c's read_saved). A write of a file still waiting is replaced by
 * a newer one of the same file; a failed write (a full disk, an I/O error)
 * is tried again every RETRY_S (the newest of each file), told on stderr
 * when the writing starts failing and when it writes again, each failure
 * counted. Knows no engine and no llama.cpp: it writes the parts it is
 * given. */
#ifndef EVICTD_LLAMA_SERVE_DISK_H
#define EVICTD_LLAMA_SERVE_DISK_H

#include <stddef.h>
#include <stdint.h>

typedef struct disk_s disk_t;

/* A file's bytes, in parts written one after another; the checksum goes
 * into the first part at sum_at (8 bytes, 0 while it is made). free_fn
 * (ud) is called once the write is done or dropped. */
typedef struct disk_parts_s {
  const void *p[4];
  size_t len[4];
  size_t sum_at;
  void (*free_fn)(void *ud);
  void *ud;
} disk_parts_t;

/* What the writer did: files written, their bytes, writes that failed
 * (each try), and writes waiting now (failed ones to be tried again
 * included). */
typedef struct disk_counts_s {
  uint64_t writes, bytes, errors;
  uint32_t pending;
} disk_counts_t;

/* The writer of folder dir (which exists). 0, or -1 (no thread). */
int disk_open(disk_t **out, const char *dir);

/* Everything waiting written (or removed), then the thread stopped and d
 * freed. NULL: nothing. */
void disk_close(disk_t *d);

/* Writes file `name` of the folder with parts (taken: freed through
 * free_fn when done), replacing a write of it still waiting. */
void disk_write(disk_t *d, const char *name, const disk_parts_t *parts);

/* Removes file `name` once the writes before have been made (a write of
 * it still waiting is dropped). */
void disk_remove(disk_t *d, const char *name);

void disk_counts(disk_t *d, disk_counts_t *out);

/* The checksum of len bytes (a multiple of 8 or not) chained from h (0
 * for a file's first part): what disk_write puts in a head. */
uint64_t disk_sum(uint64_t h, const void *p, size_t len);

#endif

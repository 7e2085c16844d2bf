/* The journal's files (journal_file.c): segments, record framing, and the
 * one write loop that every writer of the state directory uses, the
 * snapshot's included. Private to the server. */
#ifndef EVICTD_JOURNAL_FILE_H
#define EVICTD_JOURNAL_FILE_H

#include <stddef.h>
#include <stdint.h>

#include "buf.h"
#include "record.h"

#define EVD__SEG_HDR EVD_SEG_MAGIC_LEN
#define EVD__REC_HDR 12 /* u32 len + u64 lsn */
#define EVD__REC_TAIL 4 /* u32 crc32c */
#define EVD__REC_MAX (1u << 30)

/* Writes all n bytes at p to fd, going on after EINTR and short writes.
 * Returns 0, or the errno of the failure (EIO for a write of nothing), also
 * left in errno. Allocates nothing (a forked child uses it). Every writer
 * of the state directory goes through here. */
int evd__write_all(int fd, const void *p, size_t n);

/* Reads the whole file dirfd/name into *data (malloc'd, the caller frees).
 * Returns 0, EVD_EIO (errno set) or EVD_ENOMEM. */
int evd__slurp(int dirfd, const char *name, unsigned char **data,
               size_t *size);

/* The file name of segment `seg` ("journal.NNNNNNNN"). */
void evd__seg_name(char *name, size_t len, uint32_t seg);

/* The numbers of the segment files in the directory, ascending, in *out
 * (malloc'd, may be NULL when there is none). Returns 0, EVD_EIO or
 * EVD_ENOMEM. */
int evd__seg_list(int dirfd, uint32_t **out, size_t *n);

/* Creates segment `seg` with its header, durably. Returns the fd, or -1
 * with errno set (nothing is left behind then). */
int evd__seg_create(int dirfd, uint32_t seg);

/* Deletes the segments numbered below `below`, then syncs the directory. */
void evd__seg_drop(int dirfd, uint32_t below);

/* Starts a record at the end of b: room for its header, filled in by
 * evd__frame_close. Returns where the record starts. */
size_t evd__frame_open(evd_buf_t *b);

/* Completes the record that starts at b[start]: its length and LSN in the
 * header, its checksum after the payload. */
void evd__frame_close(evd_buf_t *b, size_t start, uint64_t lsn);

/* Is a whole, checksummed record at d[at..size)? Then 1, with its payload
 * length and LSN; else 0. */
int evd__frame_at(const unsigned char *d, size_t size, size_t at,
                  uint32_t *len, uint64_t *lsn);

#endif

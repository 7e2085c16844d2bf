/* The on-disk formats of --state-dir, described once: the ops a journal
 * record holds (encoded and decoded here for the journal and the tests) and
 * the little-endian helpers the journal and the snapshot share.
 *
 * Journal segment: an 8-byte magic, then records
 *   u32 len, u64 lsn, payload[len], u32 crc32c(lsn bytes + payload)
 * Magic "EVDJRNL1" (version 1) or "EVDJRNL2" (version 2, written now).
 * A payload is a request's ops, each u8 type, u8 idlen, id, then per type
 * (all integers u32 little-endian):
 *   1 CREATE    budget, sinks                (lookahead 1, page size 0)
 *   2 STEP      n, pos[n]                    (a plain step)
 *   3 EVICT     budget
 *   4 DELETE    -
 *   5 REAP      -
 * and, in version 2 segments only:
 *   6 CREATE2   budget, sinks, lookahead, page_size
 *   7 STEP2     flags, arg, n, pos[n]        (flags EVD_OP_*: 1 tentative,
 *                                             2 commit arg first,
 *                                             4 the step created its session)
 *   8 COMMIT    newest
 *   9 TRUNCATE  from
 *  10 FORK      u8 childlen, child id        (id is the parent)
 *  11 ADOPT     flags, budget, sinks, lookahead, page_size, newest, n,
 *               kept[n], slots[n]            (flags EVD_OP_REPLACED: 1,
 *                                             the session existed and was
 *                                             replaced; else it did not)
 * (ADOPT came after the other version 2 ops: a daemon from before it
 * refuses a journal holding one as damaged rather than misreading it.)
 * LSNs run 1, 2, 3, ... across segments without gaps. The snapshot's own
 * layout is described in snapshot.c. */
#ifndef EVICTD_RECORD_H
#define EVICTD_RECORD_H

#include <stddef.h>
#include <stdint.h>

#include "buf.h"
#include "session.h"

#define EVD_SEG_MAGIC_V1 "EVDJRNL1"
#define EVD_SEG_MAGIC_V2 "EVDJRNL2"
#define EVD_SEG_MAGIC_LEN 8

/* One state change. Records hold one or more (a batch request's). */
typedef enum evd_op_type_e {
  EVD_OP_CREATE = 1,
  EVD_OP_STEP = 2,
  EVD_OP_EVICT = 3,
  EVD_OP_DELETE = 4,
  EVD_OP_REAP = 5,
  EVD_OP_CREATE2 = 6,
  EVD_OP_STEP2 = 7,
  EVD_OP_COMMIT = 8,
  EVD_OP_TRUNCATE = 9,
  EVD_OP_FORK = 10,
  EVD_OP_ADOPT = 11
} evd_op_type_t;

/* ADOPT's flag: the adopted state replaced an existing session. */
#define EVD_OP_REPLACED 1u

/* STEP2's flags as the files hold them. The first two are the retry
 * record's flags (EVD_RP_*, session.h), tied to them below so that a change
 * of the memory layout fails to compile instead of changing the files. */
#define EVD_OP_TENTATIVE 1u  /* the positions were drafts */
#define EVD_OP_COMMIT_ARG 2u /* the step carried "commit": arg, first */
#define EVD_OP_CREATED 4u    /* the step created its session (which then
                                counts as holding nothing before it) */
#define EVD_OP_FLAGS (EVD_OP_TENTATIVE | EVD_OP_COMMIT_ARG | EVD_OP_CREATED)
_Static_assert(EVD_OP_TENTATIVE == EVD_RP_TENTATIVE,
               "journal flag EVD_OP_TENTATIVE is on disk: keep it 1");
_Static_assert(EVD_OP_COMMIT_ARG == EVD_RP_COMMIT_ARG,
               "journal flag EVD_OP_COMMIT_ARG is on disk: keep it 2");
_Static_assert((EVD_OP_CREATED & (EVD_RP_TENTATIVE | EVD_RP_COMMIT_ARG)) == 0,
               "EVD_OP_CREATED must not collide with a retry record flag");

typedef struct evd_op_s {
  evd_op_type_t type;
  const char *id;
  size_t idlen;
  evd_session_config_t cfg; /* CREATE, CREATE2, ADOPT */
  uint32_t budget;          /* EVICT */
  uint32_t flags, arg;      /* STEP2, ADOPT; arg also of COMMIT and
                               TRUNCATE, and ADOPT's newest */
  const uint32_t *positions; /* ADOPT: kept */
  uint32_t n;
  union { /* (one or the other: an op is no bigger for ADOPT's slots) */
    struct {
      const char *child; /* FORK */
      size_t childlen;
    };
    const uint32_t *slots; /* ADOPT: the slot of each kept position */
  };
} evd_op_t;

/* Applies one op read back from disk; returns 0 or a negative EVD_E*. */
typedef int (*evd_apply_fn)(void *ctx, const evd_op_t *op);

static inline void evd_le32_set(unsigned char *p, uint32_t v) {
  p[0] = (unsigned char)v;
  p[1] = (unsigned char)(v >> 8);
  p[2] = (unsigned char)(v >> 16);
  p[3] = (unsigned char)(v >> 24);
}

static inline uint32_t evd_le32(const unsigned char *p) {
  return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 |
         (uint32_t)p[3] << 24;
}

static inline uint64_t evd_le64(const unsigned char *p) {
  return (uint64_t)evd_le32(p) | (uint64_t)evd_le32(p + 4) << 32;
}

/* Appends a u32, little-endian. */
void evd_record_put32(evd_buf_t *b, uint32_t v);

/* Appends one op's encoding. */
void evd_record_put_op(evd_buf_t *b, const evd_op_t *op);

/* Decodes the ops of one record's payload from a segment of `version`
 * (1 or 2) and applies them in order (the journal's recovery does this for
 * each record after the snapshot); positions go through *scratch (grown as
 * needed, the caller frees it). Returns 0, EVD_ECORRUPT for a payload that
 * does not decode (or an op its version cannot hold), EVD_ENOMEM, or what
 * `apply` returned. */
int evd_record_apply(const unsigned char *p, size_t len, int version,
                     evd_apply_fn apply, void *ctx, uint32_t **scratch,
                     size_t *cap);

#endif

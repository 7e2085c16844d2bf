/* The table of sessions: one sliding window per sequence, found by id in
 * O(1), kept in last-use order so that idle ones can be reaped oldest first
 * without scanning, each with room for the record of its last step, commit
 * or truncate request (replay.h) so that a retried request can be answered
 * again. No I/O. */
#ifndef EVICTD_SESSION_H
#define EVICTD_SESSION_H

#include <stddef.h>
#include <stdint.h>

#include "queue.h"
#include "rpool.h"
#include "window.h"

/* Session ids are 1..EVD_SESSION_ID_MAX bytes of [A-Za-z0-9._~-]. */
#define EVD_SESSION_ID_MAX 128

/* The largest page size of page-granular answers. */
#define EVD_MAX_PAGE_SIZE 65536u

typedef struct evd_table_s evd_table_t;
typedef struct evd_session_s evd_session_t;

/* A session's configuration: the window's and the page size of its
 * page-granular answers (0: none). */
typedef struct evd_session_config_s {
  uint32_t budget, sinks, lookahead, page_size;
} evd_session_config_t;

/* One session, allocated in one block: this header, the id, the area of
 * its replay record (replay.h: 7 words, 11 with pages), then the window
 * with its ring (see evd_session_window). Fields are read-only outside
 * session.c and replay.c. (The header is kept small on purpose: every byte
 * of it is paid once per session; offsets are computed, not stored.) */
struct evd_session_s {
  evd_session_t *hnext;               /* hash chain */
  evd_queue_t lru;                    /* last-use list, oldest first */
  uint32_t used;                      /* tick of the last use */
  uint16_t page_m1;                   /* page size - 1, with EVD__PAGED */
  uint8_t bits;                       /* EVD__PAGED */
  uint8_t idlen;                      /* bytes of id */
  char id[];                          /* idlen bytes, not NUL-terminated */
};

/* In bits: the session gives page-granular answers. */
#define EVD__PAGED 0x80u

/* Words of a session's replay area. */
#define EVD__RP_WORDS 7u
#define EVD__RP_WORDS_PAGED 11u

/* What a replay record remembers of a request. */
typedef enum evd_rp_op_e {
  EVD_RP_STEP = 1,     /* a step (positions, maybe tentative, maybe commit) */
  EVD_RP_COMMIT = 2,   /* a commit (arg: newest) */
  EVD_RP_TRUNCATE = 3  /* a truncate (arg: from) */
} evd_rp_op_t;

/* Flags of a step in a replay record. */
#define EVD_RP_TENTATIVE 1u /* the positions were drafts */
#define EVD_RP_COMMIT_ARG 2u /* the step carried "commit": arg */

/* Returns 1 when id[0..len) is a valid session id, else 0. */
int evd_session_id_valid(const char *id, size_t len);

/* The session's window: after the id (aligned for uint32s) and the
 * replay area (server/session_int.h has the block's layout). */
static inline evd_window_t *evd_session_window(const evd_session_t *s) {
  return (evd_window_t *)((char *)s +
                          ((offsetof(evd_session_t, id) + s->idlen + 3) &
                           ~(size_t)3) +
                          4 * ((s->bits & EVD__PAGED) ? EVD__RP_WORDS_PAGED
                                                      : EVD__RP_WORDS));
}

/* Positions per logical page of the session's answers, or 0 for none. */
static inline uint32_t evd_session_page_size(const evd_session_t *s) {
  return (s->bits & EVD__PAGED) ? (uint32_t)s->page_m1 + 1 : 0;
}

/* Bytes one session block takes (header, id, replay area, window and
 * ring), before the allocator's own overhead. */
size_t evd_session_footprint(size_t idlen, const evd_session_config_t *cfg);

/* Makes an empty table that will hold at most max_sessions, with a replay
 * pool of at most pool_bytes (replay.h). The hash key is drawn from
 * getrandom(2) so that clients cannot aim ids at one bucket. Returns 0, or
 * EVD_ENOMEM. Free with evd_table_free. */
int evd_table_new(evd_table_t **out, uint32_t max_sessions,
                  size_t pool_bytes);

/* Frees the table and every session in it. NULL is accepted. */
void evd_table_free(evd_table_t *t);

/* Sizes an empty table's buckets for n sessions at once (loading saved
 * state), so that they are not rehashed on the way, and readies about
 * `bytes` of heap for them. Does nothing when the table is not empty or the
 * memory is not there. evd_table_reserve_done() follows the load. */
void evd_table_reserve(evd_table_t *t, size_t n, size_t bytes);
void evd_table_reserve_done(void);

/* The number of hash buckets now (for tests): a power of two. */
size_t evd__table_buckets(const evd_table_t *t);

/* Asks the cache for what a later evd_table_find(id) will read: its
 * bucket (deep 0), then, once that is there, the first session of the
 * bucket's chain (deep 1). Loading saved state calls it a few records
 * ahead, so that its lookups do not wait on memory. Changes nothing. */
void evd_table_prefetch(evd_table_t *t, const char *id, size_t len,
                        int deep);

/* Changes the session limit (loading saved state ignores it) and returns
 * the previous one. */
uint32_t evd_table_set_max(evd_table_t *t, uint32_t max);

/* Number of live sessions. */
uint32_t evd_table_count(const evd_table_t *t);

/* The keyed hash of an id in this table (for tests and statistics). */
uint32_t evd_table_hash(const evd_table_t *t, const char *id, size_t len);

/* The session with this id, or NULL. O(1) on average. */
evd_session_t *evd_table_find(evd_table_t *t, const char *id, size_t len);

/* Creates a session (which must not exist yet) whose window holds position
 * 0, marks it used at tick `now`, and stores it in *out. The id must be
 * valid. Returns 0, EVD_EINVAL for a configuration the window refuses,
 * EVD_ELIMIT when max_sessions are live, or EVD_ENOMEM; nothing changes on
 * failure. */
int evd_table_add(evd_table_t *t, const char *id, size_t len,
                  const evd_session_config_t *cfg, uint32_t now,
                  evd_session_t **out);

/* As evd_table_add, but the window is only prepared (evd_window_prepare):
 * the caller fills its slots and restores its state before anything else
 * reads it, or removes the session. For loading a snapshot. */
int evd_table_add_prepared(evd_table_t *t, const char *id, size_t len,
                           const evd_session_config_t *cfg, uint32_t now,
                           evd_session_t **out);

/* Replaces session `old` by a new one with the same id and configuration
 * cfg whose window is only prepared, as evd_table_add_prepared makes it
 * (the caller builds its state before anything else reads it); the old
 * session and its replay record are freed. The new one is marked used at
 * `now`; the session count does not change. Returns 0, or EVD_EINVAL for
 * a configuration the window refuses or EVD_ENOMEM, with `old` left as it
 * was. */
int evd_table_replace(evd_table_t *t, evd_session_t *old,
                      const evd_session_config_t *cfg, uint32_t now,
                      evd_session_t **out);

/* Creates session `id` (which must not exist yet) as an exact copy of
 * `parent`'s configuration and window, without its replay record; marks it
 * used at `now`. O(budget). Returns 0, EVD_ELIMIT or EVD_ENOMEM; nothing
 * changes on failure. */
int evd_table_fork(evd_table_t *t, const evd_session_t *parent,
                   const char *id, size_t len, uint32_t now,
                   evd_session_t **out);

/* The session's configuration. */
void evd_session_config(const evd_session_t *s, evd_session_config_t *out);

/* 1 when a and b have the same configuration and hold the same positions
 * in the same slots with the same newest and drafts; else 0. */
int evd_session_same_state(const evd_session_t *a, const evd_session_t *b);

/* Removes a session from the table and frees it. */
void evd_table_remove(evd_table_t *t, evd_session_t *s);

/* Marks a session used at tick `now`, moving it to the young end. */
void evd_table_touch(evd_table_t *t, evd_session_t *s, uint32_t now);

/* The least recently used session (NULL when empty), and the next younger
 * one: iterate all sessions oldest first. Removing the current session
 * during iteration is fine after fetching its successor. */
evd_session_t *evd_table_oldest(const evd_table_t *t);
evd_session_t *evd_table_younger(const evd_session_t *s);

/* The table's pool of replay records kept on the heap (rpool.h, replay.h),
 * with its limit in bytes. */
evd_rpool_t *evd_table_pool(evd_table_t *t);

#endif

/* What the session table and the replay records kept in its blocks share,
 * and nobody else sees: where a record sits in a session's block. The
 * table frees a record through the pool (rpool.h) without knowing its
 * contents, so that session.c does without replay.c and replay.c without
 * the table's insides. */
#ifndef EVICTD_SESSION_INT_H
#define EVICTD_SESSION_INT_H

#include "session.h"

/* A session block: the header (evd_session_t), the id, then, aligned for
 * uint32s, the replay area of EVD__RP_WORDS words (EVD__RP_WORDS_PAGED
 * with EVD__PAGED), then the window with its ring. Offsets are computed,
 * not stored (evd_session_window). */

/* The session's replay area: right after the id, aligned for uint32s. */
static inline uint32_t *evd__session_rp(const evd_session_t *s) {
  return (uint32_t *)((char *)s + ((offsetof(evd_session_t, id) + s->idlen +
                                    3) & ~(size_t)3));
}

#endif

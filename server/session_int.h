/* What the session table and the replay records kept in its blocks share,
 * and nobody else sees: where a record sits in a session's block, and the
 * one call the table makes into replay.c. Lets session.c do without
 * replay.h and replay.c without the table's insides. */
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

/* replay.c: forgets the session's record, freeing a pooled one; the table
 * calls it before freeing the block (evd_replay_clear in replay.h). */
void evd_replay_clear(evd_table_t *t, evd_session_t *s);

#endif

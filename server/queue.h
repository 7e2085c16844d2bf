/* An intrusive doubly linked list, as libuv's queue.h: circular, with a
 * sentinel head, so that linking and unlinking have no NULL branches and
 * an element unlinked (or only initialised) points at itself and may be
 * unlinked again. The node is embedded in the element; EVD_QUEUE_DATA
 * gets the element back. No allocation. */
#ifndef EVICTD_QUEUE_H
#define EVICTD_QUEUE_H

#include <stddef.h>

typedef struct evd_queue_s {
  struct evd_queue_s *next, *prev;
} evd_queue_t;

/* The element of `type` whose member `field` is the node q. */
#define EVD_QUEUE_DATA(q, type, field)                                         \
  ((type *)(void *)((char *)(q) - offsetof(type, field)))

/* Makes q an empty list (a head), or an element on no list. */
static inline void evd_queue_init(evd_queue_t *q) {
  q->next = q->prev = q;
}

/* 1 when the list with head h is empty (or element h is on no list). */
static inline int evd_queue_empty(const evd_queue_t *h) {
  return h->next == h;
}

/* The first (oldest) node of a non-empty list, and the last. */
static inline evd_queue_t *evd_queue_head(const evd_queue_t *h) {
  return h->next;
}
static inline evd_queue_t *evd_queue_tail(const evd_queue_t *h) {
  return h->prev;
}

/* Appends q at the end of the list with head h. */
static inline void evd_queue_insert_tail(evd_queue_t *h, evd_queue_t *q) {
  q->next = h;
  q->prev = h->prev;
  q->prev->next = q;
  h->prev = q;
}

/* Unlinks q from its list and leaves it on none (pointing at itself), so
 * that unlinking it again changes nothing. */
static inline void evd_queue_remove(evd_queue_t *q) {
  q->prev->next = q->next;
  q->next->prev = q->prev;
  q->next = q->prev = q;
}

#endif

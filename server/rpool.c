/* The heap pool of replay records (see rpool.h): one allocation per record,
 * linked oldest first, each knowing the area that points at it so that
 * letting it go can tell that area. */
#include "rpool.h"

#include <stdlib.h>
#include <string.h>

typedef struct {
  evd_queue_t q;  /* in the pool, oldest first */
  uint32_t *area; /* the area pointing at it */
  size_t bytes;
  uint32_t w[];
} record_t;

static record_t *record_of(const uint32_t *area) {
  record_t *r;

  memcpy(&r, area + 1, sizeof r);
  return r;
}

void evd_rpool_init(evd_rpool_t *p, size_t limit) {
  evd_queue_init(&p->records);
  p->bytes = 0;
  p->limit = limit;
  p->let_go = 0;
}

uint32_t *evd_rpool_add(evd_rpool_t *p, uint32_t *area, size_t words) {
  size_t bytes = sizeof(record_t) + 4 * words;
  record_t *r;

  if (bytes > p->limit)
    return NULL; /* it could never fit */
  r = malloc(bytes);
  if (r == NULL)
    return NULL;
  r->bytes = bytes;
  r->area = area;
  evd_queue_insert_tail(&p->records, &r->q);
  p->bytes += bytes;
  area[0] = (area[0] & ~EVD_RPOOL_FORM_MASK) | EVD_RPOOL_HEAP;
  memcpy(area + 1, &r, sizeof r);
  return r->w;
}

uint32_t *evd_rpool_words(const uint32_t *area) {
  return record_of(area)->w;
}

static void unlink_record(evd_rpool_t *p, record_t *r) {
  evd_queue_remove(&r->q);
  p->bytes -= r->bytes;
}

void evd_rpool_trim(evd_rpool_t *p) {
  while (p->bytes > p->limit) {
    record_t *r = EVD_QUEUE_DATA(evd_queue_head(&p->records), record_t, q);
    uint32_t *area = r->area;

    unlink_record(p, r);
    area[0] = (area[0] & ~EVD_RPOOL_FORM_MASK) | EVD_RPOOL_GONE;
    free(r);
    p->let_go++;
  }
}

void evd_rpool_release(evd_rpool_t *p, uint32_t *area) {
  if (evd_rpool_form(area) == EVD_RPOOL_HEAP) {
    record_t *r = record_of(area);
    unlink_record(p, r);
    free(r);
  }
  area[0] = EVD_RPOOL_NONE;
}

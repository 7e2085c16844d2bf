/* The Responses API's store (rstore.c): the responses made with store
 * true, the newest `max` of them, each its answer (GET
 * /v1/responses/{id}) and where its conversation was left parked (what
 * previous_response_id continues). Safe from any thread. */
#ifndef EVICTD_LLAMA_SERVE_API_RSTORE_H
#define EVICTD_LLAMA_SERVE_API_RSTORE_H

#include <stdbool.h>
#include <stdint.h>

typedef struct rstore_s rstore_t;

/* Where a response left its conversation. */
typedef struct rconv_s {
  char session[136];      /* its evictd session ("" when none was kept) */
  uint32_t n;             /* positions that conversation computed */
  uint64_t gen;           /* its generation then (a later change of it by
                             another request is told) */
  int32_t last;           /* the answer's last token, never decoded (-1:
                             none): the continuation decodes it first */
} rconv_t;

/* A store of at most max responses; NULL when out of memory. */
rstore_t *rstore_new(uint32_t max);
void rstore_free(rstore_t *r);

/* Keeps response id (answer: its JSON text, taken, malloc'd) and its
 * conversation; the oldest goes beyond max. Out of memory, it is not
 * kept. */
void rstore_put(rstore_t *r, const char *id, const rconv_t *conv,
                char *answer);

/* Response id's conversation into *out: 0, or -1 when it is not kept. */
int rstore_conv(rstore_t *r, const char *id, rconv_t *out);

/* A copy of response id's answer (the caller frees it); NULL with *found
 * false when it is not kept, or with *found true when out of memory. */
char *rstore_answer(rstore_t *r, const char *id, bool *found);

/* Forgets response id: whether it was kept. */
bool rstore_delete(rstore_t *r, const char *id);

#endif

/* The stored responses (rstore.h): a list, newest first, under a mutex;
 * looked up by id (a few thousand at most: a walk costs less than the
 * request that asks). */
#include "serve/api/rstore.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct stored_s {
  struct stored_s *prev, *next; /* newest first */
  char id[48];
  rconv_t conv;
  char *answer;           /* the response object, as JSON text */
} stored_t;

struct rstore_s {
  pthread_mutex_t mu;
  stored_t *head, *tail;
  uint32_t count, max;
};

rstore_t *rstore_new(uint32_t max) {
  rstore_t *r = calloc(1, sizeof(*r));
  if (r == NULL)
    return NULL;
  pthread_mutex_init(&r->mu, NULL);
  r->max = max;
  return r;
}

static void unlink_stored(rstore_t *r, stored_t *s) {
  if (s->prev)
    s->prev->next = s->next;
  else
    r->head = s->next;
  if (s->next)
    s->next->prev = s->prev;
  else
    r->tail = s->prev;
  r->count--;
}

static void free_stored(stored_t *s) {
  free(s->answer);
  free(s);
}

void rstore_free(rstore_t *r) {
  if (r == NULL)
    return;
  for (stored_t *s = r->head, *next; s != NULL; s = next) {
    next = s->next;
    free_stored(s);
  }
  pthread_mutex_destroy(&r->mu);
  free(r);
}

/* Under the lock: the stored response id, or NULL. */
static stored_t *find(rstore_t *r, const char *id) {
  for (stored_t *s = r->head; s != NULL; s = s->next)
    if (strcmp(s->id, id) == 0)
      return s;
  return NULL;
}

void rstore_put(rstore_t *r, const char *id, const rconv_t *conv,
                char *answer) {
  stored_t *s = calloc(1, sizeof(*s));
  if (s == NULL) {
    free(answer);
    return;
  }
  snprintf(s->id, sizeof(s->id), "%s", id);
  s->conv = *conv;
  s->answer = answer;
  pthread_mutex_lock(&r->mu);
  s->next = r->head;
  if (r->head)
    r->head->prev = s;
  r->head = s;
  if (r->tail == NULL)
    r->tail = s;
  r->count++;
  while (r->count > r->max) {
    stored_t *old = r->tail;
    unlink_stored(r, old);
    free_stored(old);
  }
  pthread_mutex_unlock(&r->mu);
}

int rstore_conv(rstore_t *r, const char *id, rconv_t *out) {
  pthread_mutex_lock(&r->mu);
  stored_t *s = find(r, id);
  if (s != NULL)
    *out = s->conv;
  pthread_mutex_unlock(&r->mu);
  return s != NULL ? 0 : -1;
}

char *rstore_answer(rstore_t *r, const char *id, bool *found) {
  char *answer = NULL;
  pthread_mutex_lock(&r->mu);
  stored_t *s = find(r, id);
  if (s != NULL)
    answer = strdup(s->answer);
  pthread_mutex_unlock(&r->mu);
  *found = s != NULL;
  return answer;
}

bool rstore_delete(rstore_t *r, const char *id) {
  pthread_mutex_lock(&r->mu);
  stored_t *s = find(r, id);
  if (s != NULL)
    unlink_stored(r, s);
  pthread_mutex_unlock(&r->mu);
  if (s != NULL)
    free_stored(s);
  return s != NULL;
}

/* libFuzzer target of the C client's answer reader
 * (deploy/clients/c/reader.h), which reads what a daemon, or anything
 * answering in its place, sends. Input: a shape byte (mod 4: an answer, a
 * view, a batch, an error), a parameter byte (the answer's required fields,
 * mod 64; the batch's item count, mod 17), then the answer's bytes, in a
 * buffer of exactly their length. The properties: no crash and no read or
 * write out of bounds (ASan, UBSan); whatever is accepted keeps the
 * contract's invariants (checked by tests/client/rewrite.c, which shares no
 * code with the reader), and written back as JSON and read again gives the
 * same struct. Seeds: real daemon answers to proto/vectors
 * (make_answer_seeds.py). */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../../deploy/clients/c/reader.h"
#include "../client/rewrite.h"

#define MAX_ITEMS 16

/* A violated property: says which and aborts, so libFuzzer keeps the
 * input. */
static void broken(const char *what, const char *detail, const char *text,
                   size_t len) {
  fprintf(stderr, "*** invariant violated: %s: %s\n", what, detail);
  if (text != NULL)
    fprintf(stderr, "*** in %.*s\n", (int)(len < 2000 ? len : 2000), text);
  abort();
}

/* Whether every list and string of the struct points into the arena. */
static void in_arena(const evd__arena_t *a, evd_list_t l) {
  if (l.n > 0 && (l.v < a->u32 || l.v + l.n > a->u32 + a->u32_len))
    broken("a list outside the arena", "", NULL, 0);
}

static void str_in_arena(const evd__arena_t *a, const char *s) {
  if (s != NULL && s[0] != '\0' &&
      (s < a->chars || s + strlen(s) >= a->chars + a->chars_len))
    broken("a string outside the arena", s, NULL, 0);
}

static void answer_in_arena(const evd__arena_t *a, const evd_answer_t *x) {
  in_arena(a, x->victims);
  in_arena(a, x->slots);
  in_arena(a, x->dropped);
  in_arena(a, x->removed);
  in_arena(a, x->pages_new);
  in_arena(a, x->pages_freed);
  in_arena(a, x->pages_transient);
}

/* One read of len bytes at s into out, with a fresh arena in *a. */
static int read_as(unsigned shape, unsigned param, const char *s, size_t len,
                   evd__arena_t *a, void *out) {
  evd__reader_t r;
  int rc;

  if (evd__arena_fit(a, len))
    return -2;
  evd__reader_init(&r, s, len, a);
  switch (shape) {
  case 0: rc = evd__read_answer(&r, param % 64, out); break;
  case 1: rc = evd__read_view(&r, out); break;
  case 2: rc = evd__read_batch(&r, out, param % (MAX_ITEMS + 1)); break;
  default: rc = evd__read_error(&r, out); break;
  }
  if (rc != 0 && r.why[0] == '\0')
    broken("a refusal without a reason", "", s, len);
  return rc;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  static evd_batch_result_t b1[MAX_ITEMS], b2[MAX_ITEMS];
  union {
    evd_answer_t answer;
    evd_view_t view;
    evd_client_err_t error;
  } x, y;
  evd__arena_t a1 = {0}, a2 = {0};
  rw_buf_t text = {0};
  unsigned shape, param;
  const char *why = NULL, *diff = NULL;
  void *out1, *out2;
  char *s;
  size_t len, i, n;

  if (size < 2)
    return 0;
  shape = data[0] % 4;
  param = data[1];
  len = size - 2;
  n = param % (MAX_ITEMS + 1);
  /* Exactly the answer's bytes, no NUL after them. */
  if ((s = malloc(len ? len : 1)) == NULL)
    return 0;
  memcpy(s, data + 2, len);
  out1 = shape == 2 ? (void *)b1 : (void *)&x;
  out2 = shape == 2 ? (void *)b2 : (void *)&y;
  if (read_as(shape, param, s, len, &a1, out1) != 0)
    goto done;
  switch (shape) {
  case 0:
    why = rw_answer_broken(&x.answer);
    answer_in_arena(&a1, &x.answer);
    rw_answer(&text, &x.answer);
    break;
  case 1:
    why = rw_view_broken(&x.view);
    str_in_arena(&a1, x.view.id);
    in_arena(&a1, x.view.kept);
    in_arena(&a1, x.view.slots);
    in_arena(&a1, x.view.tentative);
    in_arena(&a1, x.view.pages);
    rw_view(&text, &x.view);
    break;
  case 2:
    why = rw_batch_broken(b1, n);
    for (i = 0; i < n; i++) {
      answer_in_arena(&a1, &b1[i].answer);
      if (b1[i].rc != 0) {
        str_in_arena(&a1, b1[i].error.code);
        str_in_arena(&a1, b1[i].error.message);
      }
    }
    rw_batch(&text, b1, n);
    break;
  default:
    why = rw_error_broken(&x.error, false);
    str_in_arena(&a1, x.error.code);
    str_in_arena(&a1, x.error.message);
    rw_error(&text, &x.error);
    break;
  }
  if (why != NULL)
    broken("an accepted answer breaks an invariant", why, s, len);
  if (text.failed)
    goto done;
  /* Written back and read again: the same struct. */
  if (read_as(shape, param, text.p, text.len, &a2, out2) != 0)
    broken("an accepted answer, written back, is refused", "", text.p,
           text.len);
  switch (shape) {
  case 0: diff = rw_answer_diff(&x.answer, &y.answer); break;
  case 1: diff = rw_view_diff(&x.view, &y.view); break;
  case 2: diff = rw_batch_diff(b1, b2, n); break;
  default: diff = rw_error_diff(&x.error, &y.error); break;
  }
  if (diff != NULL)
    broken("written back and read again, a field differs", diff, text.p,
           text.len);
done:
  rw_free(&text);
  evd__arena_free(&a1);
  evd__arena_free(&a2);
  free(s);
  return 0;
}

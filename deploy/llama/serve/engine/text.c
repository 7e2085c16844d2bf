/* A choice's shown text: whole UTF-8 characters, stop strings (text.h). */
#include "serve/engine/text.h"

#include <stdlib.h>
#include <string.h>

#include "buf.h"

/* The length of an unfinished UTF-8 character at the end of s[0..n): a
 * lead byte whose continuation bytes have not all come yet. */
static size_t unfinished(const unsigned char *s, size_t n) {
  for (size_t back = 1; back <= 3 && back <= n; back++) {
    unsigned char c = s[n - back];
    if ((c & 0xC0) == 0x80)
      continue;
    size_t need = c >= 0xF0 && c <= 0xF4 ? 4 : c >= 0xE0 && c <= 0xEF ? 3
                : c >= 0xC2 && c <= 0xDF ? 2 : 1;
    return need > back ? back : 0;
  }
  return 0;
}

/* The longest end of s[0..n) that begins one of the stops (shorter than
 * it: a whole one would have been found). */
static size_t stop_prefix(const char *s, size_t n, char *const *stops,
                          uint32_t n_stops) {
  size_t best = 0;
  for (uint32_t i = 0; i < n_stops; i++) {
    size_t len = strlen(stops[i]);
    for (size_t k = len == 0 ? 0 : len - 1 < n ? len - 1 : n; k > best; k--)
      if (memcmp(s + n - k, stops[i], k) == 0) {
        best = k;
        break;
      }
  }
  return best;
}

/* Copies s[0..n) into t->out, bytes that are not UTF-8 as U+FFFD. */
static int show_bytes(text_t *t, const char *s, size_t n, const char **show,
                      size_t *len) {
  evd_buf_reset(&t->out, 1 << 16);
  for (size_t i = 0; i < n;) {
    size_t k = evd_utf8_len((const unsigned char *)s + i, n - i);
    evd_buf_add(&t->out, k ? s + i : "\xEF\xBF\xBD", k ? k : 3);
    i += k ? k : 1;
  }
  *show = t->out.data;
  *len = t->out.len;
  return t->out.oom ? -1 : 0;
}

int text_push(text_t *t, const char *piece, size_t n, char *const *stops,
              uint32_t n_stops, const char **show, size_t *len) {
  evd_buf_t *h = &t->held;
  evd_buf_add(h, piece, n);
  if (h->oom)
    return -1;
  /* The earliest stop string in what is not shown yet. */
  size_t at = h->len;
  for (uint32_t i = 0; i < n_stops; i++) {
    size_t sl = strlen(stops[i]);
    for (size_t p = 0; sl > 0 && p + sl <= h->len && p < at; p++)
      if (memcmp(h->data + p, stops[i], sl) == 0) {
        at = p;
        t->stop = i;
        break;
      }
  }
  if (at < h->len) {
    int rc = show_bytes(t, h->data, at, show, len);
    h->len = 0;
    return rc < 0 ? -1 : 1;
  }
  size_t keep = stop_prefix(h->data, h->len, stops, n_stops);
  size_t cut = unfinished((const unsigned char *)h->data, h->len);
  if (cut > keep)
    keep = cut;
  size_t shown = h->len - keep;
  if (show_bytes(t, h->data, shown, show, len) != 0)
    return -1;
  /* Nothing shown: nothing moves (an empty piece leaves data NULL, and
   * memmove must not see it). */
  if (shown > 0) {
    memmove(h->data, h->data + shown, keep);
    h->len = keep;
  }
  return 0;
}

int text_flush(text_t *t, const char **show, size_t *len) {
  evd_buf_t *h = &t->held;
  size_t n = h->len - unfinished((const unsigned char *)h->data, h->len);
  h->len = 0;
  return show_bytes(t, h->data, n, show, len);
}

void text_clear(text_t *t) { t->held.len = 0; }

void text_free(text_t *t) {
  evd_buf_free(&t->held);
  evd_buf_free(&t->out);
}

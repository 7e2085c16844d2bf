/* Tokens as text (pieces.h): a token's piece as common_token_to_piece
 * gives it to llama-server (a control token's own text included). */
#include "serve/shared/pieces.h"

#include "common/grow.h"

int pieces_piece(const site_t *site, llama_token tok, char **buf,
                 size_t *cap) {
  if (*cap < 64 && grow(buf, cap, 64, 1) != 0)
    return -1;
  int n = lm_piece_special(site->lm, tok, *buf, *cap);
  if (n < 0) { /* -n bytes are needed */
    if (grow(buf, cap, (size_t)-n, 1) != 0)
      return -1;
    n = lm_piece_special(site->lm, tok, *buf, *cap);
  }
  return n;
}

bool pieces_utf8(const char *s, size_t n) {
  for (size_t i = 0; i < n;) {
    size_t k = evd_utf8_len((const unsigned char *)s + i, n - i);
    if (k == 0)
      return false;
    i += k;
  }
  return true;
}

json_t *pieces_string(const char *s, size_t n) {
  evd_buf_t b;
  evd_buf_init(&b);
  for (size_t i = 0; i < n;) {
    size_t k = evd_utf8_len((const unsigned char *)s + i, n - i);
    if (k == 0) {
      evd_buf_add(&b, "\xef\xbf\xbd", 3);
      k = 1;
    } else {
      evd_buf_add(&b, s + i, k);
    }
    i += k;
  }
  json_t *j = b.oom ? NULL : json_stringn(b.data ? b.data : "", b.len);
  evd_buf_free(&b);
  return j;
}

json_t *pieces_json(const site_t *site, const llama_token *toks, size_t n) {
  evd_buf_t text;
  char *buf = NULL;
  size_t cap = 0;
  int bad = 0;
  evd_buf_init(&text);
  for (size_t i = 0; !bad && i < n; i++) {
    int len = pieces_piece(site, toks[i], &buf, &cap);
    if (len < 0)
      bad = 1;
    else
      evd_buf_add(&text, buf, (size_t)len);
  }
  free(buf);
  json_t *s = bad || text.oom ? NULL
                              : pieces_string(text.data ? text.data : "",
                                              text.len);
  evd_buf_free(&text);
  return s;
}

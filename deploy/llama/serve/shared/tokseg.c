/* Tokenizing a prompt from the last special token it shares with a kept
 * one (tokseg.h says why that is exact). */
#include "serve/shared/tokseg.h"

#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include <llama.h>

#include "common/grow.h"

/* Prompts shorter than this are tokenized whole and not kept. */
#define SHORT_TEXT 64
/* Kept special tokens tried, back from where the texts part. */
#define TRIES 16

/* A token llama.cpp splits out of a text before tokenizing it. */
typedef struct special_s {
  const char *text; /* the vocabulary's own */
  uint32_t len;
  bool ctl;         /* control or unknown: split out only with special */
} special_t;

/* A place inside a special token's text: the pair of bytes at `at - 1`
 * and `at` in it (0 < at < len). */
typedef struct inside_s {
  uint32_t sp, at;
} inside_t;

/* A place x where a kept text splits on its own: beside a special
 * token's text, whose other end is y (x < y: x is where it begins), the
 * first ti of the kept tokens (BOS included) being those of text[0..x). */
typedef struct occ_t {
  uint32_t x, y, ti;
} occ_t;

typedef struct kept_s {
  char *text;
  size_t len;
  llama_token *tok; /* all of the text's tokens, BOS/EOS included */
  uint32_t n;
  occ_t *occ;
  uint32_t n_occ;
  bool special;     /* tokenized with special tokens parsed */
  uint64_t used;    /* the tick of its last use */
} kept_t;

struct tokseg_s {
  const lm_t *lm;
  const char *why;          /* NULL: usable */
  special_t *sp;
  uint32_t n_sp;
  uint32_t maxlen;          /* the longest one's bytes */
  uint32_t *first_at;       /* [257]: sp indices by first byte, in first */
  uint32_t *first;
  uint32_t *pair_at;        /* [65537]: places by their two bytes */
  inside_t *pair;
  bool lstrip[2], rstrip[2]; /* [special]: a token split out strips the
                                spaces before it, after it */
  llama_token head, tail;   /* added before and after (LLAMA_TOKEN_NULL:
                               none) */
  pthread_mutex_t mu;       /* the rest */
  kept_t *kept;
  uint32_t n_kept, cap;
  size_t bytes, max_bytes;
  uint64_t tick;
  tokseg_stats_t st;
};

/* A growing list of tokens and special tokens' places. */
typedef struct out_s {
  llama_token *tok;
  size_t n, cap;
  occ_t *occ;
  size_t n_occ, cap_occ;
} out_t;

/* The bytes isspace() takes for a space in the C locale (llama.cpp's
 * test for the spaces a stripping token takes). */
static bool space(char c) { return c == ' ' || (c >= '\t' && c <= '\r'); }

/* The token text sp[i] is split out under special. */
static bool counts(const tokseg_t *ts, uint32_t i, bool special) {
  return special || !ts->sp[i].ctl;
}

/* Whether a special token's text in text[0..len) crosses x (begins
 * before it, ends after it). */
static bool crossed(const tokseg_t *ts, const char *text, size_t len,
                    size_t x, bool special) {
  if (x == 0 || x >= len)
    return false;
  unsigned key = (unsigned)(unsigned char)text[x - 1] << 8 |
                 (unsigned char)text[x];
  for (uint32_t k = ts->pair_at[key]; k < ts->pair_at[key + 1]; k++) {
    const inside_t *in = &ts->pair[k];
    const special_t *s = &ts->sp[in->sp];
    if (!counts(ts, in->sp, special) || x < in->at ||
        x - in->at + s->len > len)
      continue;
    if (memcmp(text + x - in->at, s->text, s->len) == 0)
      return true;
  }
  return false;
}

/* Whether text[0..len) splits at x on its own, x being one end of a
 * special token's text whose other end is y: no special token's text
 * crosses either end (then that text is a token of the split, and the
 * split of text is that of what is before x followed by that of what is
 * after), and no token that strips spaces could take one across x or
 * from the token's own ends. */
static bool splits(const tokseg_t *ts, const char *text, size_t len,
                   size_t x, size_t y, bool special) {
  size_t p = x < y ? x : y, q = x < y ? y : x;
  bool l = ts->lstrip[special], r = ts->rstrip[special];
  if ((l && space(text[q - 1])) || (r && space(text[p])))
    return false;
  if (x == p ? (l && p > 0 && space(text[p - 1]))
             : (r && q < len && space(text[q])))
    return false;
  return !crossed(ts, text, len, p, special) &&
         !crossed(ts, text, len, q, special);
}

/* Adds tokens of text[a..b) tokenized alone (nothing added): 0, or -1. */
static int piece(const tokseg_t *ts, const char *text, size_t a, size_t b,
                 bool special, out_t *o) {
  if (a == b)
    return 0;
  llama_token *t = NULL;
  int m = lm_tokenize_more(ts->lm, text + a, b - a, special, &t);
  if (m < 0 || grow(&o->tok, &o->cap, o->n + (size_t)m, sizeof(*o->tok))) {
    free(t);
    return -1;
  }
  memcpy(o->tok + o->n, t, sizeof(*t) * (size_t)m);
  o->n += (size_t)m;
  free(t);
  return 0;
}

/* Notes x (an end of a special token's text, y the other) as a place
 * text splits at, the tokens so far being those of text[0..x). */
static int note(out_t *o, size_t x, size_t y) {
  if (o->n_occ > 0 && o->occ[o->n_occ - 1].x == x)
    return 0; /* the place a kept text's tokens were taken to */
  if (grow(&o->occ, &o->cap_occ, o->n_occ + 1, sizeof(*o->occ)))
    return -1;
  o->occ[o->n_occ++] = (occ_t){(uint32_t)x, (uint32_t)y, (uint32_t)o->n};
  return 0;
}

/* Tokenizes text[from..len) (from: 0 or a place it splits at), piece by
 * piece between the places it splits at on its own, and notes those.
 * 0, or -1 (out of memory, or a special token's text that did not come
 * out as one token). */
static int rest(const tokseg_t *ts, const char *text, size_t len,
                size_t from, bool special, out_t *o) {
  size_t a = from;
  for (size_t y = from; y < len; y++) {
    unsigned char c = (unsigned char)text[y];
    for (uint32_t k = ts->first_at[c]; k < ts->first_at[c + 1]; k++) {
      uint32_t i = ts->first[k];
      const special_t *s = &ts->sp[i];
      size_t q = y + s->len;
      if (!counts(ts, i, special) || q > len ||
          memcmp(text + y, s->text, s->len) != 0)
        continue;
      bool before = splits(ts, text, len, y, q, special);
      bool after = splits(ts, text, len, q, y, special);
      if (!before && !after)
        continue;
      if (before && (piece(ts, text, a, y, special, o) || note(o, y, q)))
        return -1;
      if (before)
        a = y;
      size_t ti = o->n;
      if (after && (piece(ts, text, a, q, special, o) ||
                    (before && o->n != ti + 1) || note(o, q, y)))
        return -1;
      if (after)
        a = q;
      y = q - 1;
      break;
    }
  }
  return piece(ts, text, a, len, special, o);
}

static void kept_free(kept_t *k) {
  free(k->text);
  free(k->tok);
  free(k->occ);
}

static size_t kept_bytes(const kept_t *k) {
  return k->len + k->n * sizeof(llama_token) + k->n_occ * sizeof(occ_t);
}

static void drop(tokseg_t *ts, uint32_t i) {
  ts->bytes -= kept_bytes(&ts->kept[i]);
  kept_free(&ts->kept[i]);
  ts->kept[i] = ts->kept[--ts->n_kept];
}

/* Keeps k (taking its arrays), in the place of `old` (an index, or -1)
 * or beside the others, the least recently used going first. Under
 * ts->mu. */
static void keep(tokseg_t *ts, kept_t *k, int64_t old) {
  size_t bytes = kept_bytes(k);
  if (bytes > ts->max_bytes / 2) {
    kept_free(k);
    return;
  }
  if (old >= 0)
    drop(ts, (uint32_t)old);
  while (ts->n_kept > 0 && (ts->n_kept == ts->cap ||
                            ts->bytes + bytes > ts->max_bytes)) {
    uint32_t lru = 0;
    for (uint32_t i = 1; i < ts->n_kept; i++)
      if (ts->kept[i].used < ts->kept[lru].used)
        lru = i;
    drop(ts, lru);
  }
  k->used = ++ts->tick;
  ts->kept[ts->n_kept++] = *k;
  ts->bytes += bytes;
}

/* The bytes a and b share from their start. */
static size_t common(const char *a, size_t na, const char *b, size_t nb) {
  size_t n = na < nb ? na : nb, i = 0;
  while (i + 8 <= n && memcmp(a + i, b + i, 8) == 0)
    i += 8;
  while (i < n && a[i] == b[i])
    i++;
  return i;
}

/* Starts o with the kept text's tokens that text (sharing `shared` bytes
 * with it) shares: up to the last place the kept text split at that text
 * splits at too, with the places before it. Returns that place (0:
 * nothing taken). Under ts->mu. */
static size_t take(const tokseg_t *ts, const kept_t *k, const char *text,
                   size_t len, size_t shared, bool special, out_t *o) {
  uint32_t j = k->n_occ, tries = 0;
  while (j > 0 && (k->occ[j - 1].x > shared || k->occ[j - 1].y > shared))
    j--;
  for (; j > 0 && tries < TRIES; j--, tries++) {
    const occ_t *c = &k->occ[j - 1];
    if (splits(ts, text, len, c->x, c->y, special))
      break;
  }
  if (j == 0 || tries == TRIES)
    return 0;
  const occ_t *last = &k->occ[j - 1];
  if (last->x == 0 || grow(&o->tok, &o->cap, last->ti, sizeof(*o->tok)) ||
      grow(&o->occ, &o->cap_occ, j, sizeof(*o->occ)))
    return 0;
  memcpy(o->tok, k->tok, sizeof(*o->tok) * last->ti);
  o->n = last->ti;
  /* The places near where the texts part are checked again (a token's
   * text the new bytes complete could cross them); those far before it
   * see only shared bytes. */
  o->n_occ = 0;
  for (uint32_t i = 0; i < j; i++) {
    const occ_t *c = &k->occ[i];
    size_t hi = c->x > c->y ? c->x : c->y;
    if (hi + ts->maxlen <= shared || i + 1 == j ||
        splits(ts, text, len, c->x, c->y, special))
      o->occ[o->n_occ++] = *c;
  }
  return last->x;
}

/* The whole text through llama.cpp, not kept. */
static int whole(tokseg_t *ts, const char *text, size_t len, bool special,
                 llama_token **out) {
  int n = lm_tokenize(ts->lm, text, len, special, out);
  pthread_mutex_lock(&ts->mu);
  ts->st.prompts++;
  if (n > 0)
    ts->st.tokens += (uint64_t)n;
  pthread_mutex_unlock(&ts->mu);
  return n;
}

int tokseg_tokenize(tokseg_t *ts, const char *text, size_t len,
                    bool special, llama_token **out, uint32_t *reused) {
  if (reused != NULL)
    *reused = 0;
  if (ts->why != NULL || len < SHORT_TEXT || len >= UINT32_MAX)
    return whole(ts, text, len, special, out);
  out_t o = {0};
  int64_t best = -1;
  size_t from = 0;
  pthread_mutex_lock(&ts->mu);
  size_t shared = 0;
  for (uint32_t i = 0; i < ts->n_kept; i++) {
    if (ts->kept[i].special != special)
      continue;
    size_t c = common(ts->kept[i].text, ts->kept[i].len, text, len);
    if (c > shared) {
      shared = c;
      best = i;
    }
  }
  if (best >= 0) {
    kept_t *k = &ts->kept[best];
    from = take(ts, k, text, len, shared, special, &o);
    if (from > 0)
      k->used = ++ts->tick;
  }
  pthread_mutex_unlock(&ts->mu);
  size_t taken = o.n;
  if (from == 0) {
    o.n = o.n_occ = 0;
    if (ts->head != LLAMA_TOKEN_NULL &&
        grow(&o.tok, &o.cap, 1, sizeof(*o.tok)) == 0)
      o.tok[o.n++] = ts->head;
    taken = 0;
  }
  bool ok = (from > 0 || ts->head == LLAMA_TOKEN_NULL || o.n == 1) &&
            rest(ts, text, len, from, special, &o) == 0 &&
            grow(&o.tok, &o.cap, o.n + 1, sizeof(*o.tok)) == 0;
  if (ok && ts->tail != LLAMA_TOKEN_NULL)
    o.tok[o.n++] = ts->tail;
  kept_t k = {.len = len, .tok = o.tok, .n = (uint32_t)o.n, .occ = o.occ,
              .n_occ = (uint32_t)o.n_occ, .special = special};
  llama_token *res = ok ? malloc(sizeof(*res) * o.n) : NULL;
  if (res == NULL || (k.text = malloc(len)) == NULL) {
    free(res);
    free(o.tok);
    free(o.occ);
    return whole(ts, text, len, special, out);
  }
  memcpy(res, o.tok, sizeof(*res) * o.n);
  *out = res;
  memcpy(k.text, text, len);
  if (reused != NULL)
    *reused = (uint32_t)taken;
  pthread_mutex_lock(&ts->mu);
  ts->st.prompts++;
  ts->st.tokens += o.n;
  if (taken > 0) {
    ts->st.hits++;
    ts->st.reused += taken;
  }
  /* The text takes the place of the kept one it extends (a
   * conversation's next turn); one that parted from it sits beside. The
   * list may have changed since: found again by its text. */
  int64_t old = -1;
  for (uint32_t i = 0; best >= 0 && k.n_occ > 0 && i < ts->n_kept; i++) {
    const kept_t *c = &ts->kept[i];
    if (c->special == special && c->len <= len &&
        common(c->text, c->len, text, len) == c->len) {
      old = i;
      break;
    }
  }
  if (k.n_occ > 0)
    keep(ts, &k, old);
  else /* nowhere to part it: nothing a later prompt could take */
    kept_free(&k);
  pthread_mutex_unlock(&ts->mu);
  return (int)o.n;
}

/* For qsort: inside_t's holding (token, length), the longest first. */
static int longer_first(const void *a, const void *b) {
  const inside_t *x = a, *y = b;
  return x->at != y->at ? (x->at < y->at ? 1 : -1)
                        : (x->sp > y->sp) - (x->sp < y->sp);
}

/* Reads the vocabulary's special tokens and what llama.cpp adds around a
 * text; sets ts->why when reuse would not be exact. */
static void examine(tokseg_t *ts) {
  const struct llama_vocab *v = ts->lm->vocab;
  int32_t n = llama_vocab_n_tokens(v);
  enum llama_token_attr split = LLAMA_TOKEN_ATTR_CONTROL |
                                LLAMA_TOKEN_ATTR_USER_DEFINED |
                                LLAMA_TOKEN_ATTR_UNKNOWN;
  size_t inside = 0;
  for (int pass = 0; pass < 2; pass++) {
    for (llama_token t = 0; t < n; t++) {
      enum llama_token_attr a = llama_vocab_get_attr(v, t);
      const char *text = llama_vocab_get_text(v, t);
      size_t len = text != NULL ? strlen(text) : 0;
      if (!(a & split) || len == 0)
        continue;
      if (len > UINT16_MAX) {
        ts->why = "a special token's text is longer than 65,535 bytes";
        return;
      }
      if (pass == 0) {
        ts->n_sp++;
        inside += len - 1;
        continue;
      }
      bool ctl = (a & (LLAMA_TOKEN_ATTR_CONTROL |
                       LLAMA_TOKEN_ATTR_UNKNOWN)) != 0;
      ts->sp[ts->n_sp++] = (special_t){text, (uint32_t)len, ctl};
      if (len > ts->maxlen)
        ts->maxlen = (uint32_t)len;
      if (a & LLAMA_TOKEN_ATTR_LSTRIP) {
        ts->lstrip[1] = true;
        ts->lstrip[0] |= !ctl;
      }
      if (a & LLAMA_TOKEN_ATTR_RSTRIP) {
        ts->rstrip[1] = true;
        ts->rstrip[0] |= !ctl;
      }
    }
    if (pass == 0) {
      ts->sp = calloc(ts->n_sp + 1, sizeof(*ts->sp));
      ts->first = calloc(ts->n_sp + 1, sizeof(*ts->first));
      ts->first_at = calloc(257, sizeof(*ts->first_at));
      ts->pair = calloc(inside + 1, sizeof(*ts->pair));
      ts->pair_at = calloc(65537, sizeof(*ts->pair_at));
      if (!ts->sp || !ts->first || !ts->first_at || !ts->pair ||
          !ts->pair_at) {
        ts->why = "out of memory";
        return;
      }
      ts->n_sp = 0;
    }
  }
  /* Both indices as counts, then offsets, then filled. */
  for (uint32_t i = 0; i < ts->n_sp; i++) {
    const special_t *s = &ts->sp[i];
    ts->first_at[(unsigned char)s->text[0] + 1]++;
    for (uint32_t at = 1; at < s->len; at++)
      ts->pair_at[((unsigned)(unsigned char)s->text[at - 1] << 8 |
                   (unsigned char)s->text[at]) + 1]++;
  }
  for (uint32_t c = 0; c < 256; c++)
    ts->first_at[c + 1] += ts->first_at[c];
  for (uint32_t c = 0; c < 65536; c++)
    ts->pair_at[c + 1] += ts->pair_at[c];
  uint32_t *fill = calloc(65536, sizeof(*fill));
  if (fill == NULL) {
    ts->why = "out of memory";
    return;
  }
  /* Each first byte's, the longest first (as llama.cpp tries them): at
   * a place where several begin, the one it splits out is tried first. */
  inside_t *order = calloc(ts->n_sp + 1, sizeof(*order));
  if (order == NULL) {
    free(fill);
    ts->why = "out of memory";
    return;
  }
  for (uint32_t i = 0; i < ts->n_sp; i++)
    order[i] = (inside_t){i, ts->sp[i].len};
  qsort(order, ts->n_sp, sizeof(*order), longer_first);
  for (uint32_t k = 0; k < ts->n_sp; k++) {
    unsigned c = (unsigned char)ts->sp[order[k].sp].text[0];
    ts->first[ts->first_at[c] + fill[c]++] = order[k].sp;
  }
  free(order);
  memset(fill, 0, 65536 * sizeof(*fill));
  for (uint32_t i = 0; i < ts->n_sp; i++) {
    const special_t *s = &ts->sp[i];
    for (uint32_t at = 1; at < s->len; at++) {
      unsigned key = (unsigned)(unsigned char)s->text[at - 1] << 8 |
                     (unsigned char)s->text[at];
      ts->pair[ts->pair_at[key] + fill[key]++] = (inside_t){i, at};
    }
  }
  free(fill);
  /* What llama.cpp adds around a text (llama_vocab::impl::tokenize):
   * SentencePiece, Unigram and BPE vocabularies a BOS and an EOS when
   * they say so, WordPiece a CLS and a SEP always, the others nothing.
   * Checked on the empty text, which gets those alone. */
  ts->head = ts->tail = LLAMA_TOKEN_NULL;
  switch (llama_vocab_type(v)) {
  case LLAMA_VOCAB_TYPE_SPM:
  case LLAMA_VOCAB_TYPE_BPE:
  case LLAMA_VOCAB_TYPE_UGM:
    if (llama_vocab_get_add_bos(v))
      ts->head = llama_vocab_bos(v);
    if (llama_vocab_get_add_eos(v))
      ts->tail = llama_vocab_eos(v);
    break;
  case LLAMA_VOCAB_TYPE_WPM:
    ts->head = llama_vocab_bos(v);
    ts->tail = llama_vocab_sep(v);
    break;
  case LLAMA_VOCAB_TYPE_RWKV:
  case LLAMA_VOCAB_TYPE_PLAMO2:
    break;
  default:
    ts->why = "the vocabulary's kind is not known here";
    return;
  }
  llama_token *e = NULL;
  int k = lm_tokenize(ts->lm, "", 0, true, &e);
  int want = (ts->head != LLAMA_TOKEN_NULL) + (ts->tail != LLAMA_TOKEN_NULL);
  if (k != want || (ts->head != LLAMA_TOKEN_NULL && e[0] != ts->head) ||
      (ts->tail != LLAMA_TOKEN_NULL && e[k - 1] != ts->tail))
    ts->why = "llama.cpp adds tokens to a text that this cache does not "
              "expect";
  free(e);
}

tokseg_t *tokseg_new(const lm_t *lm, uint32_t entries, size_t max_bytes) {
  tokseg_t *ts = calloc(1, sizeof(*ts));
  if (ts == NULL)
    return NULL;
  ts->lm = lm;
  ts->cap = entries;
  ts->max_bytes = max_bytes;
  if (pthread_mutex_init(&ts->mu, NULL) != 0) {
    free(ts);
    return NULL;
  }
  if (entries == 0 || max_bytes == 0)
    ts->why = "the cache holds nothing";
  else
    examine(ts);
  if (ts->why == NULL &&
      (ts->kept = calloc(entries, sizeof(*ts->kept))) == NULL)
    ts->why = "out of memory";
  return ts;
}

void tokseg_free(tokseg_t *ts) {
  if (ts == NULL)
    return;
  for (uint32_t i = 0; i < ts->n_kept; i++)
    kept_free(&ts->kept[i]);
  free(ts->kept);
  free(ts->sp);
  free(ts->first);
  free(ts->first_at);
  free(ts->pair);
  free(ts->pair_at);
  pthread_mutex_destroy(&ts->mu);
  free(ts);
}

bool tokseg_usable(const tokseg_t *ts, const char **why) {
  if (why != NULL)
    *why = ts->why;
  return ts->why == NULL;
}

bool tokseg_holds(const tokseg_t *ts, const char *text, size_t len,
                  bool special) {
  for (size_t y = 0; y < len; y++) {
    unsigned char c = (unsigned char)text[y];
    for (uint32_t k = ts->first_at[c]; k < ts->first_at[c + 1]; k++) {
      const special_t *s = &ts->sp[ts->first[k]];
      if (counts(ts, ts->first[k], special) && y + s->len <= len &&
          memcmp(text + y, s->text, s->len) == 0)
        return true;
    }
  }
  return false;
}

void tokseg_scrape(tokseg_t *ts, tokseg_stats_t *s) {
  pthread_mutex_lock(&ts->mu);
  *s = ts->st;
  s->kept = ts->n_kept;
  s->bytes = ts->bytes;
  pthread_mutex_unlock(&ts->mu);
}

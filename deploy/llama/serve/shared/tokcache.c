/* Tokenizing a prompt from where it parts from a kept one (tokcache.h
 * says why that is exact, and for which vocabularies). */
#include "serve/shared/tokcache.h"

#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include <llama.h>

#include "serve/shared/tokseg.h"

/* Prompts shorter than this are tokenized whole and not kept: reuse saves
 * nothing worth a copy. */
#define SHORT_TEXT 64
/* Spaces tried, back from where the texts part, for one the kept tokens
 * end at (every fit one should be; this bounds a vocabulary that lies). */
#define TRIES 8

static const char ESC[] = "\xe2\x96\x81"; /* "▁": SentencePiece's space */

/* One kept prompt: its text, its tokens, and where each token ends in the
 * text (end[i]: the bytes of text that tokens 0..i stand for; a BOS
 * stands for none). */
typedef struct kept_s {
  char *text;
  size_t len;
  llama_token *tok;
  uint32_t *end;
  uint32_t n;
  uint64_t used; /* the tick of its last use: the least recent goes first */
} kept_t;

/* A text the tokenizer splits out before anything else. */
typedef struct splitter_s {
  char *text;
  size_t len;
  bool always; /* user-defined: also without special */
} splitter_t;

struct tokcache_s {
  const lm_t *lm;
  const char *why;     /* NULL: usable; else why not */
  bool prefix;         /* llama.cpp adds a space before the text */
  splitter_t *split;
  uint32_t n_split;
  pthread_mutex_t mu;  /* the rest */
  kept_t *kept;
  uint32_t n_kept, cap;
  size_t bytes, max_bytes;
  uint64_t tick;
  tokcache_stats_t st;
  tokseg_t *seg;       /* prompts this cache cannot part at a space */
};

/* Whether text holds "▁" after something other than "▁": a token that
 * could join a space to what precedes it. */
static bool joins(const char *text) {
  const char *p = text;
  while (strncmp(p, ESC, 3) == 0)
    p += 3;
  return strstr(p, ESC) != NULL;
}

/* The bytes tokens stand for, as llama.cpp writes them (without special:
 * control tokens none). -1 when one cannot be written. */
static int piece_len(const lm_t *lm, llama_token t) {
  char small[128];
  int n = lm_piece(lm, t, small, sizeof(small));
  return n >= 0 ? n : -1;
}

/* Fills end[0..n) for tokens of text[off0..len) where the first token's
 * piece begins at off0 (the space prefix, when llama.cpp added one,
 * counted as standing for one byte before off0). Returns whether the
 * pieces add up to the text's length exactly. */
static bool ends(const lm_t *lm, const llama_token *tok, uint32_t n,
                 int64_t off0, size_t len, uint32_t *end) {
  int64_t off = off0;
  for (uint32_t i = 0; i < n; i++) {
    int k = piece_len(lm, tok[i]);
    if (k < 0)
      return false;
    off += k;
    if (off > (int64_t)len)
      return false;
    end[i] = off < 0 ? 0 : (uint32_t)off; /* a BOS before the prefix */
  }
  return (uint64_t)off == len;
}

static void kept_free(kept_t *k) {
  free(k->text);
  free(k->tok);
  free(k->end);
}

static size_t kept_bytes(size_t len, uint32_t n) {
  return len + (size_t)n * (sizeof(llama_token) + sizeof(uint32_t));
}

/* Finds what llama.cpp does with this vocabulary; sets tc->why when reuse
 * would not be exact. */
static void examine(tokcache_t *tc) {
  const struct llama_vocab *v = tc->lm->vocab;
  if (llama_vocab_type(v) != LLAMA_VOCAB_TYPE_SPM) {
    tc->why = "the vocabulary is not SentencePiece's (SPM)";
    return;
  }
  if (llama_vocab_get_add_eos(v)) {
    tc->why = "the vocabulary adds an end token to every text";
    return;
  }
  int32_t n = llama_vocab_n_tokens(v);
  for (llama_token t = 0; t < n; t++) {
    const char *text = llama_vocab_get_text(v, t);
    if (text == NULL)
      continue;
    if (joins(text)) {
      tc->why = "a token of the vocabulary joins a space to what precedes "
                "it";
      return;
    }
    enum llama_token_attr a = llama_vocab_get_attr(v, t);
    if (a & (LLAMA_TOKEN_ATTR_CONTROL | LLAMA_TOKEN_ATTR_USER_DEFINED |
             LLAMA_TOKEN_ATTR_UNKNOWN)) {
      size_t len = strlen(text);
      if (len == 0)
        continue;
      splitter_t *s = realloc(tc->split, sizeof(*s) * (tc->n_split + 1));
      if (s == NULL || (s[tc->n_split].text = strdup(text)) == NULL) {
        if (s != NULL)
          tc->split = s;
        tc->why = "out of memory";
        return;
      }
      tc->split = s;
      s[tc->n_split].len = len;
      s[tc->n_split].always = (a & LLAMA_TOKEN_ATTR_USER_DEFINED) != 0;
      tc->n_split++;
    }
  }
  /* Whether llama.cpp puts a space before a text: "a"'s pieces say. */
  llama_token *tok = NULL;
  int k = lm_tokenize_more(tc->lm, "a", 1, false, &tok);
  char buf[16];
  size_t used = 0;
  for (int i = 0; i < k && used < sizeof(buf); i++) {
    int m = lm_piece(tc->lm, tok[i], buf + used, sizeof(buf) - used);
    if (m < 0) {
      used = sizeof(buf);
      break;
    }
    used += (size_t)m;
  }
  free(tok);
  if (used == 2 && memcmp(buf, " a", 2) == 0)
    tc->prefix = true;
  else if (used == 1 && buf[0] == 'a')
    tc->prefix = false;
  else
    tc->why = "the vocabulary writes \"a\" back as something else";
}

tokcache_t *tokcache_new(const lm_t *lm, uint32_t entries, size_t max_bytes) {
  tokcache_t *tc = calloc(1, sizeof(*tc));
  if (tc == NULL)
    return NULL;
  tc->lm = lm;
  tc->max_bytes = max_bytes;
  tc->cap = entries;
  if (pthread_mutex_init(&tc->mu, NULL) != 0) {
    free(tc);
    return NULL;
  }
  if (entries == 0 || max_bytes == 0)
    tc->why = "the cache holds nothing";
  else
    examine(tc);
  if (tc->why == NULL &&
      (tc->kept = calloc(entries, sizeof(*tc->kept))) == NULL)
    tc->why = "out of memory";
  if ((tc->seg = tokseg_new(lm, entries, max_bytes)) == NULL) {
    tokcache_free(tc);
    return NULL;
  }
  return tc;
}

void tokcache_free(tokcache_t *tc) {
  if (tc == NULL)
    return;
  for (uint32_t i = 0; i < tc->n_kept; i++)
    kept_free(&tc->kept[i]);
  free(tc->kept);
  for (uint32_t i = 0; i < tc->n_split; i++)
    free(tc->split[i].text);
  free(tc->split);
  tokseg_free(tc->seg);
  pthread_mutex_destroy(&tc->mu);
  free(tc);
}

bool tokcache_usable(const tokcache_t *tc, const char **why) {
  if (why != NULL)
    *why = tc->why;
  return tc->why == NULL;
}

/* Whether text holds a text the tokenizer splits out first: then it is
 * tokenized whole. */
static bool has_splitter(const tokcache_t *tc, const char *text, size_t len,
                         bool special) {
  for (uint32_t i = 0; i < tc->n_split; i++) {
    const splitter_t *s = &tc->split[i];
    if ((special || s->always) && memmem(text, len, s->text, s->len))
      return true;
  }
  return false;
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

/* A place to part text at, at most at: an s with text[s - 1] a space and
 * text[s - 2] neither a space nor the end of a "▁", below below. 0 when
 * none. */
static size_t part_at(const char *text, size_t at, size_t below) {
  for (size_t s = at < below ? at : below; s >= 2; s--) {
    if (text[s - 1] != ' ' || text[s - 2] == ' ')
      continue;
    if (s >= 4 && memcmp(text + s - 4, ESC, 3) == 0)
      continue;
    return s;
  }
  return 0;
}

/* How many of k's tokens end at or before off; the count if one ends at
 * off exactly, else 0. */
static uint32_t tokens_to(const kept_t *k, size_t off) {
  uint32_t lo = 0, hi = k->n; /* the first whose end > off */
  while (lo < hi) {
    uint32_t mid = lo + (hi - lo) / 2;
    if (k->end[mid] <= off)
      lo = mid + 1;
    else
      hi = mid;
  }
  return lo > 0 && k->end[lo - 1] == off ? lo : 0;
}

/* Keeps text's tokens (taking tok and end), replacing `old` (an index, or
 * -1) or the least recently used. Under tc->mu. */
static void keep(tokcache_t *tc, const char *text, size_t len,
                 llama_token *tok, uint32_t *end, uint32_t n, int64_t old) {
  size_t bytes = kept_bytes(len, n);
  char *copy = bytes <= tc->max_bytes / 2 ? malloc(len) : NULL;
  if (copy == NULL) {
    free(tok);
    free(end);
    return;
  }
  memcpy(copy, text, len);
  if (old >= 0) {
    tc->bytes -= kept_bytes(tc->kept[old].len, tc->kept[old].n);
    kept_free(&tc->kept[old]);
    tc->kept[old] = tc->kept[--tc->n_kept];
  }
  while (tc->n_kept > 0 &&
         (tc->n_kept == tc->cap || tc->bytes + bytes > tc->max_bytes)) {
    uint32_t lru = 0;
    for (uint32_t i = 1; i < tc->n_kept; i++)
      if (tc->kept[i].used < tc->kept[lru].used)
        lru = i;
    tc->bytes -= kept_bytes(tc->kept[lru].len, tc->kept[lru].n);
    kept_free(&tc->kept[lru]);
    tc->kept[lru] = tc->kept[--tc->n_kept];
  }
  tc->kept[tc->n_kept++] = (kept_t){.text = copy, .len = len, .tok = tok,
                                    .end = end, .n = n, .used = ++tc->tick};
  tc->bytes += bytes;
}

/* The whole text tokenized, and kept when it can be (ends' pieces adding
 * up). */
static int whole(tokcache_t *tc, const char *text, size_t len, bool special,
                 bool keeping, llama_token **out) {
  int n = lm_tokenize(tc->lm, text, len, special, out);
  if (n <= 0 || !keeping)
    return n;
  llama_token *tok = malloc(sizeof(*tok) * (size_t)n);
  uint32_t *end = malloc(sizeof(*end) * (size_t)n);
  if (tok == NULL || end == NULL ||
      !ends(tc->lm, *out, (uint32_t)n, tc->prefix ? -1 : 0, len, end)) {
    free(tok);
    free(end);
    return n;
  }
  memcpy(tok, *out, sizeof(*tok) * (size_t)n);
  pthread_mutex_lock(&tc->mu);
  keep(tc, text, len, tok, end, (uint32_t)n, -1);
  pthread_mutex_unlock(&tc->mu);
  return n;
}

int tokcache_tokenize(tokcache_t *tc, const char *text, size_t len,
                      bool special, llama_token **out, uint32_t *reused) {
  /* Where a space cannot part it, the last special token can (for every
   * vocabulary: tokseg.h). */
  /* A chat's text holds its template's special tokens from its first
   * bytes: found at once (tokseg's index by first byte). */
  bool seg = tc->seg != NULL && tokseg_usable(tc->seg, NULL);
  bool spaces = tc->why == NULL &&
                !(seg ? tokseg_holds(tc->seg, text, len, special)
                      : has_splitter(tc, text, len, special));
  if (!spaces && seg)
    return tokseg_tokenize(tc->seg, text, len, special, out, reused);
  if (reused != NULL)
    *reused = 0;
  bool keeping = spaces && len >= SHORT_TEXT && len < UINT32_MAX;
  pthread_mutex_lock(&tc->mu);
  tc->st.prompts++;
  /* The kept text that shares most with this one, and a place to part
   * both at that the kept tokens end at. */
  int64_t best = -1;
  size_t shared = 0;
  for (uint32_t i = 0; keeping && i < tc->n_kept; i++) {
    size_t c = common(tc->kept[i].text, tc->kept[i].len, text, len);
    if (c > shared) {
      shared = c;
      best = i;
    }
  }
  uint32_t k = 0;
  size_t s = shared + 1;
  for (int i = 0; best >= 0 && k == 0 && i < TRIES; i++) {
    if ((s = part_at(text, shared, s - 1)) == 0)
      break;
    k = tokens_to(&tc->kept[best], s - 1);
  }
  llama_token *tok = NULL;
  uint32_t *end = NULL;
  if (k > 0) {
    const kept_t *b = &tc->kept[best];
    tok = malloc(sizeof(*tok) * k);
    end = malloc(sizeof(*end) * k);
    if (tok != NULL && end != NULL) {
      memcpy(tok, b->tok, sizeof(*tok) * k);
      memcpy(end, b->end, sizeof(*end) * k);
      tc->kept[best].used = ++tc->tick;
    } else {
      k = 0;
    }
  }
  pthread_mutex_unlock(&tc->mu);
  int n = -1;
  if (k > 0) {
    /* The rest alone: with llama.cpp's space prefix standing for
     * text[s - 1], or from that space. */
    size_t from = tc->prefix ? s : s - 1;
    llama_token *rest = NULL;
    int m = lm_tokenize_more(tc->lm, text + from, len - from, false, &rest);
    llama_token *t2 = m > 0 ? realloc(tok, sizeof(*tok) * (k + (size_t)m))
                            : NULL;
    uint32_t *e2 = t2 != NULL ? realloc(end, sizeof(*end) * (k + (size_t)m))
                              : NULL;
    if (t2 != NULL)
      tok = t2;
    if (e2 != NULL)
      end = e2;
    if (e2 != NULL && ends(tc->lm, rest, (uint32_t)m, (int64_t)s - 1, len,
                           end + k)) {
      memcpy(tok + k, rest, sizeof(*tok) * (size_t)m);
      n = (int)(k + (uint32_t)m);
    }
    free(rest);
  }
  if (n < 0) { /* no kept text fits, or the rest went wrong: whole */
    free(tok);
    free(end);
    n = whole(tc, text, len, special, keeping, out);
    pthread_mutex_lock(&tc->mu);
    if (n > 0)
      tc->st.tokens += (uint64_t)n;
    pthread_mutex_unlock(&tc->mu);
    return n;
  }
  if ((*out = malloc(sizeof(**out) * (size_t)n)) == NULL) {
    free(tok);
    free(end);
    return -1;
  }
  memcpy(*out, tok, sizeof(**out) * (size_t)n);
  if (reused != NULL)
    *reused = k;
  pthread_mutex_lock(&tc->mu);
  tc->st.hits++;
  tc->st.reused += k;
  tc->st.tokens += (uint64_t)n;
  /* The new text takes the place of the kept one it extends (a
   * conversation's next turn); one that parted from it sits beside. */
  int64_t old = -1;
  if (best >= 0 && (uint32_t)best < tc->n_kept &&
      tc->kept[best].len <= len &&
      common(tc->kept[best].text, tc->kept[best].len, text, len) ==
          tc->kept[best].len)
    old = best;
  keep(tc, text, len, tok, end, (uint32_t)n, old);
  pthread_mutex_unlock(&tc->mu);
  return n;
}

void tokcache_scrape(tokcache_t *tc, tokcache_stats_t *s) {
  pthread_mutex_lock(&tc->mu);
  *s = tc->st;
  s->kept = tc->n_kept;
  s->bytes = tc->bytes;
  pthread_mutex_unlock(&tc->mu);
  if (tc->seg != NULL) {
    tokseg_stats_t g;
    tokseg_scrape(tc->seg, &g);
    s->prompts += g.prompts;
    s->hits += g.hits;
    s->reused += g.reused;
    s->tokens += g.tokens;
    s->kept += g.kept;
    s->bytes += g.bytes;
  }
}

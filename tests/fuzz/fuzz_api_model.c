/* The API fuzzer's model of a session, written from the spec and sharing no
 * code with server/: a sorted array of held positions with their slots and
 * flags, its pages, its GET view and its replay record. */
#include <jansson.h>
#include <stdlib.h>
#include <string.h>

#include "fuzz_api.h"

shadow_t *sh_tab[SH_BUCKETS];
uint32_t sh_count;

static uint32_t sh_hash(const char *id, size_t n) {
  uint32_t h = 2166136261u;
  size_t i;

  for (i = 0; i < n; i++)
    h = (h ^ (unsigned char)id[i]) * 16777619u;
  return h % SH_BUCKETS;
}

shadow_t *sh_find(const char *id, size_t n) {
  shadow_t *s;

  for (s = sh_tab[sh_hash(id, n)]; s != NULL; s = s->hnext)
    if (s->idlen == n && memcmp(s->id, id, n) == 0)
      return s;
  return NULL;
}

void sh_free(shadow_t *s) {
  if (s == NULL)
    return;
  free(s->pos);
  free(s->slot);
  free(s->pinned);
  free(s->tent);
  free(s->occ);
  free(s->rec_pos);
  json_decref(s->rec_answer);
  free(s);
}

static void *xcalloc(size_t n, size_t sz) {
  void *p = calloc(n ? n : 1, sz);
  if (p == NULL)
    abort();
  return p;
}

static shadow_t *sh_alloc(const char *id, size_t idlen, uint32_t budget,
                          uint32_t sinks, uint32_t look, uint32_t page) {
  shadow_t *s = xcalloc(1, sizeof *s);

  memcpy(s->id, id, idlen);
  s->idlen = idlen;
  s->budget = budget;
  s->sinks = sinks;
  s->look = look;
  s->page = page;
  s->cap = budget + look;
  s->pos = xcalloc(s->cap, sizeof *s->pos);
  s->slot = xcalloc(s->cap, sizeof *s->slot);
  s->pinned = xcalloc(s->cap, 1);
  s->tent = xcalloc(s->cap, 1);
  s->occ = xcalloc(s->cap, 1);
  return s;
}

static uint32_t sh_npinned(const shadow_t *s) {
  uint32_t k = 0;

  while (k < s->n && s->pinned[k])
    k++;
  return k;
}

/* Appends p (above everything held): pinned into slot k while fewer than
 * sinks pinned are held; else the slot after the newest unpinned one, from
 * budget + lookahead - 1 round to sinks, or sinks when none is held. */
uint32_t sh_append(shadow_t *s, uint32_t p, int tentative) {
  uint32_t np = sh_npinned(s), slot;
  int pin = 0;

  CHECK(s->n < s->cap, "model: %u positions and no free slot", s->n);
  CHECK(s->n == 0 || p > s->pos[s->n - 1], "model: appending %u after %u", p,
        s->pos[s->n - 1]);
  if (np < s->sinks) {
    CHECK(np == s->n, "model: unpinned positions held with %u pinned", np);
    slot = np;
    pin = 1;
  } else if (s->n > np) {
    slot = s->slot[s->n - 1] + 1;
    if (slot == s->budget + s->look)
      slot = s->sinks;
  } else {
    slot = s->sinks;
  }
  CHECK(slot < s->cap && !s->occ[slot], "model: slot %u handed out twice",
        slot);
  s->occ[slot] = 1;
  s->pos[s->n] = p;
  s->slot[s->n] = slot;
  s->pinned[s->n] = (uint8_t)pin;
  s->tent[s->n] = (uint8_t)tentative;
  s->n++;
  s->newest = p;
  return slot;
}

/* Removes held[i..i+k). */
static void sh_cut(shadow_t *s, uint32_t i, uint32_t k) {
  uint32_t j;

  for (j = i; j < i + k; j++)
    s->occ[s->slot[j]] = 0;
  memmove(s->pos + i, s->pos + i + k, (s->n - i - k) * sizeof *s->pos);
  memmove(s->slot + i, s->slot + i + k, (s->n - i - k) * sizeof *s->slot);
  memmove(s->pinned + i, s->pinned + i + k, s->n - i - k);
  memmove(s->tent + i, s->tent + i + k, s->n - i - k);
  s->n -= k;
}

/* The oldest unpinned positions go until at most `limit` remain. */
void sh_evict_to(shadow_t *s, uint32_t limit, json_t *victims) {
  uint32_t np = sh_npinned(s), k, j;

  if (s->n <= limit)
    return;
  k = s->n - limit;
  CHECK(np + k <= s->n, "model: only pinned positions left to evict");
  for (j = np; j < np + k; j++) {
    CHECK(!s->tent[j], "model: evicting the draft %u", s->pos[j]);
    jpush(victims, s->pos[j]);
  }
  sh_cut(s, np, k);
}

uint32_t sh_drafts(const shadow_t *s) {
  uint32_t k = 0;

  while (k < s->n && s->tent[s->n - 1 - k])
    k++;
  return k;
}

/* Keeps the drafts <= p, drops the others; newest is the last kept draft,
 * or C; then evicts to the budget. */
void sh_commit(shadow_t *s, uint32_t p, json_t *victims,
               json_t *dropped) {
  uint32_t d = sh_drafts(s), first = s->n - d, i, keep = first;

  for (i = first; i < s->n; i++)
    if (s->pos[i] <= p)
      keep = i + 1;
  for (i = keep; i < s->n; i++)
    jpush(dropped, s->pos[i]);
  sh_cut(s, keep, s->n - keep);
  for (i = first; i < s->n; i++)
    s->tent[i] = 0;
  s->newest = keep > first ? s->pos[keep - 1] : s->committed;
  s->committed = s->newest;
  sh_evict_to(s, s->budget, victims);
}

void sh_truncate(shadow_t *s, uint32_t from, json_t *removed) {
  uint32_t i = s->n;
  json_t *gone;

  while (i > 0 && s->pos[i - 1] >= from)
    i--;
  gone = jarr(s->pos + i, s->n - i);
  json_array_extend(removed, gone);
  json_decref(gone);
  sh_cut(s, i, s->n - i);
  if (from <= s->newest) {
    s->newest = from - 1;
    if (s->committed > from - 1)
      s->committed = from - 1;
  }
  /* With no draft left, the committed newest is the newest (the contract:
   * regress/truncate-of-every-draft-leaves-... keeps it so). */
  if (sh_drafts(s) == 0)
    s->committed = s->newest;
}

/* A new session: position 0 in slot 0. */
shadow_t *sh_new(const char *id, size_t idlen,
                 const evd_session_config_t *c) {
  shadow_t *s = sh_alloc(id, idlen, c->budget, c->sinks, c->lookahead,
                         c->page_size);
  sh_append(s, 0, 0);
  s->newest = s->committed = 0;
  return s;
}

/* An adopted session: kept[0..n) (a state the spec accepts), the first
 * `sinks` pinned in slots 0..; the others in `slots`, or, when it is
 * NULL, round the ring from where stepping every position after the
 * newest pin one at a time leaves the oldest of them. No drafts, no
 * replay record. */
shadow_t *sh_adopted(const char *id, size_t idlen,
                     const evd_session_config_t *c, const uint32_t *kept,
                     const uint32_t *slots, uint32_t n, uint32_t newest) {
  shadow_t *s = sh_alloc(id, idlen, c->budget, c->sinks, c->lookahead,
                         c->page_size);
  uint32_t np = n < c->sinks ? n : c->sinks, i, slot = 0;
  uint64_t ring = (uint64_t)c->budget + c->lookahead - c->sinks, before;

  for (i = 0; i < n; i++) {
    if (i < np) {
      slot = i;
    } else if (slots != NULL) {
      slot = slots[i];
    } else if (i == np) {
      /* Positions between the newest pin (or -1) and kept[np]. */
      before = np > 0 ? (uint64_t)kept[np] - kept[np - 1] - 1
                      : (uint64_t)kept[np];
      slot = c->sinks + (uint32_t)(before % ring);
    } else {
      slot = slot + 1 == c->budget + c->lookahead ? c->sinks : slot + 1;
    }
    CHECK(slot < s->cap && !s->occ[slot], "model: adopted slot %u taken",
          slot);
    s->occ[slot] = 1;
    s->pos[i] = kept[i];
    s->slot[i] = slot;
    s->pinned[i] = (uint8_t)(i < np);
  }
  s->n = n;
  s->newest = s->committed = newest;
  return s;
}

/* A copy of the state (the replay record only when `record`). */
shadow_t *sh_copy(const shadow_t *src, const char *id, size_t idlen,
                  int record) {
  shadow_t *s = sh_alloc(id, idlen, src->budget, src->sinks, src->look,
                         src->page);

  s->n = src->n;
  memcpy(s->pos, src->pos, src->n * sizeof *s->pos);
  memcpy(s->slot, src->slot, src->n * sizeof *s->slot);
  memcpy(s->pinned, src->pinned, src->n);
  memcpy(s->tent, src->tent, src->n);
  memcpy(s->occ, src->occ, src->cap);
  s->newest = src->newest;
  s->committed = src->committed;
  s->used = src->used;
  if (record && src->rec_op != 0) {
    s->rec_op = src->rec_op;
    s->rec_tent = src->rec_tent;
    s->rec_has_commit = src->rec_has_commit;
    s->rec_arg = src->rec_arg;
    s->rec_n = src->rec_n;
    s->rec_pos = xcalloc(src->rec_n, sizeof *s->rec_pos);
    if (src->rec_n > 0)
      memcpy(s->rec_pos, src->rec_pos, src->rec_n * sizeof *s->rec_pos);
    s->rec_answer = json_deep_copy(src->rec_answer);
  }
  return s;
}

void sh_insert(shadow_t *s) {
  uint32_t h = sh_hash(s->id, s->idlen);

  s->hnext = sh_tab[h];
  sh_tab[h] = s;
  sh_count++;
}

void sh_remove(shadow_t *s) {
  shadow_t **pp = &sh_tab[sh_hash(s->id, s->idlen)];

  while (*pp != s)
    pp = &(*pp)->hnext;
  *pp = s->hnext;
  sh_count--;
  sh_free(s);
}

/* Puts `s` in the place of the session with its id (inserting it when
 * there is none). */
void sh_put(shadow_t *s) {
  shadow_t *old = sh_find(s->id, s->idlen);

  if (old != NULL)
    sh_remove(old);
  sh_insert(s);
}

void sh_set_record(shadow_t *s, int op, int tent, int has_commit,
                   uint32_t arg, const uint32_t *pos, uint32_t n,
                   json_t *answer) {
  free(s->rec_pos);
  json_decref(s->rec_answer);
  s->rec_op = op;
  s->rec_tent = tent;
  s->rec_has_commit = has_commit;
  s->rec_arg = arg;
  s->rec_n = n;
  s->rec_pos = xcalloc(n, sizeof *s->rec_pos);
  if (n > 0)
    memcpy(s->rec_pos, pos, n * sizeof *pos);
  s->rec_answer = json_deep_copy(answer);
}

int sh_rec_match(const shadow_t *s, int op, int tent, int has_commit,
                 uint32_t arg, const uint32_t *pos, uint32_t n) {
  if (s == NULL || s->rec_op != op)
    return 0;
  if (op != R_STEP)
    return s->rec_arg == arg;
  return s->rec_tent == tent && s->rec_has_commit == has_commit &&
         (!has_commit || s->rec_arg == arg) && s->rec_n == n &&
         (n == 0 || memcmp(s->rec_pos, pos, n * sizeof *pos) == 0);
}

/* The pages holding a position (ascending), into `pg`; returns how many.
 * NULL: a session that does not exist yet holds none. */
static uint32_t sh_pages(const shadow_t *s, uint32_t *pg) {
  uint32_t i, k = 0;

  if (s == NULL || s->page == 0)
    return 0;
  for (i = 0; i < s->n; i++)
    if (k == 0 || pg[k - 1] != s->pos[i] / s->page)
      pg[k++] = s->pos[i] / s->page;
  return k;
}

/* Adds "pages_new" (after \ before), "pages_freed" (before \ after) and
 * "pages_transient" (the pages of the `nadded` positions added, and page 0
 * of a new session, in neither) of a request that took `before` (NULL:
 * none) to `after`, when pages are on. */
void add_pages(json_t *ans, const shadow_t *before,
               const shadow_t *after, const uint32_t *added,
               uint32_t nadded) {
  static uint32_t a[4096 + 64 + 1], b[4096 + 64 + 1];
  uint32_t na, nb, i = 0, j = 0, k, page, last = UINT32_MAX;
  json_t *pn, *pf, *pt;

  if (after->page == 0)
    return;
  nb = sh_pages(before, b);
  na = sh_pages(after, a);
  pn = json_array();
  pf = json_array();
  pt = json_array();
  while (i < na || j < nb) {
    if (j == nb || (i < na && a[i] < b[j]))
      jpush(pn, a[i++]);
    else if (i == na || b[j] < a[i])
      jpush(pf, b[j++]);
    else
      i++, j++;
  }
  for (k = before == NULL ? 0 : 1; k <= nadded; k++) {
    page = k == 0 ? 0 : added[k - 1] / after->page;
    if (page == last)
      continue;
    last = page;
    for (i = 0; i < na && a[i] != page; i++)
      ;
    for (j = 0; j < nb && b[j] != page; j++)
      ;
    if (i == na && j == nb)
      jpush(pt, page);
  }
  json_object_set_new(ans, "pages_new", pn);
  json_object_set_new(ans, "pages_freed", pf);
  json_object_set_new(ans, "pages_transient", pt);
}

/* The GET view. */
json_t *sh_view(const shadow_t *s) {
  static uint32_t pg[4096 + 64 + 1];
  json_t *v = json_object();
  uint32_t d = sh_drafts(s);

  json_object_set_new(v, "id", json_stringn(s->id, s->idlen));
  json_object_set_new(v, "budget", json_integer(s->budget));
  json_object_set_new(v, "sinks", json_integer(s->sinks));
  if (s->look != 1)
    json_object_set_new(v, "lookahead", json_integer(s->look));
  if (s->page != 0)
    json_object_set_new(v, "page_size", json_integer(s->page));
  json_object_set_new(v, "size", json_integer(s->n));
  json_object_set_new(v, "newest", json_integer(s->newest));
  json_object_set_new(v, "kept", jarr(s->pos, s->n));
  json_object_set_new(v, "slots", jarr(s->slot, s->n));
  if (d != 0)
    json_object_set_new(v, "tentative", jarr(s->pos + s->n - d, d));
  if (s->page != 0)
    json_object_set_new(v, "pages", jarr(pg, sh_pages(s, pg)));
  return v;
}

int sh_same_state(const shadow_t *a, const shadow_t *b) {
  return a->budget == b->budget && a->sinks == b->sinks &&
         a->look == b->look && a->page == b->page && a->n == b->n &&
         a->newest == b->newest && a->committed == b->committed &&
         memcmp(a->pos, b->pos, a->n * sizeof *a->pos) == 0 &&
         memcmp(a->slot, b->slot, a->n * sizeof *a->slot) == 0 &&
         memcmp(a->pinned, b->pinned, a->n) == 0 &&
         memcmp(a->tent, b->tent, a->n) == 0;
}

/* The model's own invariants (the spec's, restated). */
void sh_check(const shadow_t *s) {
  uint32_t np = sh_npinned(s), d = sh_drafts(s), i;

  CHECK(s->n <= s->budget + s->look && s->n - d <= s->budget &&
            d <= s->look && np <= s->sinks,
        "model %.*s: %u held, %u drafts, %u pinned", (int)s->idlen, s->id,
        s->n, d, np);
  for (i = 0; i < s->n; i++) {
    CHECK(i < np ? s->slot[i] == i : s->slot[i] >= s->sinks,
          "model: pinned k not in slot k");
    CHECK(!s->pinned[i] || i < np, "model: pinned after unpinned");
    CHECK(s->pos[i] <= s->newest, "model: held above newest");
    CHECK(!s->tent[i] || (i >= s->n - d && s->pos[i] > s->committed),
          "model: drafts not the newest positions");
  }
  CHECK(s->committed <= s->newest, "model: committed above newest");
}

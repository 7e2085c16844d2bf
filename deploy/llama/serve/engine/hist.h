/* A conversation's tokens (hist.c): a conversation keeps the tokens of its
 * last positions; the older ones are folded, a block of HIST_BLOCK at a
 * time, into a digest chained from 0: SipHash-1-3 under a random key of
 * the digest so far and the block. A prompt's digest over the same blocks
 * says whether it holds the very tokens folded (a random key: no prompt
 * can be made to collide with another client's conversation), so a
 * conversation of any length costs a bounded number of tokens. And how
 * many of a prompt's tokens a conversation can keep (hist_usable), the
 * rule that both the slots' conversations and the saved ones follow. */
#ifndef EVICTD_LLAMA_SERVE_HIST_H
#define EVICTD_LLAMA_SERVE_HIST_H

#include <stdbool.h>
#include <stdint.h>

#include "llama.h"

#define HIST_BLOCK 256

/* The chain's next digest: d, then the block of HIST_BLOCK tokens. */
uint64_t hist_fold(const uint64_t key[2], uint64_t d, const llama_token *b);

/* A prompt matched against conversations, and what that takes. */
typedef struct hist_prompt_s {
  const uint64_t *key;    /* the digests' key */
  const llama_token *tok; /* the prompt's tokens, positions 0..n-1 */
  uint32_t n;
  bool by_id;             /* a continuation by id (tok from a later
                             position): never matched by digest */
  uint32_t budget;        /* the sessions' window */
  uint32_t max_back;      /* the most positions a continuation goes back
                             while the window lost some */
  bool rewind;            /* the model's cache can go back at all (lm.h);
                             else a conversation is only extended */
  bool no_back;           /* set when a conversation would have been kept
                             but for !rewind */
  uint64_t *dig;          /* dig[k]: its first k blocks' digest, made on
                             first need (hist_prompt_free frees them) */
  uint32_t n_dig;         /* blocks digested: dig[0..n_dig] */
} hist_prompt_t;

void hist_prompt_free(hist_prompt_t *p);

/* How many of prompt p's first tokens a conversation that computed n
 * positions (the tokens from hbase on in hist, those below digested in
 * hdig), its cells holding positions held[0..n_held) ascending, can keep
 * (0: it cannot be continued, or would keep too little to be worth it).
 * It keeps the tokens both have, short of the prompt's last (decoded
 * again for its logits), and goes back to there:
 *  - exactly, when the window then holds what it held once position m - 1
 *    was computed (min(m, budget) positions: the steps from m on evicted
 *    nothing), however far back that is;
 *  - else losing what those steps evicted, only when the prompt goes on
 *    past the conversation (a new turn: a stop string's tokens the client
 *    never saw, the last answer tokenized otherwise) and at most max_back
 *    positions back. A prompt that ends within it (the same request
 *    again, an edit) is never answered from a window that lost positions:
 *    it is decoded afresh, so the same request gets the same answer.
 * Either way position m - 1 must be held (llama.cpp continues a sequence
 * from its newest position only), it keeps at least half of what the
 * conversation computed, and the tokens folded into the digest must be
 * the prompt's very first ones. A model whose cache cannot go back (not
 * rewind) keeps a conversation only when the prompt extends all of it. */
uint32_t hist_usable(hist_prompt_t *p, const llama_token *hist,
                     uint32_t hbase, uint64_t hdig, uint32_t n,
                     const uint32_t *held, uint32_t n_held);

#endif

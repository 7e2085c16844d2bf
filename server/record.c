/* Journal ops to bytes and back; the format is described in record.h. */
#include "record.h"

#include <stdlib.h>

void evd_record_put32(evd_buf_t *b, uint32_t v) {
  unsigned char p[4];

  evd_le32_set(p, v);
  evd_buf_add(b, p, 4);
}

static void put_positions(evd_buf_t *b, const evd_op_t *op) {
  uint32_t i;

  evd_buf_reserve(b, 4 + 4 * (size_t)op->n);
  evd_record_put32(b, op->n);
  for (i = 0; i < op->n; i++)
    evd_record_put32(b, op->positions[i]);
}

void evd_record_put_op(evd_buf_t *b, const evd_op_t *op) {
  unsigned char head[2] = {(unsigned char)op->type, (unsigned char)op->idlen};

  evd_buf_add(b, head, 2);
  evd_buf_add(b, op->id, op->idlen);
  switch (op->type) {
  case EVD_OP_CREATE:
  case EVD_OP_CREATE2:
    evd_record_put32(b, op->cfg.budget);
    evd_record_put32(b, op->cfg.sinks);
    if (op->type == EVD_OP_CREATE2) {
      evd_record_put32(b, op->cfg.lookahead);
      evd_record_put32(b, op->cfg.page_size);
    }
    break;
  case EVD_OP_STEP:
    put_positions(b, op);
    break;
  case EVD_OP_STEP2:
    evd_record_put32(b, op->flags);
    evd_record_put32(b, op->arg);
    put_positions(b, op);
    break;
  case EVD_OP_EVICT:
    evd_record_put32(b, op->budget);
    break;
  case EVD_OP_COMMIT:
  case EVD_OP_TRUNCATE:
    evd_record_put32(b, op->arg);
    break;
  case EVD_OP_ADOPT: {
    uint32_t i;
    evd_buf_reserve(b, 28 + 8 * (size_t)op->n);
    evd_record_put32(b, op->flags);
    evd_record_put32(b, op->cfg.budget);
    evd_record_put32(b, op->cfg.sinks);
    evd_record_put32(b, op->cfg.lookahead);
    evd_record_put32(b, op->cfg.page_size);
    evd_record_put32(b, op->arg);
    put_positions(b, op);
    for (i = 0; i < op->n; i++)
      evd_record_put32(b, op->slots[i]);
    break;
  }
  case EVD_OP_FORK:
    head[0] = (unsigned char)op->childlen;
    evd_buf_add(b, head, 1);
    evd_buf_add(b, op->child, op->childlen);
    break;
  case EVD_OP_DELETE:
  case EVD_OP_REAP:
    break;
  }
}

/* Reads k u32 fields at *p into out, advancing *p; 0 when they are not
 * all there. */
static int fields(const unsigned char **p, const unsigned char *end,
                  uint32_t *out, int k) {
  int i;

  if (end - *p < 4 * k)
    return 0;
  for (i = 0; i < k; i++, *p += 4)
    out[i] = evd_le32(*p);
  return 1;
}

/* n, pos[n], and with `lists` 2 another n (ADOPT's slots, into
 * op->slots); n may be 0 only when `empty_ok`. */
static int positions(const unsigned char **p, const unsigned char *end,
                     evd_op_t *op, int empty_ok, int lists,
                     uint32_t **scratch, size_t *cap) {
  uint64_t words;
  uint32_t i;

  if (!fields(p, end, &op->n, 1) || (op->n == 0 && !empty_ok))
    return EVD_ECORRUPT;
  words = (uint64_t)lists * op->n;
  if ((uint64_t)(end - *p) < 4 * words)
    return EVD_ECORRUPT;
  if (words > *cap) {
    uint32_t *q = realloc(*scratch, 4 * (size_t)words);
    if (q == NULL)
      return EVD_ENOMEM;
    *scratch = q;
    *cap = (size_t)words;
  }
  for (i = 0; i < words; i++, *p += 4)
    (*scratch)[i] = evd_le32(*p);
  op->positions = op->n > 0 ? *scratch : NULL;
  op->slots = op->n > 0 && lists == 2 ? *scratch + op->n : NULL;
  return 0;
}

int evd_record_apply(const unsigned char *p, size_t len, int version,
                     evd_apply_fn apply, void *ctx, uint32_t **scratch,
                     size_t *cap) {
  const unsigned char *end = p + len;

  while (p < end) {
    evd_op_t op = {0};
    uint32_t f[4];
    int err = 0;
    if (end - p < 2 || (size_t)(end - p) < 2u + p[1])
      return EVD_ECORRUPT;
    op.type = (evd_op_type_t)p[0];
    op.idlen = p[1];
    op.id = (const char *)p + 2;
    p += 2 + op.idlen;
    if (version < 2 && op.type > EVD_OP_REAP)
      return EVD_ECORRUPT;
    switch (op.type) {
    case EVD_OP_CREATE:
    case EVD_OP_CREATE2:
      if (!fields(&p, end, f, op.type == EVD_OP_CREATE ? 2 : 4))
        return EVD_ECORRUPT;
      op.cfg = (evd_session_config_t){f[0], f[1], 1, 0};
      if (op.type == EVD_OP_CREATE2) {
        op.cfg.lookahead = f[2];
        op.cfg.page_size = f[3];
      }
      /* The one configuration field the session table asserts rather
       * than refuses: a record past it is not one evictd wrote. */
      if (op.cfg.page_size > EVD_MAX_PAGE_SIZE)
        return EVD_ECORRUPT;
      break;
    case EVD_OP_STEP:
      err = positions(&p, end, &op, 0, 1, scratch, cap);
      break;
    case EVD_OP_STEP2:
      if (!fields(&p, end, f, 2) || f[0] > EVD_OP_FLAGS)
        return EVD_ECORRUPT;
      op.flags = f[0];
      op.arg = f[1];
      /* A commit-only step has no positions. */
      err = positions(&p, end, &op, (op.flags & EVD_OP_COMMIT_ARG) != 0, 1,
                      scratch, cap);
      break;
    case EVD_OP_ADOPT:
      if (!fields(&p, end, f, 4) || f[0] > EVD_OP_REPLACED)
        return EVD_ECORRUPT;
      op.flags = f[0];
      op.cfg = (evd_session_config_t){f[1], f[2], f[3], 0};
      if (!fields(&p, end, f, 2) || f[0] > EVD_MAX_PAGE_SIZE)
        return EVD_ECORRUPT;
      op.cfg.page_size = f[0];
      op.arg = f[1];
      err = positions(&p, end, &op, 0, 2, scratch, cap);
      break;
    case EVD_OP_EVICT:
      if (!fields(&p, end, &op.budget, 1))
        return EVD_ECORRUPT;
      break;
    case EVD_OP_COMMIT:
    case EVD_OP_TRUNCATE:
      if (!fields(&p, end, &op.arg, 1))
        return EVD_ECORRUPT;
      break;
    case EVD_OP_FORK:
      if (end - p < 1 || (size_t)(end - p) < 1u + p[0])
        return EVD_ECORRUPT;
      op.childlen = p[0];
      op.child = (const char *)p + 1;
      p += 1 + op.childlen;
      if (!evd_session_id_valid(op.child, op.childlen))
        return EVD_ECORRUPT;
      break;
    case EVD_OP_DELETE:
    case EVD_OP_REAP:
      break;
    default:
      return EVD_ECORRUPT;
    }
    if (err != 0)
      return err;
    if (!evd_session_id_valid(op.id, op.idlen))
      return EVD_ECORRUPT;
    err = apply(ctx, &op);
    if (err != 0)
      return err;
  }
  return 0;
}

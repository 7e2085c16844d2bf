/* The chat format's parser over a choice's text (parse.h). */
#include "serve/shared/parse.h"

#include <stdlib.h>

json_t *parse_deltas(up_parser_t **p, const char *format, const char *text,
                     size_t len, bool partial) {
  char *d = NULL, err[256];
  if (*p == NULL && format != NULL)
    up_parser_new(p, format, err, sizeof(err));
  json_t *deltas = NULL;
  if (*p != NULL &&
      up_parser_feed(*p, text, len, partial, NULL, &d, err, sizeof(err)) == 0)
    deltas = json_loads(d, 0, NULL);
  else if (len > 0) /* no format, or a text it cannot read: as it is */
    deltas = json_pack("[{s:s%}]", "content", text, len);
  else
    deltas = json_array();
  free(d);
  return deltas;
}

json_t *parse_message(const char *format, const char *text, size_t len,
                      json_t **prefill) {
  up_parser_t *p = NULL;
  char *m0 = NULL, *m1 = NULL, err[256];
  json_t *msg = NULL;
  if (prefill != NULL)
    *prefill = NULL;
  if (format != NULL && up_parser_new(&p, format, err, sizeof(err)) == 0 &&
      (prefill == NULL ||
       up_parser_feed(p, "", 0, true, &m0, NULL, err, sizeof(err)) == 0) &&
      up_parser_feed(p, text, len, false, &m1, NULL, err, sizeof(err)) == 0) {
    msg = json_loads(m1, 0, NULL);
    if (prefill != NULL)
      *prefill = json_loads(m0, 0, NULL);
  }
  up_parser_free(p);
  free(m0);
  free(m1);
  return msg;
}

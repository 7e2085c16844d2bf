/* The fast path switched off: linked, with every evd_ symbol renamed ref_,
 * into a second copy of the API that the fuzz harness runs side by side
 * with the real one, so that any answer the fast path changes shows. */
#include "api_int.h"

int evd__fast_step(evd_api_t *api, const char *body, size_t len,
                   evd__step_t *r) {
  (void)api;
  (void)body;
  (void)len;
  /* Always the general path, which gets *r as the fast path leaves it. */
  *r = (evd__step_t){.id = r->id, .idlen = r->idlen};
  return 0;
}

int evd__fast_batch(evd_api_t *api, const char *body, size_t len,
                    size_t *nitems) {
  (void)api;
  (void)body;
  (void)len;
  (void)nitems;
  return 0;
}

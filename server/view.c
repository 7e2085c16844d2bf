/* The session view: the JSON object GET, PUT, a fork and an adoption
 * answer with, and a divergence's error carries (the configuration, the
 * held positions, their slots, the drafts and pages), written straight
 * from the window's runs of held positions. */
#include <stdio.h>

#include "api_int.h"
#include "pages.h"

size_t evd__view_bound(const evd_session_t *s) {
  /* kept, slots, tentative and pages: at most one entry each per held
   * position; the id is plain ASCII. */
  return 320 + (size_t)s->idlen + 44 * (size_t)evd_window_size(
                                            evd_session_window(s));
}

int evd__view_room(evd_api_t *api, const evd_session_t *s) {
  if (evd_session_page_size(s) == 0)
    return 0;
  return evd__grow(&api->pages, &api->pages_cap,
                   evd_window_size(evd_session_window(s)));
}

/* Writes runs of held positions (evd_window_runs), or their slots, as a
 * JSON array. */
static void write_runs(evd_buf_t *out, const evd_window_run_t *run,
                       uint32_t nrun, int slots) {
  uint32_t i;

  evd_buf_chr(out, '[');
  for (i = 0; i < nrun; i++)
    evd_buf_u32_seq(out, slots ? NULL : run[i].pos, run[i].slot, run[i].n,
                    i > 0);
  evd_buf_chr(out, ']');
}

void evd__write_view(evd_api_t *api, evd_buf_t *out, const evd_session_t *s) {
  const evd_window_t *w = evd_session_window(s);
  uint32_t n = evd_window_size(w), nrun;
  evd_window_run_t run[3];

  evd_buf_reserve(out, 240 + s->idlen + 33 * (size_t)n);
  evd_buf_str(out, "{\"id\":");
  evd_buf_json_str(out, s->id, s->idlen);
  evd_buf_str(out, ",\"budget\":");
  evd_buf_u32(out, w->budget);
  evd_buf_str(out, ",\"sinks\":");
  evd_buf_u32(out, w->sinks);
  /* The view of a session that uses none of lookahead, pages and drafts is
   * what it always was: their fields appear only when in use. */
  if (evd_window_lookahead(w) != 1) {
    evd_buf_str(out, ",\"lookahead\":");
    evd_buf_u32(out, evd_window_lookahead(w));
  }
  if (evd_session_page_size(s) != 0) {
    evd_buf_str(out, ",\"page_size\":");
    evd_buf_u32(out, evd_session_page_size(s));
  }
  evd_buf_str(out, ",\"size\":");
  evd_buf_u32(out, n);
  evd_buf_str(out, ",\"newest\":");
  evd_buf_u32(out, evd_window_newest(w));
  nrun = evd_window_runs(w, 0, run);
  evd_buf_str(out, ",\"kept\":");
  write_runs(out, run, nrun, 0);
  evd_buf_str(out, ",\"slots\":");
  write_runs(out, run, nrun, 1);
  if (evd_window_tentative(w) != 0) {
    evd_buf_str(out, ",\"tentative\":");
    nrun = evd_window_runs(w, n - evd_window_tentative(w), run);
    write_runs(out, run, nrun, 0);
  }
  if (evd_session_page_size(s) != 0) {
    evd_buf_str(out, ",\"pages\":");
    if (evd__grow(&api->pages, &api->pages_cap, n) != 0) {
      out->oom = 1; /* answered as out_of_memory */
      return;
    }
    evd_buf_u32_array(out, api->pages,
                      evd_pages_held(w, evd_session_page_size(s), api->pages));
  }
  evd_buf_chr(out, '}');
}

/* 409 diverged: the session's newest and its view (api_int.h). */
int evd__write_diverged(evd_api_t *api, evd_buf_t *out,
                        const evd_session_t *s, uint32_t expect,
                        int in_batch) {
  uint32_t newest = evd_window_newest(evd_session_window(s));

  api->metrics.diverged++;
  snprintf(api->msg, sizeof api->msg,
           "The session's newest position is %u, not %u (expect_newest): "
           "its window is not the one the engine holds. Nothing changed; "
           "adopt the engine's state (with replace) and resend.", newest,
           expect);
  evd_buf_str(out, "{\"error\":{");
  evd_apierr_fields(out, EVD_AE_DIVERGED, api->msg);
  evd_buf_str(out, ",\"newest\":");
  evd_buf_u32(out, newest);
  evd_buf_str(out, ",\"view\":");
  evd__write_view(api, out, s);
  if (in_batch) {
    evd_buf_str(out, ",\"status\":");
    evd_buf_u32(out, (uint32_t)evd_apierr_status(EVD_AE_DIVERGED));
  }
  evd_buf_str(out, "}}");
  return evd_apierr_status(EVD_AE_DIVERGED);
}

/* Prometheus exposition of the daemon's counters. */
#include "metrics.h"

#include <stdio.h>
#include <unistd.h>

#include "journal.h"
#include "prom.h"

static const int statuses[EVD_METRICS_NSTATUS] = {
    200, 201, 204, 400, 401, 404, 405, 409, 413, 431, 500, 503, 0};
static const char *const route_names[EVD_R_COUNT] = {
    [EVD_R_NONE] = "none",       [EVD_R_HEALTHZ] = "healthz",
    [EVD_R_METRICS] = "metrics", [EVD_R_BATCH] = "batch",
    [EVD_R_SESSION] = "session", [EVD_R_STEP] = "step",
    [EVD_R_EVICT] = "evict",     [EVD_R_COMMIT] = "commit",
    [EVD_R_TRUNCATE] = "truncate", [EVD_R_FORK] = "fork",
    [EVD_R_ADOPT] = "adopt"};

void evd_metrics_request(evd_metrics_t *m, evd_route_t route, int status,
                         double seconds) {
  int i = 0;

  /* The last column ("other") takes any status not listed. */
  while (i < EVD_METRICS_NSTATUS - 1 && statuses[i] != status)
    i++;
  m->requests[route][i]++;
  evd_histogram_observe(&m->latency[route], seconds);
}

/* The exposition's line shapes are prom.c's, shared with evictd-llama
 * serve's /metrics; this file keeps its short names for them. */
#define line(...) evd_prom_line(__VA_ARGS__)
#define counter(...) evd_prom_counter(__VA_ARGS__)
#define gauge(...) evd_prom_gauge(__VA_ARGS__)
#define histogram(...) evd_prom_histogram(__VA_ARGS__)

static double resident_bytes(void) {
  unsigned long size, resident;
  FILE *f = fopen("/proc/self/statm", "r");
  int ok;

  if (f == NULL)
    return 0;
  ok = fscanf(f, "%lu %lu", &size, &resident) == 2;
  fclose(f);
  return ok ? (double)resident * (double)sysconf(_SC_PAGESIZE) : 0;
}

void evd_metrics_write(const evd_metrics_t *m, uint32_t sessions,
                       evd_buf_t *out) {
  int r, i;

  line(out, "# HELP evictd_build_info Version of the running daemon.\n"
            "# TYPE evictd_build_info gauge\n"
            "evictd_build_info{version=\"%s\"} 1\n", EVD_VERSION);
  line(out, "# HELP evictd_requests_total HTTP requests answered, by route "
            "and status.\n# TYPE evictd_requests_total counter\n");
  for (r = 0; r < EVD_R_COUNT; r++)
    for (i = 0; i < EVD_METRICS_NSTATUS; i++) {
      if (m->requests[r][i] == 0)
        continue;
      if (statuses[i] != 0)
        line(out, "evictd_requests_total{route=\"%s\",code=\"%d\"} %llu\n",
             route_names[r], statuses[i],
             (unsigned long long)m->requests[r][i]);
      else
        line(out, "evictd_requests_total{route=\"%s\",code=\"other\"} %llu\n",
             route_names[r], (unsigned long long)m->requests[r][i]);
    }
  line(out, "# HELP evictd_request_duration_seconds Time from a request's "
            "headers to its queued response, by route.\n"
            "# TYPE evictd_request_duration_seconds histogram\n");
  for (r = 0; r < EVD_R_COUNT; r++) {
    char labels[48];
    if (m->latency[r].count == 0)
      continue;
    snprintf(labels, sizeof labels, "route=\"%s\",", route_names[r]);
    histogram(out, "evictd_request_duration_seconds", labels, &m->latency[r]);
  }
  gauge(out, "evictd_sessions", "Live sessions.", sessions);
  counter(out, "evictd_sessions_created_total", "Sessions created.",
          m->created);
  counter(out, "evictd_sessions_deleted_total", "Sessions deleted by "
          "request.", m->deleted);
  counter(out, "evictd_sessions_reaped_total", "Sessions reaped after "
          "--idle-ttl.", m->reaped);
  counter(out, "evictd_steps_total", "Positions stepped.", m->steps);
  counter(out, "evictd_victims_total", "Positions evicted.", m->victims);
  counter(out, "evictd_replays_total", "Retried steps, commits and "
          "truncates answered again from the session's last response.",
          m->replays);
  gauge(out, "evictd_replay_pool_bytes", "Memory of the answers kept on "
        "the heap for resends (--replay-pool).",
        (double)m->replay_pool_bytes);
  counter(out, "evictd_replay_records_let_go_total", "Answers let go from "
          "the replay pool for room.", m->replay_let_go);
  counter(out, "evictd_replays_unavailable_total", "Resent requests whose "
          "answer was let go from the replay pool (409).",
          m->replays_unavailable);
  counter(out, "evictd_commits_total", "Commits of tentative positions, "
          "alone or in a step.", m->commits);
  counter(out, "evictd_dropped_positions_total", "Tentative positions "
          "dropped by commits.", m->dropped);
  counter(out, "evictd_truncates_total", "Truncate requests applied.",
          m->truncates);
  counter(out, "evictd_removed_positions_total", "Positions removed by "
          "truncates.", m->removed);
  counter(out, "evictd_forks_total", "Sessions created by forks.",
          m->forks);
  counter(out, "evictd_adoptions_created_total", "Sessions created by "
          "adopt.", m->adopt_created);
  counter(out, "evictd_adoptions_replaced_total", "Sessions replaced by "
          "adopt with replace.", m->adopt_replaced);
  counter(out, "evictd_adoptions_resent_total", "Adoptions that found the "
          "session in the state asked for (200, nothing changed).",
          m->adopt_resent);
  counter(out, "evictd_adoptions_refused_total", "Adoptions refused: a "
          "state a session cannot be in, a bad body, or another state "
          "without replace.", m->adopt_refused);
  counter(out, "evictd_divergences_total", "Changes refused 409 diverged: "
          "the session's newest differed from the request's "
          "expect_newest.", m->diverged);
  gauge(out, "evictd_connections", "Open HTTP connections.",
        (double)m->connections);
  counter(out, "evictd_connections_total", "HTTP connections accepted.",
          m->connections_total);
  counter(out, "evictd_connections_cut_total", "Connections closed for not "
          "completing a request within --conn-timeout.", m->connections_cut);
  gauge(out, "process_resident_memory_bytes", "Resident memory size in "
        "bytes.", resident_bytes());
  if (m->journal != NULL) {
    const evd_journal_stats_t *js = evd_journal_stats(m->journal);
    line(out, "# HELP evictd_journal_fsync_seconds Time one journal fsync "
              "took.\n# TYPE evictd_journal_fsync_seconds histogram\n");
    histogram(out, "evictd_journal_fsync_seconds", "", &js->fsync);
    gauge(out, "evictd_journal_failing", "1 while journal writes fail and "
          "changes are refused (retried every half second), else 0.",
          js->failing);
    counter(out, "evictd_journal_write_errors_total", "Journal writes or "
            "syncs that failed.", js->write_errors);
  }
}

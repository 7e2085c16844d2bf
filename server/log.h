/* Logging: one line per event on stderr, as text or as JSON. */
#ifndef EVICTD_LOG_H
#define EVICTD_LOG_H

enum { EVD_LOG_ERROR, EVD_LOG_WARN, EVD_LOG_INFO, EVD_LOG_DEBUG };
enum { EVD_LOG_TEXT, EVD_LOG_JSON };

/* Sets the most verbose level written and the line format. */
void evd_log_setup(int level, int format);

/* Returns the EVD_LOG_* level named by `name`, or -1. */
int evd_log_level_parse(const char *name);

/* Writes one line at `level` (printf-style), if enabled. */
void evd_log(int level, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));

/* Writes one line whatever the level (the start-up line). */
void evd_log_always(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

#endif

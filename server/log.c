/* Log lines on stderr: a UTC timestamp, the level and the message, either
 * as text or as one JSON object per line. */
#include "log.h"

#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

#include "buf.h"

static int max_level = EVD_LOG_INFO;
static int line_format = EVD_LOG_TEXT;
static const char *const names[] = {"error", "warn", "info", "debug"};

void evd_log_setup(int level, int format) {
  max_level = level;
  line_format = format;
}

int evd_log_level_parse(const char *name) {
  int i;

  for (i = 0; i <= EVD_LOG_DEBUG; i++)
    if (strcmp(name, names[i]) == 0)
      return i;
  return -1;
}

static void write_line(int level, const char *fmt, va_list ap) {
  char msg[1024], ts[32], stamp[48];
  struct timespec now;
  struct tm tm;

  if (vsnprintf(msg, sizeof msg, fmt, ap) < 0)
    return;
  clock_gettime(CLOCK_REALTIME, &now);
  gmtime_r(&now.tv_sec, &tm);
  strftime(ts, sizeof ts, "%Y-%m-%dT%H:%M:%S", &tm);
  snprintf(stamp, sizeof stamp, "%.30s.%03dZ", ts,
           (int)(now.tv_nsec / 1000000L) % 1000);
  if (line_format == EVD_LOG_JSON) {
    evd_buf_t b;
    evd_buf_init(&b);
    evd_buf_str(&b, "{\"ts\":\"");
    evd_buf_str(&b, stamp);
    evd_buf_str(&b, "\",\"level\":\"");
    evd_buf_str(&b, names[level]);
    evd_buf_str(&b, "\",\"msg\":");
    evd_buf_json_str(&b, msg, strlen(msg));
    evd_buf_str(&b, "}\n");
    if (!b.oom)
      fwrite(b.data, 1, b.len, stderr);
    evd_buf_free(&b);
  } else {
    fprintf(stderr, "%s %s %s\n", stamp, names[level], msg);
  }
}

void evd_log(int level, const char *fmt, ...) {
  va_list ap;

  if (level > max_level)
    return;
  va_start(ap, fmt);
  write_line(level, fmt, ap);
  va_end(ap);
}

void evd_log_always(const char *fmt, ...) {
  va_list ap;

  va_start(ap, fmt);
  write_line(EVD_LOG_INFO, fmt, ap);
  va_end(ap);
}

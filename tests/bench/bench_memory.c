/* Memory benchmark driver: over one keep-alive connection (pipelined a few
 * requests deep) creates N sessions in a running daemon, fills every window
 * with one request of BUDGET positions, then steps each once more with one
 * position (the steady state of decoding: the replay record of the big
 * request gives way to the small one of a single step), and reports the
 * daemon's resident memory (VmRSS) before and after each phase with the
 * time each took.
 *
 * Usage: bench_memory PORT PID SESSIONS BUDGET
 * Prints "key value" lines for memory.sh; exits 1 on any answer other than
 * the expected status, so a failed run never prints figures. */
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

/* Requests in flight at once: enough to keep the daemon busy while the
 * answers travel back, few enough that neither side's buffers fill. */
#define DEPTH 16

typedef struct {
  char *data;
  size_t len, cap, off; /* off: bytes already consumed from the front */
} buf_t;

static void die(const char *what) {
  fprintf(stderr, "bench_memory: %s\n", what);
  exit(1);
}

static void buf_add(buf_t *b, const void *p, size_t n) {
  if (b->len + n > b->cap) {
    size_t cap = b->cap ? b->cap : 65536;
    while (cap < b->len + n)
      cap *= 2;
    b->data = realloc(b->data, cap);
    if (b->data == NULL)
      die("out of memory");
    b->cap = cap;
  }
  memcpy(b->data + b->len, p, n);
  b->len += n;
}

/* Drops the consumed front of the buffer. */
static void buf_compact(buf_t *b) {
  memmove(b->data, b->data + b->off, b->len - b->off);
  b->len -= b->off;
  b->off = 0;
}

static double now_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

/* The daemon's resident set in bytes, from /proc/PID/status. */
static long long rss_bytes(long pid) {
  char path[64], line[256];
  long long kb = -1;
  FILE *f;

  snprintf(path, sizeof path, "/proc/%ld/status", pid);
  f = fopen(path, "r");
  if (f == NULL)
    die("cannot read the daemon's /proc/PID/status");
  while (fgets(line, sizeof line, f) != NULL)
    if (sscanf(line, "VmRSS: %lld kB", &kb) == 1)
      break;
  fclose(f);
  if (kb < 0)
    die("no VmRSS in /proc/PID/status");
  return kb * 1024;
}

static int connect_to(int port) {
  struct sockaddr_in a;
  int fd = socket(AF_INET, SOCK_STREAM, 0), one = 1;

  if (fd < 0)
    die("socket failed");
  memset(&a, 0, sizeof a);
  a.sin_family = AF_INET;
  a.sin_port = htons((unsigned short)port);
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (connect(fd, (struct sockaddr *)&a, sizeof a) != 0)
    die("cannot connect to the daemon");
  setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
  return fd;
}

/* Parses one whole response at the front of `in`: returns its status and
 * consumes it, or returns 0 when it has not fully arrived yet. */
static int take_response(buf_t *in) {
  char *p = in->data + in->off, *end = in->data + in->len, *hdr_end, *h;
  long long clen = -1;
  int status;

  hdr_end = memmem(p, (size_t)(end - p), "\r\n\r\n", 4);
  if (hdr_end == NULL)
    return 0;
  if (sscanf(p, "HTTP/1.1 %d", &status) != 1)
    die("malformed status line");
  for (h = p; h < hdr_end; h++) {
    if (h[0] == '\n' && strncasecmp(h + 1, "Content-Length:", 15) == 0) {
      clen = strtoll(h + 16, NULL, 10);
      break;
    }
  }
  if (clen < 0)
    die("response without Content-Length");
  if (end - (hdr_end + 4) < clen)
    return 0;
  in->off = (size_t)(hdr_end + 4 + clen - in->data);
  return status;
}

/* Sends `count` requests made by `make(i, out)` over fd, at most DEPTH in
 * flight, and checks every answer has status `want`. */
static void run(int fd, unsigned count, int want,
                void (*make)(unsigned i, buf_t *out)) {
  buf_t out = {0}, in = {0};
  unsigned sent = 0, done = 0;

  while (done < count) {
    struct pollfd pfd = {.fd = fd, .events = POLLIN};
    while (sent < count && sent - done < DEPTH)
      make(sent++, &out);
    if (out.off < out.len)
      pfd.events |= POLLOUT;
    if (poll(&pfd, 1, 30000) <= 0)
      die("the daemon stopped answering");
    if (pfd.revents & POLLOUT) {
      ssize_t n = write(fd, out.data + out.off, out.len - out.off);
      if (n < 0 && errno != EAGAIN && errno != EINTR)
        die("write failed");
      if (n > 0)
        out.off += (size_t)n;
      if (out.off == out.len)
        out.off = out.len = 0;
    }
    if (pfd.revents & (POLLIN | POLLHUP | POLLERR)) {
      char chunk[65536];
      ssize_t n = read(fd, chunk, sizeof chunk);
      int status;
      if (n == 0)
        die("the daemon closed the connection");
      if (n < 0 && errno != EAGAIN && errno != EINTR)
        die("read failed");
      if (n > 0)
        buf_add(&in, chunk, (size_t)n);
      while ((status = take_response(&in)) != 0) {
        if (status != want) {
          fprintf(stderr, "bench_memory: request %u: status %d, want %d\n",
                  done, status, want);
          exit(1);
        }
        done++;
      }
      buf_compact(&in);
    }
  }
  free(out.data);
  free(in.data);
}

static unsigned budget, fill; /* fill: positions of the big step */
static char *fill_body; /* {"positions":[1,2,...,budget]} */
static size_t fill_len;

static void make_put(unsigned i, buf_t *out) {
  char req[256], body[64];
  int blen = snprintf(body, sizeof body, "{\"budget\":%u}", budget);
  int n = snprintf(req, sizeof req,
                   "PUT /session/m%07u HTTP/1.1\r\nHost: 127.0.0.1\r\n"
                   "Content-Type: application/json\r\nContent-Length: %d"
                   "\r\n\r\n%s",
                   i, blen, body);
  buf_add(out, req, (size_t)n);
}

static void make_step(unsigned i, buf_t *out) {
  char req[256], body[64];
  int blen = snprintf(body, sizeof body, "{\"pos\":%u}", fill + 1);
  int n = snprintf(req, sizeof req,
                   "POST /session/m%07u/step HTTP/1.1\r\nHost: 127.0.0.1\r\n"
                   "Content-Type: application/json\r\nContent-Length: %d"
                   "\r\n\r\n%s",
                   i, blen, body);
  buf_add(out, req, (size_t)n);
}

static void make_fill(unsigned i, buf_t *out) {
  char req[256];
  int n = snprintf(req, sizeof req,
                   "POST /session/m%07u/step HTTP/1.1\r\nHost: 127.0.0.1\r\n"
                   "Content-Type: application/json\r\nContent-Length: %zu"
                   "\r\n\r\n",
                   i, fill_len);
  buf_add(out, req, (size_t)n);
  buf_add(out, fill_body, fill_len);
}

int main(int argc, char **argv) {
  long pid;
  unsigned count, p;
  int port, fd;
  long long rss0, rss1, rss2, rss3;
  double t0, t1, t2, t3;
  buf_t b = {0};

  if (argc != 5 && argc != 6)
    die("usage: bench_memory PORT PID SESSIONS BUDGET [FILL]");
  port = atoi(argv[1]);
  pid = atol(argv[2]);
  count = (unsigned)strtoul(argv[3], NULL, 10);
  budget = (unsigned)strtoul(argv[4], NULL, 10);
  fill = argc == 6 ? (unsigned)strtoul(argv[5], NULL, 10) : budget;
  if (port <= 0 || pid <= 0 || count == 0 || budget == 0 || fill == 0)
    die("usage: bench_memory PORT PID SESSIONS BUDGET [FILL]");

  /* Positions 1..fill (budget by default: with position 0 that is budget +
   * 1 steps, so every slot of the ring has been written and one position
   * evicted). */
  buf_add(&b, "{\"positions\":[", 14);
  for (p = 1; p <= fill; p++) {
    char num[16];
    int n = snprintf(num, sizeof num, p > 1 ? ",%u" : "%u", p);
    buf_add(&b, num, (size_t)n);
  }
  buf_add(&b, "]}", 2);
  fill_body = b.data;
  fill_len = b.len;

  fd = connect_to(port);
  rss0 = rss_bytes(pid);
  t0 = now_s();
  run(fd, count, 201, make_put);
  t1 = now_s();
  rss1 = rss_bytes(pid);
  run(fd, count, 200, make_fill);
  t2 = now_s();
  rss2 = rss_bytes(pid);
  run(fd, count, 200, make_step);
  t3 = now_s();
  rss3 = rss_bytes(pid);
  close(fd);
  free(fill_body);

  printf("sessions %u\n", count);
  printf("rss_before %lld\n", rss0);
  printf("rss_created %lld\n", rss1);
  printf("rss_filled %lld\n", rss2);
  printf("rss_steady %lld\n", rss3);
  printf("create_seconds %.3f\n", t1 - t0);
  printf("fill_seconds %.3f\n", t2 - t1);
  printf("step_seconds %.3f\n", t3 - t2);
  return 0;
}

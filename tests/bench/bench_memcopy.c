/* The floor under a restart that holds its state in its own memory, for
 * tests/bench/restart.sh: the seconds to copy FILE (the snapshot, already in
 * the page cache) into fresh anonymous memory, as many bytes as the file,
 * the pages readied first in one system call as the daemon readies its heap
 * (MADV_POPULATE_WRITE where the kernel has it, a write per page otherwise).
 * Prints one line per round: "total populate copy" in seconds. A restart
 * cannot beat this figure whatever its format or its checks; `cat` does not
 * pay it, since it reads into one small buffer over and over.
 * Usage: bench_memcopy FILE [ROUNDS] */
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

static double now(void) {
  struct timespec ts;

  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

int main(int argc, char **argv) {
  int fd, rounds = argc > 2 ? atoi(argv[2]) : 3;
  struct stat st;
  const char *src;
  size_t n, page = (size_t)sysconf(_SC_PAGESIZE);

  if (argc < 2 || argc > 3 || rounds < 1) {
    fprintf(stderr, "usage: bench_memcopy FILE [ROUNDS]\n");
    return 2;
  }
  fd = open(argv[1], O_RDONLY);
  if (fd < 0 || fstat(fd, &st) != 0 || st.st_size <= 0) {
    fprintf(stderr, "bench_memcopy: %s: cannot open or is empty\n", argv[1]);
    return 1;
  }
  n = (size_t)st.st_size;
  src = mmap(NULL, n, PROT_READ, MAP_SHARED, fd, 0);
  if (src == MAP_FAILED) {
    perror("bench_memcopy: mmap");
    return 1;
  }
  for (int r = 0; r < rounds; r++) {
    double t0 = now(), t1, t2;
    char *dst = mmap(NULL, n, PROT_READ | PROT_WRITE,
                     MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);

    if (dst == MAP_FAILED) {
      perror("bench_memcopy: mmap");
      return 1;
    }
#ifdef MADV_POPULATE_WRITE
    if (madvise(dst, n, MADV_POPULATE_WRITE) != 0)
#endif
      for (size_t i = 0; i < n; i += page)
        ((volatile char *)dst)[i] = 0;
    t1 = now();
    memcpy(dst, src, n);
    t2 = now();
    /* Read a byte back, so the copy cannot be left out. */
    if (dst[n - 1] != src[n - 1])
      return 1;
    printf("%.4f %.4f %.4f\n", t2 - t0, t1 - t0, t2 - t1);
    munmap(dst, n);
  }
  return 0;
}

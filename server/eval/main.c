/* evictd-eval: retained attention of evictd's sliding window over an
 * attention trace. Everything but the process lives in cli.c. */
#include <stdio.h>

#include "eval.h"

int main(int argc, char **argv) {
  return evd_eval_cli(argc, argv, stdout, stderr);
}

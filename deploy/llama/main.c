/* evictd-llama: llama.cpp with its KV cache kept by evictd. The commands,
 * each in a folder of its own (generate/, serve/, perplexity/) over what
 * they share (common/). */
#include <stdio.h>
#include <string.h>

#include "common/cli.h"
#include "generate/generate.h"
#include "perplexity/perplexity.h"
#include "serve/serve.h"

static const struct {
  const char *name;
  int (*main)(int argc, char **argv);
} commands[] = {
    {"generate", generate_main},
    {"serve", serve_main},
    {"perplexity", perplexity_main},
};

static const char usage[] =
    "usage: evictd-llama generate -m MODEL.gguf [options]\n"
    "       evictd-llama serve -m MODEL.gguf [options]\n"
    "       evictd-llama perplexity -m MODEL.gguf [options] FILE\n"
    "       evictd-llama COMMAND --help   (the command's options)\n"
    "\n"
    "Decodes with llama.cpp, each sequence's KV cache kept by evictd: one\n"
    "evictd request per decode iteration, and the cache loses exactly the\n"
    "positions evictd names (no context shift of llama.cpp's own, so it\n"
    "runs past n_ctx).\n"
    "\n"
    "  generate     text from a prompt on stdout (samples: --parallel,\n"
    "               speculative decoding: --draft)\n"
    "  serve        an HTTP completion server: POST /completion, GET\n"
    "               /health, GET /metrics; each request an evictd session\n"
    "  perplexity   a text's perplexity under full attention and under\n"
    "               evictd's window and sinks at each budget\n"
    "\n"
    "Every command takes the same evictd options: --evictd URL (default\n"
    "$EVICTD_URL, else http://127.0.0.1:8090), --token-file, --cafile,\n"
    "--timeout-ms, --reconnect-ms.\n";

int main(int argc, char **argv) {
  if (argc < 2)
    return cli_say(2, "evictd-llama", "evictd-llama --help",
                   "no command (generate, serve, perplexity)");
  if (strcmp(argv[1], "-h") == 0 || strcmp(argv[1], "--help") == 0) {
    fputs(usage, stdout);
    return 0;
  }
  if (strcmp(argv[1], "--version") == 0) {
    cli_version();
    return 0;
  }
  for (size_t i = 0; i < sizeof(commands) / sizeof(commands[0]); i++)
    if (strcmp(argv[1], commands[i].name) == 0)
      return commands[i].main(argc - 1, argv + 1);
  return cli_say(2, "evictd-llama", "evictd-llama --help",
                 "unknown command '%s' (generate, serve, perplexity)",
                 argv[1]);
}

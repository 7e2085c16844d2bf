/* evictd-llama serve: a completion server whose requests keep their KV
 * cache through evictd, laid out as llama.cpp's own server: a transport
 * that knows no API (http/), one file per API registering its routes
 * (api/), what the APIs share beneath them (shared/), the queue of tasks
 * and the board of figures (queue/), the engine that decodes and knows no
 * HTTP (engine/), and llama.cpp's common library behind C interfaces
 * (upstream/). This command (serve.c: its options, the listening socket,
 * the life of the process; options.c: the rules between options; flags.c:
 * llama-server's flags, as llama-server means them, or refused) starts
 * them in that order from the bottom and stops them from the top. */
#ifndef EVICTD_LLAMA_SERVE_H
#define EVICTD_LLAMA_SERVE_H

/* evictd-llama serve's command line; the process exit status. */
int serve_main(int argc, char **argv);

#endif

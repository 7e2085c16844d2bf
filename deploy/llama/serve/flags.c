/* llama-server's command line in evictd-llama serve: every flag of
 * llama-server (llama.cpp's common/arg.cpp, those of the server) either
 * means here what it means there, or is accepted as changing nothing here
 * (its help says why), or is refused in one line that says why. These are
 * their rows (their parsers: flags_set.c); common/cli.c parses them with
 * serve's own, and options.c turns them into serve's settings (before the
 * model is loaded, and after). */
#include <errno.h>
#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "serve/flags.h"
#include "serve/flags_set.h"

/* ---- the rows ------------------------------------------------------------ */

/* A row whose parser fn reads its key: into the field f, or into the
 * request defaults. */
#define ROW(f, fn, key) CLI_ROW, LS(f), 0, 0, {.row = {fn, key}}
#define SET(fn, key) ROW(defaults, fn, key)
#define NOOP CLI_NOOP, 0, 0, 0, {NULL}
#define REFUSE CLI_REFUSE, 0, 0, 0, {NULL}
#define DEVICE(key) CLI_ROW, LS(device), 0, 0, {.row = {set_device, key}}
#define ON_CPU "accepted where llama.cpp finds no GPU (it changes nothing " \
               "there, in llama-server either), refused where it finds one: " \
               "serve keeps every layer and the cache on the CPU"
#define AS_NGL "accepted where llama.cpp finds no GPU, as -ngl"
#define NO_NET "no network: serve loads a local GGUF (-m FILE)"
#define NO_SPEC "no speculative decoding in serve (generate --draft has it)"
#define NO_EMBD "no embeddings or reranking: serve is a generation server"
#define NO_MEDIA "no images, audio or video: serve takes text"
#define AS_LOADED "serve loads the model as llama.cpp does by default " \
                  "(memory-mapped, weights repacked, nothing overridden)"
#define NO_TOOLS "serve runs no built-in tools and no MCP proxy"

static const char *const zero[] = {"0", NULL};
static const char *const never[] = {"-1", NULL};
static const char *const automatic[] = {"auto", NULL};

const cli_opt_t serve_llama_flags[] = {
    /* The context: the window's cells and the prefill chunk. */
    {"ctx-size", "c", "N", CLI_I64, LS(ctx), 0, 1u << 30, {NULL},
     "llama-server's context of N cells, shared evenly by the -np P slots: "
     "each of serve's P sequences holds N/P cells, its window's budget and "
     "its prefill chunk, so --budget is N/P - lookahead (the chunk: "
     "--lookahead, else -b/-ub's, else 512); with --budget too they must "
     "agree. 0: the model's training context. Not given: --budget (else "
     "the daemon's). The window never fills: a generation runs on past it, "
     "evicting"},
    {"kv-unified-per-slot", NULL, "N", CLI_I64, LS(ctx_slot), 1, 1u << 30,
     {NULL}, "a sequence's cells, as -c N*P: --budget is N - lookahead"},
    {"batch-size", "b", "N", CLI_I64, LS(batch), 1, 1u << 24, {NULL},
     "llama-server's logical batch; the prefill chunk is the smaller of -b "
     "and -ub (2048 and 512 when not given): --lookahead, the positions a "
     "prompt goes into the cache by, a pass each"},
    {"ubatch-size", "ub", "N", CLI_I64, LS(ubatch), 1, 1u << 24, {NULL},
     "llama-server's physical batch (above)"},
    {"keep", NULL, "N", ROW(keep, set_keep, NULL),
     "the prompt's first N tokens after the BOS, which llama-server's "
     "context shift keeps: the window's --sinks (N + 1 for a model that "
     "adds a BOS); -1, all of the prompt, is refused"},
    {"predict|n-predict", "n", "N", ROW(n_predict, set_n_predict, NULL),
     "every route's default of max tokens (n_predict, max_tokens, "
     "max_completion_tokens, max_output_tokens): -1, until an end token "
     "or --n-predict-max. Not given: each route's own (16 for "
     "/v1/completions as OpenAI's, 128 for /completion, else -1)"},
    {"context-shift", NULL, NULL, NOOP,
     "accepted: what serve's window does, better: it evicts as a "
     "generation goes, a position a token (the first --keep/--sinks "
     "kept), where llama-server drops half the context at once, and no "
     "generation ever stops for want of room"},

    /* Every request's sampler defaults, under llama-server's names. */
    {"temp|temperature", NULL, "N", SET(set_number, "temperature"),
     "every request's default temperature (0: greedy)"},
    {"top-k", NULL, "N", SET(set_number, "top_k"),
     "every request's default top_k (0: off)"},
    {"top-p", NULL, "N", SET(set_number, "top_p"),
     "every request's default top_p (1: off)"},
    {"min-p", NULL, "N", SET(set_number, "min_p"),
     "every request's default min_p (0: off)"},
    {"top-nsigma|top-n-sigma", NULL, "N", SET(set_number, "top_n_sigma"),
     "every request's default top_n_sigma (-1: off)"},
    {"typical|typical-p", NULL, "N", SET(set_number, "typical_p"),
     "every request's default typical_p (1: off)"},
    {"xtc-probability", NULL, "N", SET(set_number, "xtc_probability"),
     "every request's default xtc_probability"},
    {"xtc-threshold", NULL, "N", SET(set_number, "xtc_threshold"),
     "every request's default xtc_threshold"},
    {"repeat-last-n", NULL, "N", SET(set_number, "repeat_last_n"),
     "every request's default repeat_last_n"},
    {"repeat-penalty", NULL, "N", SET(set_number, "repeat_penalty"),
     "every request's default repeat_penalty"},
    {"presence-penalty", NULL, "N", SET(set_number, "presence_penalty"),
     "every request's default presence_penalty"},
    {"frequency-penalty", NULL, "N", SET(set_number, "frequency_penalty"),
     "every request's default frequency_penalty"},
    {"dry-multiplier", NULL, "N", SET(set_number, "dry_multiplier"),
     "every request's default dry_multiplier"},
    {"dry-base", NULL, "N", SET(set_number, "dry_base"),
     "every request's default dry_base"},
    {"dry-allowed-length", NULL, "N", SET(set_number, "dry_allowed_length"),
     "every request's default dry_allowed_length"},
    {"dry-penalty-last-n", NULL, "N", SET(set_number, "dry_penalty_last_n"),
     "every request's default dry_penalty_last_n"},
    {"dry-sequence-breaker", NULL, "STRING",
     SET(set_breaker, "dry_sequence_breakers"),
     "every request's default dry_sequence_breakers: one each time given"},
    {"adaptive-target", NULL, "N", SET(set_number, "adaptive_target"),
     "every request's default adaptive_target"},
    {"adaptive-decay", NULL, "N", SET(set_number, "adaptive_decay"),
     "every request's default adaptive_decay"},
    {"dynatemp-range", NULL, "N", SET(set_number, "dynatemp_range"),
     "every request's default dynatemp_range"},
    {"dynatemp-exp", NULL, "N", SET(set_number, "dynatemp_exponent"),
     "every request's default dynatemp_exponent"},
    {"mirostat", NULL, "N", SET(set_number, "mirostat"),
     "every request's default mirostat (0, 1 or 2)"},
    {"mirostat-lr", NULL, "N", SET(set_number, "mirostat_eta"),
     "every request's default mirostat_eta"},
    {"mirostat-ent", NULL, "N", SET(set_number, "mirostat_tau"),
     "every request's default mirostat_tau"},
    {"seed", "s", "SEED", SET(set_seed, "seed"),
     "every request's default seed (-1: a random one each; choice i of n "
     "draws with seed + i)"},
    {"samplers", NULL, "A;B;...", SET(set_samplers, "samplers"),
     "every request's default samplers, in order"},
    {"sampler-seq|sampling-seq", NULL, "LETTERS", SET(set_text, "samplers"),
     "the same in llama.cpp's letters (edskypmxt)"},
    {"ignore-eos", NULL, NULL, SET(set_true, "ignore_eos"),
     "every request's default ignore_eos: end tokens are never drawn"},
    {"logit-bias", "l", "TOKEN+BIAS", SET(set_bias, "logit_bias"),
     "every request's default logit_bias: one each time given (15043-inf: "
     "never)"},
    {"grammar", NULL, "GBNF", SET(set_grammar_text, "grammar"),
     "every request's default grammar"},
    {"grammar-file", NULL, "FILE", SET(set_grammar_file, "grammar"),
     "the same from a file"},
    {"json-schema", "j", "SCHEMA", SET(set_schema_text, "json_schema"),
     "every request's default json_schema (as a grammar)"},
    {"json-schema-file", "jf", "FILE", SET(set_schema_file, "json_schema"),
     "the same from a file"},

    /* Chats: their templates and what a chat's defaults are. */
    {"jinja", NULL, NULL, ROW(jinja, set_const, "1"),
     "chat templates rendered with Jinja, as llama-server's (the "
     "default)"},
    {"no-jinja", NULL, NULL, ROW(jinja, set_const, "0"),
     "chat templates through llama.cpp's built-in list instead: no tools, "
     "no response formats"},
    {"chat-template", NULL, "JINJA|NAME", CLI_STR, LS(chat_template), 0, 0,
     {NULL}, "the chat template: its Jinja source, or \"chatml\" (with "
     "--no-jinja, a name of llama.cpp's built-in list) (default: the "
     "GGUF's, else ChatML)"},
    {"chat-template-file", NULL, "FILE", CLI_STR, LS(chat_template_file), 0,
     0, {NULL}, "the same from a file"},
    {"chat-template-kwargs", NULL, "JSON", SET(set_kwargs, NULL),
     "every chat's template arguments (an object), a request's own "
     "chat_template_kwargs over them key by key"},
    {"reasoning-format", NULL, "FORMAT", SET(set_format, "reasoning_format"),
     "every chat's default reasoning_format: none, auto, deepseek or "
     "deepseek-legacy"},
    {"reasoning", "rea", "on|off|auto", SET(set_thinking, "enable_thinking"),
     "the template's enable_thinking: on, off, or auto (the template's "
     "own)"},
    {"reasoning-effort", NULL, "LEVEL", SET(set_effort, "reasoning_effort"),
     "the template's reasoning_effort (default: the template's own)"},
    {"reasoning-budget", NULL, "N", SET(set_number, "reasoning_budget_tokens"),
     "every chat's default reasoning_budget_tokens (-1: no limit)"},
    {"reasoning-budget-message", NULL, "MESSAGE",
     SET(set_text, "reasoning_budget_message"),
     "every chat's default reasoning_budget_message"},
    {"reasoning-preserve", NULL, NULL, SET(set_on, "preserve_reasoning"),
     "the template's preserve_reasoning true"},
    {"no-reasoning-preserve", NULL, NULL, SET(set_off, "preserve_reasoning"),
     "the template's preserve_reasoning false"},
    {"prefill-assistant|no-skip-chat-parsing", NULL, NULL, NOOP,
     "accepted: what serve does (a trailing assistant message is "
     "continued; the text is read back as the chat's format says)"},

    /* The server. */
    {"cache-idle-slots", NULL, NULL, NOOP,
     "accepted: what serve does (a parked conversation whose slot is "
     "needed is saved to --cache-ram)"},
    {"no-cache-idle-slots", NULL, NULL, CLI_FLAG, LS(no_cache_idle), 0, 0,
     {NULL}, "none saved: --cache-ram 0"},
    {"verbose|log-verbose", "v", NULL, CLI_FLAG, OPT(verbose), 0, 0, {NULL},
     "llama.cpp's whole log, as --debug; and answers carry __verbose "
     "(a request's \"verbose\" says otherwise for itself)"},
    {"metrics", NULL, NULL, NOOP, "accepted: GET /metrics is always on"},
    {"slots", NULL, NULL, ROW(slots, set_const, "1"),
     "GET /slots answers (the default)"},
    {"no-slots", NULL, NULL, ROW(slots, set_const, "0"),
     "GET /slots answers 501 not_supported, and GET /props says "
     "endpoint_slots false, as llama-server's"},
    {"cont-batching", "cb", NULL, NOOP, "accepted: serve always decodes "
     "every running request in one pass"},
    {"no-kv-unified", "no-kvu", NULL, NOOP, "accepted: what serve does (a "
     "sequence's cells are its own)"},
    {"kv-unified", "kvu", NULL, NOOP, "accepted, changing nothing: serve's "
     "sequences share no cells (-c N still gives each N/-np), and as a "
     "window never fills, no request waits for or is refused by a shared "
     "pool"},
    {"threads-http", NULL, "N", NOOP, "accepted: libmicrohttpd runs a "
     "thread per connection"},
    {"timeout", "to", "N", NOOP, "accepted: serve times no connection out "
     "(a client that goes away ends its request at once)"},
    {"ui|webui", NULL, NULL, ROW(ui, set_const, "1"),
     "llama.cpp's web UI at / (the default, in a build that has it: make "
     "UI=0 builds serve without, whose / is a 404)"},
    {"no-ui|no-webui", NULL, NULL, ROW(ui, set_const, "0"),
     "no web UI: / is a 404"},
    {"path", NULL, "DIR", CLI_STR, LS(path), 0, 0, {NULL},
     "DIR's files at / instead of the UI built in (a folder's index.html "
     "for the folder; none above DIR), without the API key"},
    {"api-prefix", NULL, "PREFIX", CLI_STR, LS(api_prefix), 0, 0, {NULL},
     "every route under PREFIX (\"/llama\": GET /llama/health, the UI at "
     "/llama/), as llama-server's"},
    {"ui-config|webui-config", NULL, "JSON", CLI_STR, LS(ui_config), 0, 0,
     {NULL}, "the UI's settings (JSON), in GET /props's ui_settings"},
    {"ui-config-file|webui-config-file", NULL, "FILE", CLI_STR,
     LS(ui_config_file), 0, 0, {NULL}, "the same from a file"},
    {"no-ui-mcp-proxy|no-webui-mcp-proxy", NULL, NULL, NOOP,
     "accepted: " NO_TOOLS},
    {"no-agent", "no-ag", NULL, NOOP, "accepted: the same"},
    {"no-mmproj|no-mmproj-auto|no-mmproj-offload", NULL, NULL, NOOP,
     "accepted: serve takes text alone"},
    {"backend-sampling", "bs", NULL, NOOP, "accepted, changing nothing: "
     "serve draws with common's sampler chain on the CPU, and llama-server's "
     "backend sampling draws the same tokens (its own tests assert it); "
     "a request's \"backend_sampling\" likewise"},
    {"no-spec-draft-backend-sampling", NULL, NULL, NOOP,
     "accepted: no speculative decoding"},
    {"offline", NULL, NULL, NOOP, "accepted: serve never uses the network"},
    {"models-max", NULL, "N", NOOP, "accepted: a router's, which "
     "llama-server ignores with -m too"},
    {"models-autoload|no-models-autoload", NULL, NULL, NOOP,
     "accepted: the same"},
    {"ctx-checkpoints|swa-checkpoints", "ctxcp", "N", CLI_U32,
     OPT(ctx_checkpoints), 0, 4096, {NULL}, "keep a conversation's state "
     "(its cells, its window, its tokens) where a turn's new text begins "
     "and 4 tokens before its prompt ends, so that a regenerated answer "
     "or an edited last message decodes only from there: N per slot in "
     "all (N times --parallel), the least recently used first out, within "
     "--cache-ram, never pushing a saved conversation out (default 32, as "
     "llama-server's; 0: none)"},
    {"checkpoint-min-step", "cms", "N", NOOP, "accepted: serve keeps "
     "checkpoints at turn boundaries alone (--ctx-checkpoints)"},
    {"defrag-thold", "dt", "N", NOOP, "accepted: deprecated in llama.cpp "
     "too"},
    {"perf|no-perf", NULL, NULL, NOOP, "accepted: llama.cpp's timings are "
     "not logged (GET /metrics has serve's)"},
    {"escape|no-escape", "e", NULL, NOOP, "accepted: a server takes no "
     "text on its command line to unescape"},
    {"warmup", NULL, NULL, ROW(warmup, set_const, "1"),
     "two passes of the model before serving, so that the first request "
     "does not pay llama.cpp's first ones (the default)"},
    {"no-warmup", NULL, NULL, ROW(warmup, set_const, "0"),
     "no warm-up pass"},
    {"mmap|repack", NULL, NULL, NOOP, "accepted: llama.cpp's defaults, "
     "serve's way of loading"},
    {"no-direct-io", "ndio", NULL, NOOP, "accepted: the same"},
    {"log-disable|log-prefix|no-log-prefix|log-timestamps|"
     "no-log-timestamps", NULL, NULL, NOOP, "accepted: serve's log is a few "
     "lines on stderr (its start, its end, failures)"},
    {"log-colors", NULL, "WHEN", NOOP, "accepted: the same"},
    {"verbosity|log-verbosity", "lv", "N", NOOP, "accepted: the same (-v: "
     "llama.cpp's whole log)"},

    /* Where llama.cpp puts the model: the CPU, here. */
    {"gpu-layers|n-gpu-layers", "ngl", "N", DEVICE("0"),
     ON_CPU " (0: always)"},
    {"device", "dev", "LIST", DEVICE("none"), AS_NGL " (none: always)"},
    {"split-mode", "sm", "MODE", DEVICE("none"), AS_NGL " (none: always)"},
    {"tensor-split", "ts", "N0,N1,...", DEVICE(NULL), AS_NGL},
    {"main-gpu", "mg", "INDEX", DEVICE(NULL), AS_NGL},
    {"override-tensor", "ot", "PATTERN=TYPE,...", DEVICE(NULL), AS_NGL},
    {"kv-offload", "kvo", NULL, DEVICE(NULL), AS_NGL},
    {"op-offload", NULL, NULL, DEVICE(NULL), AS_NGL},
    {"fit", "fit", "on|off", DEVICE("off"), AS_NGL " (off: always)"},
    {"fit-target", "fitt", "MIB,...", DEVICE(NULL), AS_NGL},
    {"fit-ctx", "fitc", "N", DEVICE(NULL), AS_NGL},
    {"cpu-moe", "cmoe", NULL, DEVICE("*"), "accepted: serve keeps every "
     "weight on the CPU"},
    {"n-cpu-moe", "ncmoe", "N", DEVICE("*"), "accepted: the same"},
    {"n-cpu-ffn", "ncffn", "N", DEVICE("*"), "accepted: the same"},
    {"no-kv-offload", "nkvo", NULL, DEVICE("*"), "accepted: serve keeps the "
     "cache on the CPU"},
    {"no-op-offload", NULL, NULL, DEVICE("*"), "accepted: the same"},

    /* Refused, each with its reason; a few accept the value that asks for
     * nothing. */
    {"cache-reuse", NULL, "N", CLI_REFUSE, 0, 0, 0, {.names = zero},
     "serve reuses a prompt's common start with a conversation, not later "
     "chunks shifted into place"},
    {"sse-ping-interval", NULL, "N", CLI_REFUSE, 0, 0, 0, {.names = never},
     "serve sends no pings while a stream is silent"},
    {"sleep-idle-seconds", NULL, "SECONDS", CLI_REFUSE, 0, 0, 0,
     {.names = never}, "serve keeps the model loaded"},
    {"load-mode", "lm", "MODE", CLI_REFUSE, 0, 0, 0, {.names = automatic},
     AS_LOADED},
    {"lazy-mode", "lzm", "MODE", CLI_REFUSE, 0, 0, 0, {.names = automatic},
     AS_LOADED},
    {"mlock|no-mmap|check-tensors|no-host|numa|override-kv", NULL, NULL,
     REFUSE, AS_LOADED},
    {"direct-io", "dio", NULL, REFUSE, AS_LOADED},
    {"no-repack", "nr", NULL, REFUSE, AS_LOADED},
    {"rope-scaling|rope-scale|rope-freq-base|rope-freq-scale|yarn-orig-ctx|"
     "yarn-ext-factor|yarn-attn-factor|yarn-beta-slow|yarn-beta-fast", NULL,
     NULL, REFUSE, "serve runs the GGUF's own RoPE settings (its positions "
     "are the window's: see generate --positions)"},
    {"no-context-shift", NULL, NULL, REFUSE, "serve's window never fills: "
     "a generation runs on past the context, evicting (--n-predict-max "
     "caps it), so there is no end of the context to stop at"},
    {"no-cont-batching", "nocb", NULL, REFUSE, "serve always decodes every "
     "running request in one pass (each answer is the same either way)"},
    {"reverse-prompt", "r", NULL, REFUSE, "serve has no server-wide stop "
     "strings: give \"stop\" in the request"},
    {"special", "sp", NULL, REFUSE, "serve never writes control tokens' "
     "text into an answer"},
    {"spm-infill", NULL, NULL, REFUSE, "serve has no /infill route"},
    {"no-prefill-assistant", NULL, NULL, REFUSE, "serve always continues a "
     "trailing assistant message (llama-server's default)"},
    {"skip-chat-parsing", NULL, NULL, REFUSE, "serve always reads tool "
     "calls and reasoning out of a chat's text as its format says"},
    {"slot-prompt-similarity", "sps", NULL, REFUSE, "serve continues the "
     "conversation a prompt extends, by its tokens (at least half of it "
     "kept), not by similarity"},
    {"slot-save-path", NULL, NULL, REFUSE, "serve saves sequences itself "
     "(--cache-ram, --cache-dir), not on POST /slots"},
    {"props", NULL, NULL, REFUSE, "serve's settings are fixed at start: no "
     "POST /props"},
    {"reuse-port", NULL, NULL, REFUSE, "serve binds its port alone"},
    {"ssl-key-file|ssl-cert-file", NULL, NULL, REFUSE, "no TLS in serve: "
     "put it behind a proxy that has it"},
    {"ui-mcp-proxy|webui-mcp-proxy|tools|tools-runtime|mcp-servers-config|"
     "mcp-servers-json", NULL, NULL, REFUSE, NO_TOOLS},
    {"agent", "ag", NULL, REFUSE, NO_TOOLS},
    {"models-dir|models-preset", NULL, NULL, REFUSE, "no router: serve "
     "serves the one model of -m"},
    {"log-file", NULL, NULL, REFUSE, "serve logs on stderr: redirect it"},
    {"log-prompts-dir", NULL, NULL, REFUSE, "serve logs no prompts"},
    {"list-devices", NULL, NULL, REFUSE, "serve keeps the model on the "
     "CPU: no devices to list"},
    {"rpc", NULL, NULL, REFUSE, "no RPC devices: serve runs on this "
     "machine's CPU"},
    {"cpu-mask|cpu-range|cpu-strict|prio|poll|cpu-mask-batch|"
     "cpu-range-batch|cpu-strict-batch|prio-batch|poll-batch",
     "C|Cr|Cb|Crb", NULL, REFUSE, "serve leaves llama.cpp's threads to the "
     "system: place and prioritise it with taskset, numactl, nice or chrt"},
    {"lookup-cache-static|lookup-cache-dynamic", "lcs|lcd", NULL, REFUSE,
     "no lookup decoding in serve"},
    {"lora|lora-scaled|lora-init-without-apply|control-vector|"
     "control-vector-scaled|control-vector-layer-range", NULL, NULL, REFUSE,
     "no adapters or control vectors: serve runs the GGUF as it is"},
    {"embedding|embeddings|rerank|reranking|pooling|embd-normalize", NULL,
     NULL, REFUSE, NO_EMBD},
    {"mmproj|mmproj-url|mmproj-auto|mmproj-offload|mmproj-device|"
     "image-min-tokens|image-max-tokens|mtmd-batch-max-tokens|video-fps|"
     "video-timestamp-interval|video-ffmpeg-dir|media-path", "mm|mmu|mmdev",
     NULL, REFUSE, NO_MEDIA},
    {"cache-list|model-url|docker-repo|hf-repo|hf-file|hf-token",
     "cl|mu|dr|hf|hfr|hff|hft", NULL, REFUSE, NO_NET},
    {"embd-gemma-default|fim-qwen-1.5b-default|fim-qwen-3b-default|"
     "fim-qwen-7b-default|fim-qwen-7b-spec|fim-qwen-14b-spec|"
     "fim-qwen-30b-default|gpt-oss-20b-default|gpt-oss-120b-default|"
     "vision-gemma-4b-default|vision-gemma-12b-default", NULL, NULL, REFUSE,
     "it downloads a model: " NO_NET},
    {"completion-bash", NULL, NULL, REFUSE, "serve writes no completion "
     "script"},
    {"spec-default|spec-type|spec-draft-model|model-draft|spec-draft-hf|"
     "hf-repo-draft|spec-draft-threads|threads-draft|"
     "spec-draft-threads-batch|threads-batch-draft|spec-draft-cpu-mask|"
     "cpu-mask-draft|spec-draft-cpu-range|cpu-range-draft|"
     "spec-draft-cpu-strict|cpu-strict-draft|spec-draft-prio|prio-draft|"
     "spec-draft-poll|poll-draft|spec-draft-cpu-mask-batch|"
     "cpu-mask-batch-draft|spec-draft-cpu-strict-batch|"
     "cpu-strict-batch-draft|spec-draft-prio-batch|prio-batch-draft|"
     "spec-draft-poll-batch|poll-batch-draft|spec-draft-type-k|"
     "cache-type-k-draft|spec-draft-type-v|cache-type-v-draft|"
     "spec-draft-override-tensor|override-tensor-draft|spec-draft-cpu-moe|"
     "cpu-moe-draft|spec-draft-n-cpu-moe|spec-draft-ncmoe|n-cpu-moe-draft|"
     "spec-draft-n-max|spec-draft-n-min|spec-synth-len|spec-synth-rates|"
     "spec-draft-p-split|draft-p-split|spec-draft-p-min|draft-p-min|"
     "spec-draft-backend-sampling|spec-draft-device|device-draft|"
     "spec-draft-ngl|gpu-layers-draft|n-gpu-layers-draft|"
     "spec-ngram-mod-n-min|spec-ngram-mod-n-max|spec-ngram-mod-n-match|"
     "spec-ngram-simple-size-n|spec-ngram-simple-size-m|"
     "spec-ngram-simple-min-hits|spec-ngram-map-k-size-n|"
     "spec-ngram-map-k-size-m|spec-ngram-map-k-min-hits|"
     "spec-ngram-map-k4v-size-n|spec-ngram-map-k4v-size-m|"
     "spec-ngram-map-k4v-min-hits|draft|draft-n|draft-max|draft-min|"
     "draft-n-min|spec-ngram-size-n|spec-ngram-size-m|spec-ngram-min-hits",
     "md|hfd|hfrd|td|tbd|Cd|Crd|Cbd|ctkd|ctvd|otd|cmoed|ncmoed|devd|ngld",
     NULL, REFUSE, NO_SPEC},
};
const size_t serve_llama_flags_n =
    sizeof(serve_llama_flags) / sizeof(serve_llama_flags[0]);

json_t *flags_names(const char *list) {
  json_t *a = json_array();
  for (const char *p = list ? list : ""; a != NULL && *p != '\0';) {
    size_t len = strcspn(p, ","), skip = strspn(p, " \t");
    const char *n = p + (skip < len ? skip : len);
    size_t k = len - (size_t)(n - p);
    while (k > 0 && (n[k - 1] == ' ' || n[k - 1] == '\t'))
      k--;
    size_t at = 0, size = json_array_size(a);
    int cmp = 1;
    while (k > 0 && at < size) {
      const char *e = json_string_value(json_array_get(a, at));
      size_t el = strlen(e);
      cmp = strncmp(n, e, k < el ? k : el);
      if (cmp == 0)
        cmp = k < el ? -1 : k > el;
      if (cmp <= 0)
        break;
      at++;
    }
    if (k > 0 && (at == size || cmp != 0) &&
        json_array_insert_new(a, at, json_stringn(n, k)) != 0) {
      json_decref(a);
      a = NULL;
    }
    p += len + (p[len] == ',');
  }
  return a;
}

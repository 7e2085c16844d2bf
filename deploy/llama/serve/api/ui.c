/* llama.cpp's web UI (ui.h). The bundle is built into the binary as one
 * file (deploy/llama/ui-pack.mjs: a line of JSON indexing gzip-compressed
 * assets), read in place: nothing is copied or decompressed. As
 * llama-server answers them: a client that takes no gzip gets a 415; the
 * page is revalidated (no-cache, an ETag, 304), isolated (COEP, COOP); the
 * hashed assets are cached for good; the service worker and the version
 * files are not cached. */
#include "serve/api/ui.h"

#include <errno.h>
#include <fcntl.h>
#include <jansson.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>
#include <unistd.h>

#ifdef EVD_UI_PACK
/* The pack, as the build left it (llama.mk gives its path). */
__asm__(".section .rodata\n"
        ".balign 16\n"
        ".type evd_ui_pack, @object\n"
        "evd_ui_pack:\n"
        ".incbin \"" EVD_UI_PACK "\"\n"
        ".type evd_ui_pack_end, @object\n"
        "evd_ui_pack_end:\n"
        ".byte 0\n"
        ".previous\n");
extern const char evd_ui_pack[], evd_ui_pack_end[];
#endif

/* A sentence into err; -1. */
static int say(char *err, size_t errlen, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

static int say(char *err, size_t errlen, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(err, errlen, fmt, ap);
  va_end(ap);
  return -1;
}

/* How an asset is cached (llama-server's rules). */
typedef enum {
  KEEP_PAGE,      /* the page: revalidated, an ETag, isolated */
  KEEP_FOREVER,   /* a hashed asset: its name changes with its bytes */
  KEEP_NOT        /* the service worker, the manifest, the versions */
} keep_t;

typedef struct asset_s {
  const char *name;       /* in the pack's index (ui_t's json) */
  const char *etag;
  const char *data;       /* gzip'd, in the pack */
  size_t len;
  keep_t keep;
} asset_t;

struct ui_s {
  json_t *index;          /* the pack's index: the names and ETags */
  asset_t *assets;
  size_t n;
  char *dir;              /* --path's folder, or NULL */
  char **paths;           /* the routes' paths made here */
  http_route_t *routes;
};

bool ui_built_in(void) {
#ifdef EVD_UI_PACK
  return evd_ui_pack_end - evd_ui_pack > 0;
#else
  return false;
#endif
}

/* The content type of a file name. */
static const char *type_of(const char *name) {
  static const char *const types[][2] = {
      {"html", "text/html; charset=utf-8"}, {"css", "text/css"},
      {"js", "application/javascript"}, {"mjs", "application/javascript"},
      {"json", "application/json"},
      {"webmanifest", "application/manifest+json"},
      {"svg", "image/svg+xml"}, {"png", "image/png"},
      {"jpg", "image/jpeg"}, {"jpeg", "image/jpeg"}, {"gif", "image/gif"},
      {"ico", "image/x-icon"}, {"woff", "font/woff"},
      {"woff2", "font/woff2"}, {"txt", "text/plain; charset=utf-8"},
      {"wasm", "application/wasm"}};
  const char *dot = strrchr(name, '.');
  for (size_t i = 0; dot != NULL && i < sizeof(types) / sizeof(*types); i++)
    if (strcasecmp(dot + 1, types[i][0]) == 0)
      return types[i][1];
  return "application/octet-stream";
}

static keep_t keep_of(const char *name) {
  static const char *const fresh[] = {"sw.js", "manifest.webmanifest",
                                      "_app/version.json", "build.json"};
  if (strcmp(name, "index.html") == 0)
    return KEEP_PAGE;
  for (size_t i = 0; i < sizeof(fresh) / sizeof(*fresh); i++)
    if (strcmp(name, fresh[i]) == 0)
      return KEEP_NOT;
  return KEEP_FOREVER;
}

/* Whether an If-None-Match names etag (weak or strong). */
static bool same_etag(const char *inm, const char *etag) {
  if (inm == NULL)
    return false;
  if (strncmp(inm, "W/", 2) == 0)
    inm += 2;
  return strcmp(inm, etag) == 0;
}

/* GET of an asset of the bundle. */
static enum MHD_Result asset(call_t *c) {
  static const char no_gzip[] = "Error: gzip is not supported by this "
                                "browser";
  const asset_t *a = c->route->data;
  const char *ae = http_header(c, MHD_HTTP_HEADER_ACCEPT_ENCODING);
  if (ae == NULL || strstr(ae, "gzip") == NULL)
    return http_send_static(c, 415, "text/plain", no_gzip,
                            sizeof(no_gzip) - 1, NULL);
  http_header_t h[6];
  size_t k = 0;
  h[k++] = (http_header_t){MHD_HTTP_HEADER_CONTENT_ENCODING, "gzip"};
  if (a->keep != KEEP_NOT) {
    h[k++] = (http_header_t){MHD_HTTP_HEADER_ETAG, a->etag};
    if (same_etag(http_header(c, MHD_HTTP_HEADER_IF_NONE_MATCH), a->etag)) {
      h[k] = (http_header_t){NULL, NULL};
      return http_send_static(c, 304, NULL, "", 0, h);
    }
  }
  if (a->keep == KEEP_PAGE) {
    h[k++] = (http_header_t){"Cross-Origin-Embedder-Policy", "require-corp"};
    h[k++] = (http_header_t){"Cross-Origin-Opener-Policy", "same-origin"};
  }
  h[k++] = (http_header_t){MHD_HTTP_HEADER_CACHE_CONTROL,
                           a->keep == KEEP_FOREVER
                               ? "public, max-age=31536000, immutable"
                               : "no-cache"};
  h[k] = (http_header_t){NULL, NULL};
  return http_send_static(c, 200, type_of(a->name), a->data, a->len, h);
}

/* GET of a file of --path's folder: the path's, a folder's index.html;
 * none above the folder. */
static enum MHD_Result file(call_t *c) {
  const ui_t *u = c->route->data;
  const char *rel = c->tail != NULL ? c->tail : "";
  char path[4096];
  for (const char *s = rel; *s != '\0';) {
    size_t n = strcspn(s, "/");
    if (n == 2 && strncmp(s, "..", 2) == 0)
      return http_error(c, 404, "not_found", NULL, "no such file");
    s += n + (s[n] == '/');
  }
  size_t rl = strlen(rel);
  int w = snprintf(path, sizeof(path), "%s/%s%s", u->dir, rel,
                   rl == 0 || rel[rl - 1] == '/' ? "index.html" : "");
  int fd = w > 0 && (size_t)w < sizeof(path)
               ? open(path, O_RDONLY | O_CLOEXEC) : -1;
  struct stat st;
  if (fd < 0 || fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
    if (fd >= 0)
      close(fd);
    return http_error(c, 404, "not_found", NULL, "no such file: %.64s",
                      rel);
  }
  return http_send_fd(c, 200, type_of(path), fd, (size_t)st.st_size, NULL);
}

/* Adds a route to u's table (its path copied). */
static int add_route(ui_t *u, size_t *k, const char *path,
                     http_handler_t fn, const void *data) {
  char *p = strdup(path);
  if (p == NULL)
    return -1;
  u->paths[*k] = p;
  u->routes[*k] = (http_route_t){p, "GET", fn, HTTP_KEYLESS, NULL, data};
  ++*k;
  return 0;
}

/* The bundle's index into u->assets: 0, or -1 with err set. */
static int read_pack(ui_t *u, const char *pack, size_t len, char *err,
                     size_t errlen) {
  const char *nl = memchr(pack, '\n', len);
  json_error_t je;
  u->index = nl != NULL ? json_loadb(pack, (size_t)(nl - pack), 0, &je)
                        : NULL;
  json_t *list = json_object_get(u->index, "assets");
  size_t n = json_array_size(list);
  if (nl == NULL || n == 0)
    return say(err, errlen, "the UI built in does not read: no index");
  const char *data = nl + 1;
  size_t room = len - (size_t)(data - pack);
  if ((u->assets = calloc(n, sizeof(*u->assets))) == NULL)
    return say(err, errlen, "out of memory");
  for (size_t i = 0; i < n; i++) {
    json_t *e = json_array_get(list, i);
    json_int_t off = json_integer_value(json_object_get(e, "off"));
    json_int_t l = json_integer_value(json_object_get(e, "len"));
    const char *name = json_string_value(json_object_get(e, "name"));
    const char *etag = json_string_value(json_object_get(e, "etag"));
    if (name == NULL || etag == NULL || off < 0 || l <= 0 ||
        (size_t)off > room || (size_t)l > room - (size_t)off)
      return say(err, errlen, "the UI built in does not read: asset "
                      "%zu", i);
    u->assets[i] = (asset_t){name, etag, data + off, (size_t)l,
                             keep_of(name)};
  }
  u->n = n;
  return 0;
}

int ui_open(ui_t **out, const char *path, char *err, size_t errlen) {
  *out = NULL;
#ifdef EVD_UI_PACK
  const char *pack = evd_ui_pack;
  size_t len = (size_t)(evd_ui_pack_end - evd_ui_pack);
#else
  const char *pack = NULL;
  size_t len = 0;
#endif
  if (path == NULL && len == 0)
    return 0;
  ui_t *u = calloc(1, sizeof(*u));
  if (u == NULL)
    return say(err, errlen, "out of memory");
  struct stat st;
  int rc = 0;
  if (path != NULL) {
    if (stat(path, &st) != 0)
      rc = say(err, errlen, "--path %s: %s", path, strerror(errno));
    else if (!S_ISDIR(st.st_mode))
      rc = say(err, errlen, "--path %s: not a folder", path);
    else if ((u->dir = strdup(path)) == NULL)
      rc = say(err, errlen, "out of memory");
  } else {
    rc = read_pack(u, pack, len, err, errlen);
  }
  /* The page at "/" and "/index.html", every other asset at its name; or
   * the folder's files under "/". */
  size_t cap = u->dir != NULL ? 2 : u->n + 2, k = 0;
  if (rc == 0 && ((u->paths = calloc(cap, sizeof(*u->paths))) == NULL ||
                  (u->routes = calloc(cap, sizeof(*u->routes))) == NULL))
    rc = say(err, errlen, "out of memory");
  for (size_t i = 0; rc == 0 && u->dir == NULL && i < u->n; i++) {
    const asset_t *a = &u->assets[i];
    char p[1024];
    snprintf(p, sizeof(p), "/%s", a->name);
    rc = (a->keep == KEEP_PAGE && add_route(u, &k, "/", asset, a) != 0) ||
                 add_route(u, &k, p, asset, a) != 0
             ? say(err, errlen, "out of memory") : 0;
  }
  if (rc == 0 && u->dir != NULL && add_route(u, &k, "/{*}", file, u) != 0)
    rc = say(err, errlen, "out of memory");
  if (rc != 0) {
    ui_close(u);
    return -1;
  }
  *out = u;
  return 0;
}

const http_route_t *ui_routes(const ui_t *u) { return u->routes; }

size_t ui_count(const ui_t *u) { return u->n; }

void ui_close(ui_t *u) {
  if (u == NULL)
    return;
  for (size_t i = 0; u->paths != NULL && u->routes != NULL &&
                     u->routes[i].path != NULL; i++)
    free(u->paths[i]);
  free(u->paths);
  free(u->routes);
  free(u->assets);
  free(u->dir);
  json_decref(u->index);
  free(u);
}

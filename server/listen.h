/* The listening socket: parsed from --listen, opened before the HTTP layer
 * starts so that an ephemeral port can be reported and a Unix socket path
 * cleaned up. */
#ifndef EVICTD_LISTEN_H
#define EVICTD_LISTEN_H

#include <stddef.h>

/* Opens a non-blocking listening socket for `addr`: "host:port" (IPv4
 * address or host name), "[v6]:port" (port 0 picks one) or "unix:/path".
 * A stale Unix socket file (nobody accepting on it) is replaced; any other
 * existing file is left alone and refused. Stores the descriptor in *fd and
 * the bound address, printable, in name[0..len).
 * Returns 0; EVD_EINVAL for a malformed address (with a reason in name);
 * EVD_EIO with errno set when the system refuses. */
int evd_listen_open(const char *addr, int *fd, char *name, size_t len);

/* Removes the socket file of a "unix:" address (nothing for others). */
void evd_listen_cleanup(const char *addr);

#endif

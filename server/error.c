/* Names for the EVD_E* error codes. */
#include "error.h"

const char *evd_strerror(int err) {
  switch (err) {
  case EVD_OK: return "success";
  case EVD_EINVAL: return "invalid argument";
  case EVD_ENOMEM: return "out of memory";
  case EVD_ESTALE: return "position not newer than the newest held";
  case EVD_EFULL: return "window full: evict before stepping again";
  case EVD_EEXIST: return "already exists";
  case EVD_ENOENT: return "no such object";
  case EVD_ELIMIT: return "limit reached";
  case EVD_EIO: return "input/output error";
  case EVD_ECORRUPT: return "corrupt or foreign data";
  case EVD_EBUSY: return "tentative positions pending: commit first";
  }
  return "unknown error";
}

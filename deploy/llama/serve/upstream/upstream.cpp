/* upstream.h: common's own log, the one setting the bridge has that no
 * request carries. */
#include "serve/upstream/upstream.h"

#include "log.h"

void up_init(bool debug) {
  common_log_set_verbosity_thold(debug ? LOG_LEVEL_DEBUG : LOG_LEVEL_WARN);
}

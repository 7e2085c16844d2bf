/* Fault injection points for the fault tests (tests/faults): a build with
 * -DEVD_FIU asks libfiu whether the named point should fail now (enabled at
 * run time with fiu-ctrl); every other build compiles them to 0. Points of
 * our own rather than libfiu's POSIX preload: that one fails every write()
 * of the process, libuv's wake-ups included, and misses openat/renameat.
 * The points: evictd/journal/{write,sync,open} and
 * evictd/snapshot/{rename,fork}. */
#ifndef EVICTD_FAULT_H
#define EVICTD_FAULT_H

#ifdef EVD_FIU
#define FIU_ENABLE 1 /* fiu.h declares the functions only then */
#include <fiu.h>
#define EVD_FAULT(name) fiu_fail(name)
#else
#define EVD_FAULT(name) 0
#endif

#endif

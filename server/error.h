/* Error codes shared by every evictd module: functions return 0 or one of
 * these negative values, and evd_strerror() names it. */
#ifndef EVICTD_ERROR_H
#define EVICTD_ERROR_H

enum {
  EVD_OK = 0,
  EVD_EINVAL = -1,  /* an argument is out of its documented range */
  EVD_ENOMEM = -2,  /* an allocation failed */
  EVD_ESTALE = -3,  /* a position is not newer than the newest one held */
  EVD_EFULL = -4,   /* the window has no room for what was asked */
  EVD_EEXIST = -5,  /* the object exists already (with another config) */
  EVD_ENOENT = -6,  /* no such object */
  EVD_ELIMIT = -7,  /* a configured limit was reached */
  EVD_EIO = -8,     /* a system call failed; see errno where documented */
  EVD_ECORRUPT = -9, /* a file is damaged or not one of ours */
  EVD_EBUSY = -10    /* tentative positions are pending (commit first) */
};

/* Returns a static, human-readable name for an EVD_E* code (never NULL). */
const char *evd_strerror(int err);

#endif

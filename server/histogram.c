/* The latency histograms' bucket bounds, shared by every histogram so that
 * GET /metrics exports them all alike. */
#include "histogram.h"

const double evd_histogram_bounds[EVD_HISTOGRAM_NBUCKETS] = {
    0.000005, 0.00001, 0.000025, 0.00005, 0.0001, 0.00025, 0.0005,
    0.001,    0.0025,  0.005,    0.01,    0.025,  0.1,     1.0};

/* The parts of build/test_window: test_window.c holds the suite and the
 * vectors' replay; each other file adds its tests to the case it is given,
 * in the order the suite lists them. */
#ifndef EVICTD_TESTS_TEST_WINDOW_H
#define EVICTD_TESTS_TEST_WINDOW_H

#include <check.h>

void window_edge_tests(TCase *tc);         /* test_window_edges.c */
void window_model_tests(TCase *tc);        /* test_window_model.c */
void window_engine_tests(TCase *tc);       /* test_window_engine.c */
void window_engine_model_tests(TCase *tc); /* test_window_model.c */
void window_state_tests(TCase *tc);        /* test_window_state.c */

#endif

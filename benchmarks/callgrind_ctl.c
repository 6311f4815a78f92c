/* Callgrind's client requests, callable from Python through ctypes (benchmarks/instructions.py).
 * Outside valgrind each is a no-op. */
#include <valgrind/callgrind.h>

void cg_start(void) { CALLGRIND_START_INSTRUMENTATION; }
void cg_stop(void) { CALLGRIND_STOP_INSTRUMENTATION; }
void cg_zero(void) { CALLGRIND_ZERO_STATS; }
void cg_dump(const char *why) { CALLGRIND_DUMP_STATS_AT(why); }

/* fork_guard.c: a child that os.fork() makes (a DataLoader's fork worker) must not deadlock
 * before its first line of Python.
 *
 * CPython before 3.12 (and 3.11 before the fix of gh-112275) reinitialises the runtime's lock of
 * its thread list (HEAD_LOCK, _PyRuntime.interpreters.mutex) in the child only after it has
 * taken that lock (PyOS_AfterFork_Child: _PyEval_ReInitThreads, then
 * _PyRuntimeState_ReInitThreads). A thread that held it at fork() leaves it locked in the
 * child, which then waits forever. A native thread holds it, without the GIL, whenever it makes
 * a thread state to call into Python (PyGILState_Ensure: pybind11's gil_scoped_acquire); torch's
 * gloo threads (pt_gloo_runloop) do, so a rank forking its loader's workers right after a
 * collective hangs now and then (tests/frameworks/lightning_driver.py's DDP on 2 CPU ranks did).
 *
 * Here the lock is taken before every fork() of the process (pthread_atfork's prepare, on the
 * thread that forks) and released after it, in the parent and in the child: no fork happens while
 * another thread holds it. Taking it cannot deadlock: a thread holding it never waits for
 * anything else (CPython takes it last: under the GIL, or before waiting for it).
 *
 * C, not C++: CPython's internal headers (the layout of _PyRuntime) compile only as C. Built for
 * the Python the extension is built for; 3.11's layout of the lock is the same in every 3.11
 * release (the extension built against one 3.11 is loaded by others). */
#include <patchlevel.h> /* PY_VERSION_HEX alone: the internals are read only where needed */

#if PY_VERSION_HEX >= 0x03080000 && PY_VERSION_HEX < 0x030C0000
#define Py_BUILD_CORE 1
#include <Python.h>
#include <internal/pycore_runtime.h>
#include <pthread.h>

static PyThread_type_lock held; /* the lock taken before this fork, released after it */

static void before_fork(void) {
  held = _PyRuntime.interpreters.mutex; /* NULL once the runtime is finalised */
  if (held != NULL) PyThread_acquire_lock(held, WAIT_LOCK);
}

static void after_fork(void) {
  if (held != NULL) PyThread_release_lock(held);
  held = NULL;
}

int distsampler_guard_fork(void) {
  return pthread_atfork(before_fork, after_fork, after_fork) == 0;
}
#else
int distsampler_guard_fork(void) { return 0; } /* 3.12 and later reinitialise the lock first */
#endif

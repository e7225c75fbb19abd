// parent.h: a process that ends with the process that started it (Linux), for DataLoader workers.
//
// PyTorch's worker watches its parent only after its set-up (ManagerWatchdog reads getppid()
// after unpickling the dataset, after worker_init_fn): a rank killed before that leaves the
// worker watching init, blocked forever. A worker that calls end_with_process first thing ends
// with the rank whatever the moment: one of the kernel's death signal and the check after it
// catches every death.
#ifndef DISTSAMPLER_LAUNCH_PARENT_H_
#define DISTSAMPLER_LAUNCH_PARENT_H_

#include <cstdint>

namespace distsampler {

// Ends this process (_exit(1)) when process `creator` ends, from now on, and at once when it
// already has. `death_signal`: `creator` is this process's parent and the thread that started
// this process lives as long as `creator` (a fork or spawn from its main thread), so
// prctl(PR_SET_PDEATHSIG, SIGKILL) covers it, checked once against getppid(). The signal follows
// the parent *thread*, and a forkserver's worker's parent is the server, which outlives the rank:
// without `death_signal`, or when the kernel refuses it, a detached thread waits on a pidfd of
// `creator` (polling /proc every half second where there is no pidfd_open, Linux < 5.3).
// Returns false, doing nothing, off Linux.
bool end_with_process(int64_t creator, bool death_signal);

}  // namespace distsampler

#endif  // DISTSAMPLER_LAUNCH_PARENT_H_

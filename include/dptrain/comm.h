/* comm: the little message passing the data-parallel training loop needs (docs/distributed.md).
 * Built on MPI when CMake found it (DPT_MPI, on by default); otherwise, and whenever the
 * process was not launched by mpirun/mpiexec, it is a serial fallback: one rank, rank 0,
 * where a broadcast is a no-op and point-to-point calls are errors.
 * Every call except dpt_comm_init/_finalize/_abort is collective or matched across ranks
 * in the same order; errors return DPT_EIO with a message naming the peer (an MPI error
 * usually means a rank died: the caller should stop the job with dpt_comm_abort).
 * Thread safety: call from the main thread only (MPI_THREAD_FUNNELED). */
#ifndef DPTRAIN_COMM_H
#define DPTRAIN_COMM_H

#include <dptrain/core.h>

/* Declarations below are exported from libdptrain.so; everything else is hidden. */
#pragma GCC visibility push(default)
#ifdef __cplusplus
extern "C" {
#endif

/* Initializes MPI when this build has it AND the process was started by an MPI launcher
 * (OMPI_COMM_WORLD_SIZE / PMI_SIZE / PMIX_RANK in the environment), so a plain
 * `dptrain train` never touches MPI. Idempotent. */
dpt_status dpt_comm_init(int *argc, char ***argv);
/* MPI_Finalize when dpt_comm_init started MPI. */
void dpt_comm_finalize(void);
/* Under MPI (several ranks): stops every rank of the job (MPI_Abort) with the exit code
 * and does not return (flush your own buffered output first). In serial mode it returns
 * at once: ending the process is then the caller's decision. */
void dpt_comm_abort(int code);
int dpt_comm_rank(void);     /* 0 in serial mode */
int dpt_comm_size(void);     /* 1 in serial mode */
int dpt_comm_compiled(void); /* 1 when this build links MPI */
const char *dpt_comm_library(void); /* "Open MPI v4.1.4 ..." or "none" */

dpt_status dpt_comm_send(const void *buf, size_t bytes, int to, int tag);
dpt_status dpt_comm_recv(void *buf, size_t bytes, int from, int tag);
/* bytes from root to every rank (in place). */
dpt_status dpt_comm_bcast(void *buf, size_t bytes, int root);
dpt_status dpt_comm_barrier(void);
/* Payload bytes this rank has sent so far: point-to-point sends, plus at a broadcast's
 * root its payload times (size - 1), i.e. what a flat broadcast moves; MPI's own tree
 * moves the same total. For bench/mpi_scaling. */
uint64_t dpt_comm_bytes_sent(void);

#ifdef __cplusplus
}
#endif
#pragma GCC visibility pop
#endif

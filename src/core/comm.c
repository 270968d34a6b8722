/* Message passing for data-parallel training: MPI when built with it and launched by an
 * MPI launcher, else one serial rank. Large buffers go in pieces of at most 1 GiB so the
 * int counts of the MPI API never overflow. */
#include <dptrain/comm.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#ifdef DPT_HAVE_MPI
#include <mpi.h>
#endif

static int g_rank = 0, g_size = 1;
#ifdef DPT_HAVE_MPI
static int g_mpi = 0; /* MPI_Init was called by dpt_comm_init */
#endif
static uint64_t g_sent = 0;

int dpt_comm_compiled(void) {
#ifdef DPT_HAVE_MPI
    return 1;
#else
    return 0;
#endif
}

const char *dpt_comm_library(void) {
#ifdef DPT_HAVE_MPI
    static char buf[MPI_MAX_LIBRARY_VERSION_STRING + 1];
    int len = 0;
    if (!buf[0] && MPI_Get_library_version(buf, &len) == MPI_SUCCESS) {
        char *nl = strpbrk(buf, "\n,");
        if (nl) *nl = 0;
    }
    return buf[0] ? buf : "MPI";
#else
    return "none";
#endif
}

#ifdef DPT_HAVE_MPI
/* Started by mpirun/mpiexec (Open MPI, MPICH/Hydra, PMIx launchers)? */
static int launched_by_mpi(void) {
    const char *vars[] = {"OMPI_COMM_WORLD_SIZE", "PMI_SIZE", "PMIX_RANK", "PMI_RANK"};
    for (size_t i = 0; i < sizeof vars / sizeof vars[0]; i++)
        if (getenv(vars[i])) return 1;
    return 0;
}
#endif

dpt_status dpt_comm_init(int *argc, char ***argv) {
#ifdef DPT_HAVE_MPI
    if (g_mpi || !launched_by_mpi()) return DPT_OK;
    int provided = 0;
    if (MPI_Init_thread(argc, argv, MPI_THREAD_FUNNELED, &provided) != MPI_SUCCESS)
        return dpt_set_error(DPT_EIO, "MPI_Init failed");
    /* Errors come back as return codes so we can name the peer before aborting. */
    MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
    MPI_Comm_rank(MPI_COMM_WORLD, &g_rank);
    MPI_Comm_size(MPI_COMM_WORLD, &g_size);
    g_mpi = 1;
#else
    (void)argc;
    (void)argv;
#endif
    return DPT_OK;
}

void dpt_comm_finalize(void) {
#ifdef DPT_HAVE_MPI
    if (g_mpi) MPI_Finalize();
    g_mpi = 0;
    g_rank = 0;
    g_size = 1;
#endif
}

/* The library never ends the caller's process on its own: in serial mode there are no
 * other ranks to stop, so this returns and the caller exits (or not) itself. */
void dpt_comm_abort(int code) {
#ifdef DPT_HAVE_MPI
    if (g_mpi) MPI_Abort(MPI_COMM_WORLD, code ? code : 1);
#else
    (void)code;
#endif
}

int dpt_comm_rank(void) { return g_rank; }
int dpt_comm_size(void) { return g_size; }
uint64_t dpt_comm_bytes_sent(void) { return g_sent; }

#define PIECE ((size_t)1 << 30)

#ifdef DPT_HAVE_MPI
static dpt_status mpi_fail(int rc, const char *what, int peer) {
    char msg[MPI_MAX_ERROR_STRING + 1];
    int len = 0;
    if (MPI_Error_string(rc, msg, &len) != MPI_SUCCESS) snprintf(msg, sizeof msg, "error %d", rc);
    return dpt_set_error(DPT_EIO, "MPI %s (rank %d, peer rank %d) failed: %s (did a rank die?)", what, g_rank, peer,
                         msg);
}
#endif

dpt_status dpt_comm_send(const void *buf, size_t bytes, int to, int tag) {
#ifdef DPT_HAVE_MPI
    DPT_CHECK(g_mpi && to >= 0 && to < g_size, DPT_EINVAL, "comm send: no rank %d of %d", to, g_size);
    const char *p = buf;
    for (size_t off = 0; off < bytes || (bytes == 0 && off == 0); off += PIECE) {
        size_t n = bytes - off < PIECE ? bytes - off : PIECE;
        int rc = MPI_Send(p + off, (int)n, MPI_BYTE, to, tag, MPI_COMM_WORLD);
        if (rc != MPI_SUCCESS) return mpi_fail(rc, "send", to);
        if (bytes == 0) break;
    }
    g_sent += bytes;
    return DPT_OK;
#else
    return dpt_set_error(DPT_EINVAL, "comm send to rank %d: this build has no MPI (one rank only)", to);
#endif
}

dpt_status dpt_comm_recv(void *buf, size_t bytes, int from, int tag) {
#ifdef DPT_HAVE_MPI
    DPT_CHECK(g_mpi && from >= 0 && from < g_size, DPT_EINVAL, "comm recv: no rank %d of %d", from, g_size);
    char *p = buf;
    for (size_t off = 0; off < bytes || (bytes == 0 && off == 0); off += PIECE) {
        size_t n = bytes - off < PIECE ? bytes - off : PIECE;
        MPI_Status st;
        int rc = MPI_Recv(p + off, (int)n, MPI_BYTE, from, tag, MPI_COMM_WORLD, &st);
        if (rc != MPI_SUCCESS) return mpi_fail(rc, "receive", from);
        int got = 0;
        MPI_Get_count(&st, MPI_BYTE, &got);
        DPT_CHECK((size_t)got == n, DPT_EIO, "MPI receive from rank %d: %d bytes, expected %zu", from, got, n);
        if (bytes == 0) break;
    }
    return DPT_OK;
#else
    return dpt_set_error(DPT_EINVAL, "comm receive from rank %d: this build has no MPI (one rank only)", from);
#endif
}

dpt_status dpt_comm_bcast(void *buf, size_t bytes, int root) {
    if (g_size == 1) return DPT_OK;
#ifdef DPT_HAVE_MPI
    char *p = buf;
    for (size_t off = 0; off < bytes; off += PIECE) {
        size_t n = bytes - off < PIECE ? bytes - off : PIECE;
        int rc = MPI_Bcast(p + off, (int)n, MPI_BYTE, root, MPI_COMM_WORLD);
        if (rc != MPI_SUCCESS) return mpi_fail(rc, "broadcast", root);
    }
    if (g_rank == root) g_sent += (uint64_t)bytes * (uint64_t)(g_size - 1);
#endif
    return DPT_OK;
}

dpt_status dpt_comm_barrier(void) {
#ifdef DPT_HAVE_MPI
    if (g_mpi) {
        int rc = MPI_Barrier(MPI_COMM_WORLD);
        if (rc != MPI_SUCCESS) return mpi_fail(rc, "barrier", -1);
    }
#endif
    return DPT_OK;
}

/* The one lock around FFTW's non-reentrant calls. FFTW's planner, plan destruction and its
 * allocator share global state (wisdom, twiddle cache): only fftw_execute* on distinct
 * plans is thread safe. Every module that plans (the PLD accountant, the scattering layer)
 * takes this lock for every other FFTW call, so they may run on several threads at once.
 * Internal to libdptrain; not installed. */
#ifndef DPTRAIN_CORE_FFTW_LOCK_H
#define DPTRAIN_CORE_FFTW_LOCK_H

#include <pthread.h>

extern pthread_mutex_t dpt_fftw_lock;

#endif

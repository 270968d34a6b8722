/* The process-wide FFTW lock (core/fftw_lock.h). */
#include "core/fftw_lock.h"

pthread_mutex_t dpt_fftw_lock = PTHREAD_MUTEX_INITIALIZER;

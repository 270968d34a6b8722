#!/usr/bin/env bash
# bench/perf_phases.py (the per-phase profile of docs/dpulr.md) on a made-up `perf report`:
# each line lands in its phase, an unknown function in "other" (listed with --other), and no
# profile on standard input is an error. No binary, no perf; well under a second.
set -u
TOOL=bench/perf_phases.py
source "$(dirname "$0")/lib/py_tool.sh"
cat > "$T/report" <<'REP'
# Samples: 1K of event 'cpu-clock:ppp'
#
    30.00%  libopenblasp-r0.3.21.so  [.] sgemm_kernel_ZEN
     5.00%  libopenblasp-r0.3.21.so  [.] sgemm_oncopy_ZEN
    20.00%  libdptrain.so.0.1.0      [.] act_forward._omp_fn.1
            |
            ---act_forward._omp_fn.1
    10.00%  libdptrain.so.0.1.0      [.] fill_chunk
     4.00%  libcrypto.so.3           [.] 0x00000000001a2b3c
     8.00%  libdptrain.so.0.1.0      [.] noisy_task
     6.00%  libdptrain.so.0.1.0      [.] dpt_loss
     1.00%  libm.so.6                [.] __log1p_fma
     3.00%  libdptrain.so.0.1.0      [.] dpt_optim_step._omp_fn.2
     2.00%  [kernel.kallsyms]        [k] clear_page_erms
     7.00%  libdptrain.so.0.1.0      [.] some_new_function
REP
run 0 --other < "$T/report"
has out "| the copies' GEMMs (OpenBLAS) | 35.0% |"
has out "| GELU (\`act_forward\`) | 20.0% |"
has out "libcrypto's keystreams) | 14.0% |"
has out "\`ulr_finish\`) | 8.0% |"
has out "\`exp\`) | 7.0% |"
has out "| the optimizer, row copies, the kernel, OpenMP | 5.0% |"
has out "| other | 7.0% |"
has out "| (not itemized by perf report) | 4.0% |"
has err "other: some_new_function"
printf 'no profile here\n' > "$T/empty"
run 2 < "$T/empty"
has err "no profile lines on standard input"
echo "perf phases ok"

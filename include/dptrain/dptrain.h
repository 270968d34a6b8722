/* dptrain: differentially private training, privacy accounting and auditing in C.
 * The umbrella header: includes every public header, so `#include <dptrain/dptrain.h>`
 * and linking libdptrain (`pkg-config --cflags --libs dptrain`, or the CMake target
 * dptrain::dptrain) is all a program needs. Each header states its module's memory
 * ownership and thread safety; docs/api.md is the guide. */
#ifndef DPTRAIN_DPTRAIN_H
#define DPTRAIN_DPTRAIN_H

#include <dptrain/version.h>

#include <dptrain/core.h>
#include <dptrain/comm.h>
#include <dptrain/accounting.h>
#include <dptrain/data.h>
#include <dptrain/nn.h>
#include <dptrain/optim.h>
#include <dptrain/privacy.h>
#include <dptrain/io.h>
#include <dptrain/train.h>
#include <dptrain/mechanism.h>
#include <dptrain/inference.h>
#include <dptrain/audit.h>

#endif

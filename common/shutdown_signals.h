// The signals gnmrd and gnmr-relay take as a request to stop, and how they
// wait for one (programs/gnmrd/main.cc, programs/gnmr-relay/main.cc).
//
// Every signal whose default action ends the process is a graceful stop
// (SIGTERM, SIGINT, SIGQUIT, SIGUSR1, SIGUSR2, ...), so that no stray kill
// leaves streams cut, snapshots unwritten or a socket file behind; SIGHUP
// is ignored (neither program reloads anything), and the caller says so.
// SIGPIPE and SIGXFSZ are ignored: a write fails with an error instead.
// The synchronous faults (SIGSEGV, SIGBUS, ...) are not taken: they cannot
// be handled safely.
#pragma once

#include <signal.h>

#include <functional>
#include <string>

namespace gnmr {

// Blocks the stop signals (and SIGHUP) in the calling thread, before any
// other thread starts so that every thread inherits the mask, and ignores
// SIGPIPE and SIGXFSZ. Returns the set WaitForStopSignal takes.
sigset_t BlockStopSignals();

// Waits until a stop signal arrives and returns its name ("SIGTERM").
// Each SIGHUP meanwhile calls `on_hangup` and is otherwise ignored.
std::string WaitForStopSignal(const sigset_t& signals, const std::function<void()>& on_hangup);

// "SIGTERM", or "signal N" for one without a name.
std::string SignalName(int sig);

}  // namespace gnmr

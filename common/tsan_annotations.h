// Happens-before annotations for ThreadSanitizer (scripts/test.sh --tsan,
// docs/sanitizers.md); no-ops in every other build.
//
// Why: Debian's gRPC is not instrumented, so TSan cannot see the ordering
// gRPC itself guarantees between a callback reactor's calls, which run on
// different gRPC threads: the reactor's construction before its reactions,
// StartRead before its OnReadDone, StartWrite before its OnWriteDone, every
// reaction before OnDone. Without them every field a reactor touches in two
// reactions looks like a race, and a real one (a field the job's thread and
// a reaction share without the lock) drowns in the noise. The reactor says
// what gRPC promises with these two macros, one sync address per promise,
// and TSan checks the rest:
//
//   GNMR_HAPPENS_BEFORE(&order_.read);  StartRead(&in_);
//   void OnReadDone(bool ok) { GNMR_HAPPENS_AFTER(&order_.read); ... }
//
// (daemon/server/session_reactor.cc). What gRPC does inside those calls
// stays unchecked; scripts/sanitizers/tsan.supp says which of its frames
// are left out and why.
#pragma once

#if defined(__SANITIZE_THREAD__)
#define GNMR_TSAN_ENABLED 1
#elif defined(__has_feature)
#if __has_feature(thread_sanitizer)
#define GNMR_TSAN_ENABLED 1
#endif
#endif

#ifdef GNMR_TSAN_ENABLED
extern "C" void __tsan_acquire(void* addr);
extern "C" void __tsan_release(void* addr);
// Everything this thread did so far happens before whatever a thread does
// after GNMR_HAPPENS_AFTER on the same address.
#define GNMR_HAPPENS_BEFORE(addr) __tsan_release(static_cast<void*>(addr))
#define GNMR_HAPPENS_AFTER(addr) __tsan_acquire(static_cast<void*>(addr))
#else
#define GNMR_HAPPENS_BEFORE(addr) static_cast<void>(addr)
#define GNMR_HAPPENS_AFTER(addr) static_cast<void>(addr)
#endif

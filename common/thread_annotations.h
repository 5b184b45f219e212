// Clang thread-safety annotations (-Wthread-safety), named as Abseil names
// them with a GNMR_ prefix. They let the compiler check the locking rules
// that used to live in comments and in `...Locked` function names: which
// mutex guards a field, which functions must be called with it held, which
// must be called without it. Clang checks them at compile time; on other
// compilers (GCC, the main build) every macro expands to nothing.
//
// Use them with gnmr::Mutex and gnmr::MutexLock (common/mutex.h), which
// carry the capability attributes std::mutex lacks in libstdc++:
//
//   class Counter {
//    public:
//     void Add(int n) GNMR_EXCLUDES(mu_) {
//       MutexLock lock(mu_);
//       AddLocked(n);
//     }
//
//    private:
//     void AddLocked(int n) GNMR_REQUIRES(mu_) { total_ += n; }
//
//     Mutex mu_;
//     int total_ GNMR_GUARDED_BY(mu_) = 0;
//   };
//
// Reading or writing `total_` without `mu_`, or calling AddLocked without
// it, is then a compile error in the clang builds (scripts/test.sh --asan and
// --tsan pass -Wthread-safety -Werror=thread-safety; docs/sanitizers.md,
// "Thread-safety analysis"). Where a pattern cannot be expressed (a lock
// handed from one function to another), use GNMR_NO_THREAD_SAFETY_ANALYSIS
// on the narrowest function and say why next to it.
// Reference: https://clang.llvm.org/docs/ThreadSafetyAnalysis.html
#pragma once

#if defined(__clang__) && defined(__has_attribute)
#if __has_attribute(guarded_by)
#define GNMR_THREAD_ANNOTATION_(x) __attribute__((x))
#endif
#endif
#ifndef GNMR_THREAD_ANNOTATION_
#define GNMR_THREAD_ANNOTATION_(x)
#endif

// A class whose objects are capabilities ("mutex"): gnmr::Mutex.
#define GNMR_CAPABILITY(name) GNMR_THREAD_ANNOTATION_(capability(name))
// An RAII class that holds a capability for its lifetime: gnmr::MutexLock.
#define GNMR_SCOPED_CAPABILITY GNMR_THREAD_ANNOTATION_(scoped_lockable)

// A field read and written only with `mu` held.
#define GNMR_GUARDED_BY(mu) GNMR_THREAD_ANNOTATION_(guarded_by(mu))
// A pointer (or smart pointer) whose pointee is used only with `mu` held.
#define GNMR_PT_GUARDED_BY(mu) GNMR_THREAD_ANNOTATION_(pt_guarded_by(mu))
// Lock order: this mutex is taken before / after the named ones.
#define GNMR_ACQUIRED_BEFORE(...) GNMR_THREAD_ANNOTATION_(acquired_before(__VA_ARGS__))
#define GNMR_ACQUIRED_AFTER(...) GNMR_THREAD_ANNOTATION_(acquired_after(__VA_ARGS__))

// The caller holds the mutexes (exclusively / at least shared).
#define GNMR_REQUIRES(...) GNMR_THREAD_ANNOTATION_(requires_capability(__VA_ARGS__))
#define GNMR_REQUIRES_SHARED(...) GNMR_THREAD_ANNOTATION_(requires_shared_capability(__VA_ARGS__))
// The caller must not hold them (the function takes them itself).
#define GNMR_EXCLUDES(...) GNMR_THREAD_ANNOTATION_(locks_excluded(__VA_ARGS__))

// The function takes / releases the mutexes (no argument: `this`).
#define GNMR_ACQUIRE(...) GNMR_THREAD_ANNOTATION_(acquire_capability(__VA_ARGS__))
#define GNMR_ACQUIRE_SHARED(...) GNMR_THREAD_ANNOTATION_(acquire_shared_capability(__VA_ARGS__))
#define GNMR_RELEASE(...) GNMR_THREAD_ANNOTATION_(release_capability(__VA_ARGS__))
#define GNMR_RELEASE_SHARED(...) GNMR_THREAD_ANNOTATION_(release_shared_capability(__VA_ARGS__))
// The function takes the mutexes when it returns `result` (TryLock).
#define GNMR_TRY_ACQUIRE(...) GNMR_THREAD_ANNOTATION_(try_acquire_capability(__VA_ARGS__))
// The function checks at run time that the caller holds the mutex.
#define GNMR_ASSERT_CAPABILITY(x) GNMR_THREAD_ANNOTATION_(assert_capability(x))
// The function returns (a reference to) the named capability.
#define GNMR_RETURN_CAPABILITY(x) GNMR_THREAD_ANNOTATION_(lock_returned(x))

// Turns the analysis off for one function. Always with a comment saying why
// the pattern cannot be expressed.
#define GNMR_NO_THREAD_SAFETY_ANALYSIS GNMR_THREAD_ANNOTATION_(no_thread_safety_analysis)

// Whether this build runs under a sanitizer: tests that measure a
// process's memory (VmHWM) keep their behaviour checks there but not their
// byte bounds, since AddressSanitizer's redzones and its quarantine of
// freed memory (256 MiB by default) are not the program's footprint.
#pragma once

namespace gnmr::testing {

#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
inline constexpr bool kUnderSanitizer = true;
#elif defined(__has_feature)
#if __has_feature(address_sanitizer) || __has_feature(thread_sanitizer)
inline constexpr bool kUnderSanitizer = true;
#else
inline constexpr bool kUnderSanitizer = false;
#endif
#else
inline constexpr bool kUnderSanitizer = false;
#endif

}  // namespace gnmr::testing

/* GNMR_EXPORT marks the public API of <gnmr/...>: the C API, the C++
 * classes and functions a trainer calls. Built with -DGNMR_SHARED=ON every
 * target is compiled with hidden symbols (-fvisibility=hidden,
 * -fvisibility-inlines-hidden), so libgnmr_client.so and
 * libgnmr_client_local.so export what carries this mark and nothing else
 * (docs/architecture.md, "Shared libraries"). In the static build it
 * changes nothing. The same on both sides of the library (ELF needs no
 * import/export pair). C and C++. Installed as <gnmr/export.h>. */
#ifndef GNMR_EXPORT_H_
#define GNMR_EXPORT_H_

/* C++ takes the standard attribute form, which may follow [[nodiscard]]
 * (class [[nodiscard]] GNMR_EXPORT Status); C the GNU one. */
#if defined(__cplusplus) && (defined(__GNUC__) || defined(__clang__))
#define GNMR_EXPORT [[gnu::visibility("default")]]
#elif defined(__GNUC__) || defined(__clang__)
#define GNMR_EXPORT __attribute__((visibility("default")))
#else
#define GNMR_EXPORT
#endif

#endif /* GNMR_EXPORT_H_ */

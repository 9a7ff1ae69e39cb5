// The command line's heap on transparent huge pages (see huge_heap.hpp).
#include "huge_heap.hpp"

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <iterator>
#include <string>

#if defined(__linux__) && defined(__GLIBC__)
#include <gnu/libc-version.h>
#include <unistd.h>
#define STRATA_HUGE_HEAP_SUPPORTED 1
#endif

#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
#define STRATA_UNDER_SANITIZER 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer) || __has_feature(thread_sanitizer) || __has_feature(memory_sanitizer)
#define STRATA_UNDER_SANITIZER 1
#endif
#endif

namespace strata::cli {

void reexec_with_huge_heap(char** argv) {
#if defined(STRATA_HUGE_HEAP_SUPPORTED) && !defined(STRATA_UNDER_SANITIZER)
    if (std::getenv("GLIBC_TUNABLES") != nullptr) return;
    if (const char* opt = std::getenv("STRATA_HUGE_HEAP"); opt != nullptr && std::strcmp(opt, "0") == 0)
        return;
    // valgrind runs the program with its preload libraries; an exec would leave the tool behind.
    if (const char* pre = std::getenv("LD_PRELOAD");
        pre != nullptr && std::strstr(pre, "vgpreload") != nullptr)
        return;
    int major = 0;
    int minor = 0;
    if (std::sscanf(gnu_get_libc_version(), "%d.%d", &major, &minor) != 2 || major < 2 ||
        (major == 2 && minor < 35))
        return;
    std::ifstream thp("/sys/kernel/mm/transparent_hugepage/enabled");
    const std::string mode((std::istreambuf_iterator<char>(thp)), std::istreambuf_iterator<char>());
    if (mode.empty() || mode.find("[never]") != std::string::npos) return;
    if (setenv("GLIBC_TUNABLES", "glibc.malloc.hugetlb=1", 1) != 0) return;
    execv("/proc/self/exe", argv);
    unsetenv("GLIBC_TUNABLES");  // the exec failed: go on with the ordinary heap
#else
    (void)argv;
#endif
}

void use_huge_heap_if_large(long long largest_gpus, bool in_mpi_job, char** argv) {
    if (!in_mpi_job && largest_gpus >= kHugeHeapGpus) reexec_with_huge_heap(argv);
}

long long largest_gpus(const std::vector<Scenario>& cases) {
    long long n = 0;
    for (const auto& sc : cases)
        n = std::max<long long>(n, sc.execution.gpus());
    return n;
}

}  // namespace strata::cli

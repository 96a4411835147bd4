/* x86 vendor / family from cpuid (lp_cpu.h); the answer cached once (cpuid traps to the
 * hypervisor under a VM: microseconds, too slow for every product). */
#include "lp_cpu.h"

#if defined(__x86_64__) || defined(__i386__)
#include <cpuid.h>
#include <string.h>

int lp_cpu_amd_family(void) {
    unsigned a, b, c, d;
    if (!__get_cpuid(0, &a, &b, &c, &d)) return 0;
    char vendor[13];
    memcpy(vendor, &b, 4), memcpy(vendor + 4, &d, 4), memcpy(vendor + 8, &c, 4);
    vendor[12] = 0;
    if (strcmp(vendor, "AuthenticAMD") != 0 || !__get_cpuid(1, &a, &b, &c, &d)) return 0;
    const unsigned base = (a >> 8) & 0xf;
    return (int)(base == 0xf ? base + ((a >> 20) & 0xff) : base);
}
#else
int lp_cpu_amd_family(void) { return 0; }
#endif

static int q8k_few = -1; /* -1: not asked yet; else the value in force */
static int q8k_few_auto(void) { return lp_cpu_amd_family() != 0x19; }

int lp_cpu_q8k_few(void) {
    int v = __atomic_load_n(&q8k_few, __ATOMIC_RELAXED);
    if (v < 0) { /* (threads racing here store the same answer) */
        v = q8k_few_auto();
        __atomic_store_n(&q8k_few, v, __ATOMIC_RELAXED);
    }
    return v;
}

int lp_cpu_q8k_few_set(int on) {
    const int v = on < 0 ? q8k_few_auto() : !!on;
    __atomic_store_n(&q8k_few, v, __ATOMIC_RELAXED);
    return v;
}

/* lp_cpu.c: which x86 CPU the kernels run on (cpuid's vendor and family), for the choices the
 * ISA level alone does not settle.  LLAMAPY_CPU_ISA picks the level (kernels/build.py); these
 * queries only choose between two forms of the same level. */
#ifndef LP_CPU_H
#define LP_CPU_H

/* cpuid's display family (base + extended, e.g. 0x19 for AMD Zen 3 / Zen 4) of an AMD CPU
 * ("AuthenticAMD"); 0 on any other vendor or off x86. */
int lp_cpu_amd_family(void);

/* Do the VNNI levels read 1-4 rows of Q4_K / Q6_K as ggml's Q8_K (1) or in the split int16 form
 * (0)?  Measured, one-row products (kernel_ab) and decode:
 *   Intel Xeon (Emerald Rapids, family 6 model 207), avx512+vnni, -t 1: the split int16 form ran
 *     1.12-1.21x slower a call than Q8_K, the 1B decode 1.06x faster on Q8_K (decode_ab --cpu-time);
 *   AMD Zen 4 (family 0x19), avx512+vnni, 2 threads: Q8_K read 0.93-0.97x of the split form.
 *   AMD Zen 5 (family 0x1a model 2), avx512+vnni: Q8_K's 1B decode step 1.32x (1 thread, CPU time)
 *     and 1.31x (2 threads) the split form's, the 8B shape's (8 layers, at the memory) 0.99x -- the
 *     two forms toggled step by step in one process (lp_cpu_q8k_few_set between the steps).
 * So: 0 on AMD family 0x19, 1 elsewhere.  lp_cpu_q8k_few_set
 * forces it (1 / 0) or restores the CPU's answer (-1); it returns the value now in force.  Set it
 * only between products (lp_xrows_q8k sizes and fills the activation rows by it). */
int lp_cpu_q8k_few(void);
int lp_cpu_q8k_few_set(int on);

#endif

/* SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause) */
#ifndef SLUICE_BPF_VERDICT_H
#define SLUICE_BPF_VERDICT_H

/* The neutral tc verdict: continue with the next filter / tcx program, so
 * programs that are not ours keep working (TC_ACT_UNSPEC == TCX_NEXT). */
#define SL_TC_NEXT (-1)
#define SL_TC_OK 0
#define SL_TC_SHOT 2
#define SL_TC_STOLEN 4 /* consumed: the sender sees NET_XMIT_SUCCESS (cls_bpf only) */

#endif

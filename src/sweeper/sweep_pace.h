/*-------------------------------------------------------------------------
 *
 * sweep_pace.h
 *	  How fast a sweep goes (sweep_pace.c): the sweeper's pause between two
 *	  batches, which yields to claims while they run.
 *
 *-------------------------------------------------------------------------
 */
#ifndef DEDUP_SWEEP_PACE_H
#define DEDUP_SWEEP_PACE_H

#include "portability/instr_time.h"

/* one sweep, its batches and the pauses between them */
typedef struct DedupSweepPace
{
	instr_time	batch_start;	/* when the current batch began */
	double		owed_ms;		/* yielding owed, not slept yet (< 1 ms) */
	int64		batches;		/* batches begun */
	int64		yields;			/* pauses that yielded to claims */
	double		yielded_ms;		/* their time */
} DedupSweepPace;

extern void dedup_sweep_pace_start(DedupSweepPace *pace);
extern void dedup_sweep_pace_batch(DedupSweepPace *pace);
extern void dedup_sweep_pace_batch_done(DedupSweepPace *pace);

#endif							/* DEDUP_SWEEP_PACE_H */

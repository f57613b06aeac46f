/*-------------------------------------------------------------------------
 *
 * sweep_pace.c
 *	  How fast a sweep goes: the sweeper's pause between two batches, which
 *	  keeps it out of the claims' way while they run and lets it go at full
 *	  speed when nothing does.
 *
 * Whether claims ran is the claims' heartbeat (heartbeat.c), which the
 * sweeper takes after each batch, learning whether a claim ran during that
 * batch or the pause before it: a claim every few milliseconds, anywhere on
 * the server, is enough to make the sweep yield.
 *
 * The pause is a duty cycle, as autovacuum's cost delay is for VACUUM, but
 * measured in time rather than in pages: while claims run, a batch that
 * took t is followed by a pause of t * (100 - share) / share, so that the
 * sweep works dedup.sweep_busy_share percent of the time and leaves the
 * rest of its core to the claims (10%: a pause of 9 t).  Pauses shorter
 * than a millisecond, which a latch cannot time, are owed and added to the
 * next one; one pause is at most MAX_YIELD_MS.  When no claim ran, there is
 * no pause: an idle server has its backlog swept at full speed.
 * dedup.sweep_batch_delay keeps its meaning: a pause of at least that
 * between any two batches, claims or not, which also counts as yielding.
 * dedup.sweep_busy_share = 100 never yields.
 *
 * Without shared memory (dedup not preloaded) there is no sweeper.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "miscadmin.h"
#include "storage/latch.h"
#include "utils/timestamp.h"

#include "claim/claim.h"
#include "compat.h"
#include "guc.h"
#include "sweeper/sweep_pace.h"

/* the longest pause that yields to claims, in ms */
#define MAX_YIELD_MS 1000

/* A sweep begins: only claims from now on count. */
void
dedup_sweep_pace_start(DedupSweepPace *pace)
{
	memset(pace, 0, sizeof(DedupSweepPace));
	(void) dedup_claims_heartbeat_take();
}

/*
 * Sleep ms, with the wait event the kind of pause is shown as.  The whole
 * of it: a latch set before (a new process starts with its latch set) or
 * during the pause (a reload) does not cut it short; interrupts are served.
 */
static void
sweep_pace_sleep(long ms, bool yielding)
{
	static uint32 delay_event = 0;
	static uint32 yield_event = 0;
	TimestampTz end = TimestampTzPlusMilliseconds(GetCurrentTimestamp(), ms);
	long		left;

	while ((left = TimestampDifferenceMilliseconds(GetCurrentTimestamp(),
												   end)) > 0)
	{
		(void) WaitLatch(MyLatch,
						 WL_LATCH_SET | WL_TIMEOUT | WL_EXIT_ON_PM_DEATH,
						 left,
						 yielding ?
						 dedup_wait_event("DedupSweepYield", &yield_event) :
						 dedup_wait_event("DedupSweepBatchDelay", &delay_event));
		ResetLatch(MyLatch);
		CHECK_FOR_INTERRUPTS();
	}
}

/*
 * A batch is about to begin: first, unless it is the sweep's first, pause
 * for dedup.sweep_batch_delay or what the last batch owes the claims,
 * whichever is longer; then start its clock.
 */
void
dedup_sweep_pace_batch(DedupSweepPace *pace)
{
	if (pace->batches > 0)
	{
		long		owed = (long) pace->owed_ms;
		long		ms = Max(owed, (long) dedup_sweep_batch_delay);

		if (ms > 0)
		{
			sweep_pace_sleep(ms, owed > dedup_sweep_batch_delay);
			if (owed > 0)
			{
				pace->yields++;
				pace->yielded_ms += ms;
			}
			/* a longer delay covered what was owed; keep the rest owed */
			pace->owed_ms = Max(0.0, pace->owed_ms - ms);
		}
	}
	pace->batches++;
	INSTR_TIME_SET_CURRENT(pace->batch_start);
}

/*
 * A batch has ended: if claims ran during it or the pause before it, owe
 * them the pause that keeps the sweep to dedup.sweep_busy_share of the
 * time.
 */
void
dedup_sweep_pace_batch_done(DedupSweepPace *pace)
{
	instr_time	took;
	double		ms;

	if (!dedup_claims_heartbeat_take() || dedup_sweep_busy_share >= 100)
		return;

	INSTR_TIME_SET_CURRENT(took);
	INSTR_TIME_SUBTRACT(took, pace->batch_start);
	ms = INSTR_TIME_GET_MILLISEC(took);
	pace->owed_ms += ms * (100 - dedup_sweep_busy_share) / dedup_sweep_busy_share;
	pace->owed_ms = Min(pace->owed_ms, (double) MAX_YIELD_MS);
}

/*-------------------------------------------------------------------------
 *
 * claim_stats.h
 *	  Per-consumer claim counters, in shared memory under their own LWLock
 *	  (claim_stats.c): what a claim reports to them.
 *
 *-------------------------------------------------------------------------
 */
#ifndef DEDUP_CLAIM_STATS_H
#define DEDUP_CLAIM_STATS_H

#include "portability/instr_time.h"
#include "utils/timeout.h"

typedef enum DedupClaimOutcome
{
	DEDUP_CLAIMED,				/* returned true */
	DEDUP_DUPLICATE,			/* returned false */
	/* raised an error, by class: see dedup_claim_failure() */
	DEDUP_SERIALIZATION_FAILURE,
	DEDUP_DEADLOCK,
	DEDUP_LOCK_TIMEOUT,
	DEDUP_CANCELED,
	DEDUP_OTHER_ERROR
} DedupClaimOutcome;

#define DEDUP_CLAIM_OUTCOMES (DEDUP_OTHER_ERROR + 1)

/*
 * What the claims of one call (one key, or a batch) add to their consumer's
 * counters: gathered in the backend key by key (dedup_stats_tally), added
 * to shared memory once per call (dedup_stats_flush).
 */
typedef struct DedupClaimTally
{
	int64		outcomes[DEDUP_CLAIM_OUTCOMES];
	int64		lock_waits;		/* claims that waited for a lock */
	double		claim_time;		/* ms, claims that got an answer */
	double		max_claim_time; /* ms, the longest of them */
	double		lock_wait_time; /* ms, claims that waited for a lock */
} DedupClaimTally;

extern void dedup_claim_stats_shmem_request(void);
extern void dedup_claim_stats_shmem_startup(void);
extern DedupClaimOutcome dedup_claim_failure(int sqlerrcode);
extern void dedup_stats_tally(DedupClaimTally *tally,
							  DedupClaimOutcome outcome, bool waited,
							  const instr_time *start);
extern void dedup_stats_flush(text *consumer, text *stream,
							  const DedupClaimTally *tally);

/*
 * Did this backend wait for a lock since get_timeout_start_time() returned
 * mark (for DEADLOCK_TIMEOUT)?  Every lock wait re-arms the deadlock
 * timeout (ProcSleep), so a new start time means it did: for a claim,
 * nearly always for an in-flight claim of the same key.
 */
static inline bool
dedup_claim_waited(TimestampTz mark)
{
	return get_timeout_start_time(DEADLOCK_TIMEOUT) != mark;
}

#endif							/* DEDUP_CLAIM_STATS_H */
